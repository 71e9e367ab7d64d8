//! `sparsetir gen KIND [options] -o FILE`: write a generated matrix (see
//! `sparsetir_formats::gen`) as Matrix Market (or FROSTT `.tns`) through a buffered writer.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use sparsetir_formats::gen::{self, RmatParams};
use sparsetir_formats::{Coo, Field};

use crate::Failure;

/// The output file of every generator.
#[derive(Args, Debug)]
pub struct OutArg {
    /// Output file: `.mtx` (Matrix Market, coordinate, general) or `.tns` (FROSTT).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum GenKind {
    /// Graph500 R-MAT directed graph (a, b, c = 0.57, 0.19, 0.19), deduplicated, exactly
    /// `--edges` distinct edges. `--permute --no-self-loops` give the semantics of
    /// `bench/peers.py --gen-rmat` (same sizes and distribution, not the same bytes).
    Rmat {
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        edges: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Relabel vertices with a random permutation.
        #[arg(long)]
        permute: bool,
        /// Drop edges (v, v).
        #[arg(long)]
        no_self_loops: bool,
        #[arg(long, default_value_t = 0.57)]
        a: f64,
        #[arg(long, default_value_t = 0.19)]
        b: f64,
        #[arg(long, default_value_t = 0.19)]
        c: f64,
        #[command(flatten)]
        out: OutArg,
    },
    /// Chung–Lu undirected power-law graph (symmetric, no self loops).
    ChungLu {
        #[arg(long)]
        nodes: usize,
        /// Power-law exponent (> 1; 2 to 3 is typical).
        #[arg(long, default_value_t = 2.5)]
        exponent: f64,
        /// Mean degree.
        #[arg(long)]
        avg_degree: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        out: OutArg,
    },
    /// Uniform random matrix with exactly round(density * rows * cols) entries.
    Uniform {
        #[arg(long)]
        rows: usize,
        /// Defaults to `--rows`.
        #[arg(long)]
        cols: Option<usize>,
        #[arg(long)]
        density: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        out: OutArg,
    },
    /// Banded matrix: (i, j) stored when |i - j| <= bandwidth.
    Banded {
        #[arg(long)]
        rows: usize,
        /// Defaults to `--rows`.
        #[arg(long)]
        cols: Option<usize>,
        #[arg(long)]
        bandwidth: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        out: OutArg,
    },
    /// Block-sparse matrix: a random `density` fraction of the RxC blocks stored in full.
    Block {
        #[arg(long)]
        rows: usize,
        /// Defaults to `--rows`.
        #[arg(long)]
        cols: Option<usize>,
        /// Block size `R` or `RxC`.
        #[arg(long, value_name = "RxC")]
        block: String,
        #[arg(long)]
        density: f64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        out: OutArg,
    },
    /// Longformer attention mask: sliding window |i - j| <= window plus global tokens.
    Longformer {
        #[arg(long)]
        seq_len: usize,
        /// One-sided window radius.
        #[arg(long)]
        window: usize,
        /// The first `global` tokens attend everywhere and are attended by all.
        #[arg(long, default_value_t = 0)]
        global: usize,
        #[command(flatten)]
        out: OutArg,
    },
    /// Pixelfly attention mask: flat block butterfly plus global block stripes.
    Pixelfly {
        /// Matrix size (a multiple of `--block`).
        #[arg(long)]
        size: usize,
        #[arg(long)]
        block: usize,
        /// Number of global block rows/columns (the low-rank part).
        #[arg(long, default_value_t = 0)]
        global: usize,
        #[command(flatten)]
        out: OutArg,
    },
    /// Random 2:4 mask (or n:m with --n/--m): n random columns of every m consecutive ones.
    Mask24 {
        #[arg(long)]
        rows: usize,
        /// A multiple of `--m`.
        #[arg(long)]
        cols: usize,
        #[arg(long, default_value_t = 2)]
        n: usize,
        #[arg(long, default_value_t = 4)]
        m: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        out: OutArg,
    },
}

fn parse_block(s: &str) -> Result<(usize, usize), Failure> {
    let bad = || {
        Failure(format!(
            "error: --block expects R or RxC (positive integers), got `{s}`"
        ))
    };
    let (r, c) = match s.split_once(['x', 'X']) {
        Some((r, c)) => (r, c),
        None => (s, s),
    };
    let r: usize = r.trim().parse().map_err(|_| bad())?;
    let c: usize = c.trim().parse().map_err(|_| bad())?;
    Ok((r, c))
}

/// Runs one generator and writes its output.
pub fn run(kind: GenKind) -> Result<(), Failure> {
    let (coo, out, what) = match kind {
        GenKind::Rmat {
            nodes,
            edges,
            seed,
            permute,
            no_self_loops,
            a,
            b,
            c,
            out,
        } => {
            let p = RmatParams {
                nodes,
                edges,
                a,
                b,
                c,
                permute,
                self_loops: !no_self_loops,
            };
            let what = format!(
                "R-MAT nodes={nodes} edges={edges} seed={seed} (a,b,c)=({a},{b},{c}) \
                 permute={permute} self_loops={}",
                !no_self_loops
            );
            (gen::rmat(&p, seed)?, out, what)
        }
        GenKind::ChungLu {
            nodes,
            exponent,
            avg_degree,
            seed,
            out,
        } => (
            gen::chung_lu(nodes, exponent, avg_degree, seed)?,
            out,
            format!(
                "Chung-Lu nodes={nodes} exponent={exponent} avg_degree={avg_degree} seed={seed}"
            ),
        ),
        GenKind::Uniform {
            rows,
            cols,
            density,
            seed,
            out,
        } => {
            let cols = cols.unwrap_or(rows);
            (
                gen::uniform(rows, cols, density, seed)?,
                out,
                format!("uniform {rows}x{cols} density={density} seed={seed}"),
            )
        }
        GenKind::Banded {
            rows,
            cols,
            bandwidth,
            seed,
            out,
        } => {
            let cols = cols.unwrap_or(rows);
            (
                gen::banded(rows, cols, bandwidth, seed)?,
                out,
                format!("banded {rows}x{cols} bandwidth={bandwidth} seed={seed}"),
            )
        }
        GenKind::Block {
            rows,
            cols,
            block,
            density,
            seed,
            out,
        } => {
            let cols = cols.unwrap_or(rows);
            let (br, bc) = parse_block(&block)?;
            (
                gen::block_sparse(rows, cols, br, bc, density, seed)?,
                out,
                format!("block-sparse {rows}x{cols} block={br}x{bc} density={density} seed={seed}"),
            )
        }
        GenKind::Longformer {
            seq_len,
            window,
            global,
            out,
        } => (
            gen::longformer(seq_len, window, global)?,
            out,
            format!("Longformer mask seq_len={seq_len} window={window} global={global}"),
        ),
        GenKind::Pixelfly {
            size,
            block,
            global,
            out,
        } => (
            gen::pixelfly(size, block, global)?,
            out,
            format!("Pixelfly mask size={size} block={block} global={global}"),
        ),
        GenKind::Mask24 {
            rows,
            cols,
            n,
            m,
            seed,
            out,
        } => (
            gen::mask_nm(rows, cols, n, m, seed)?,
            out,
            format!("{n}:{m} mask {rows}x{cols} seed={seed}"),
        ),
    };
    write_coo(&out.output, &coo, &what)
}

/// Writes a COO by the output's extension: `.tns` as FROSTT, anything else as Matrix Market.
pub fn write_coo(path: &Path, coo: &Coo, comment: &str) -> Result<(), Failure> {
    let io = |e: std::io::Error| Failure(format!("error: cannot write {}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let is_tns = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tns"));
    if is_tns {
        write_tns_body(&mut w, coo, comment).map_err(io)?;
    } else {
        if coo.rank() != 2 {
            return Err(Failure(format!(
                "error: {}: Matrix Market holds matrices; this tensor has rank {} (write .tns)",
                path.display(),
                coo.rank()
            )));
        }
        write_mtx_body(&mut w, coo, comment).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn write_mtx_body(w: &mut impl Write, coo: &Coo, comment: &str) -> std::io::Result<()> {
    let pattern = coo.field == Field::Pattern && coo.values.iter().all(|&v| v == 1.0);
    let field = if pattern { "pattern" } else { "real" };
    writeln!(w, "%%MatrixMarket matrix coordinate {field} general")?;
    if !comment.is_empty() {
        writeln!(w, "% {comment}")?;
    }
    writeln!(w, "{} {} {}", coo.dims[0], coo.dims[1], coo.nnz())?;
    let mut line = String::with_capacity(64);
    for (c, v) in coo.coords.iter().zip(&coo.values) {
        line.clear();
        push_uint(&mut line, c[0] + 1);
        line.push(' ');
        push_uint(&mut line, c[1] + 1);
        if !pattern {
            use std::fmt::Write as _;
            let _ = write!(line, " {v:?}");
        }
        line.push('\n');
        w.write_all(line.as_bytes())?;
    }
    Ok(())
}

fn write_tns_body(w: &mut impl Write, coo: &Coo, comment: &str) -> std::io::Result<()> {
    if !comment.is_empty() {
        writeln!(w, "# {comment}")?;
    }
    // Header form: `rank nnz`, then the dimensions, so empty trailing slices survive.
    writeln!(w, "{} {}", coo.rank(), coo.nnz())?;
    let dims: Vec<String> = coo.dims.iter().map(|d| d.to_string()).collect();
    writeln!(w, "{}", dims.join(" "))?;
    let mut line = String::with_capacity(64);
    for (c, v) in coo.coords.iter().zip(&coo.values) {
        line.clear();
        for &x in c {
            push_uint(&mut line, x + 1);
            line.push(' ');
        }
        use std::fmt::Write as _;
        let _ = write!(line, "{v:?}");
        line.push('\n');
        w.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// Appends a non-negative integer in decimal (faster than `write!` for the bulk of a file).
fn push_uint(s: &mut String, x: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = x.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if x < 0 {
        s.push('-');
    }
    for &b in &buf[i..] {
        s.push(b as char);
    }
}
