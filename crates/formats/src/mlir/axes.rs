//! Mapping an MLIR encoding to the equivalent stage-I sparse-axis declarations (`T.sp.*`
//! script text), or saying plainly why none exists.
//!
//! Level → axis rules:
//! - leading `dense`/`batch` levels: one `dense_fixed` each, fused into a single
//!   `dense_fixed(product)` when two or more of them are followed by a sparse level (the 2:4
//!   layout `G = dense_fixed(m * n / 4)`);
//! - a leading `compressed` level gets a placeholder parent `O = dense_fixed(1)` (DCSR);
//! - `compressed` → `compressed_varied` (`sorted=False` when `nonunique`);
//! - `singleton` → `compressed_fixed(parent, (size, 1), indices)`;
//! - `structured[n, m]` → `compressed_fixed(parent, (m, n), indices)`;
//! - `dense` below a sparse level → its own `dense_fixed` root (BSR's in-block axes); no sparse
//!   level may follow it, since its parent positions would be tuples of several axes;
//! - the seed's ELL counting form `[c](i, j) -> (c * K * i : dense, i : dense, j : compressed)`
//!   → `I = dense_fixed(n_i)`, `J = compressed_fixed(I, (n_j, K), indices)`.
//!
//! Level expressions must be a dimension `d`, a block index `d floordiv k` or an in-block
//! offset `d mod k`. Sizes are written in terms of the dimension sizes `n_<dim>`.

use std::fmt;

use super::storage::counting_form;
use super::{AffineExpr, Encoding, LevelFormat};

/// Why an encoding has no sparse-axis equivalent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoEquivalent {
    pub reason: String,
}

impl fmt::Display for NoEquivalent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no sparse-axes equivalent: {}", self.reason)
    }
}

impl std::error::Error for NoEquivalent {}

fn none<T>(reason: impl Into<String>) -> Result<T, NoEquivalent> {
    Err(NoEquivalent {
        reason: reason.into(),
    })
}

fn ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A level expression the axes can express.
#[derive(Clone, Copy)]
enum Shape {
    Dim(usize),
    Block(usize, i64),
    Offset(usize, i64),
}

struct Decl {
    name: String,
    text: String,
    /// The axis coordinate in terms of the dimensions.
    coord: String,
}

struct Builder<'e> {
    enc: &'e Encoding,
    dims: Vec<String>,
    decls: Vec<Decl>,
    handles: Vec<String>,
    sizes: Vec<String>,
    idtype: &'static str,
    notes: Vec<String>,
}

impl Builder<'_> {
    fn dim_size(&mut self, d: usize) -> String {
        let s = format!("n_{}", ident(&self.dims[d]));
        if !self.sizes.contains(&s) {
            self.sizes.push(s.clone());
        }
        s
    }
    fn size_text(&mut self, shape: Shape) -> String {
        match shape {
            Shape::Dim(d) => self.dim_size(d),
            Shape::Block(d, 1) => self.dim_size(d),
            Shape::Block(d, k) => format!("({} + {}) // {k}", self.dim_size(d), k - 1),
            Shape::Offset(_, k) => k.to_string(),
        }
    }
    fn coord_text(&self, shape: Shape) -> String {
        match shape {
            Shape::Dim(d) => self.dims[d].clone(),
            Shape::Block(d, k) => format!("{} // {k}", self.dims[d]),
            Shape::Offset(d, k) => format!("{} % {k}", self.dims[d]),
        }
    }
    fn axis_name(&self, base: String, l: usize) -> String {
        if self.decls.iter().any(|d| d.name == base) {
            format!("{base}{l}")
        } else {
            base
        }
    }
    fn shape_name(&self, shape: Shape, l: usize) -> String {
        let base = match shape {
            Shape::Dim(d) => ident(&self.dims[d]).to_uppercase(),
            Shape::Block(d, _) => format!("{}O", ident(&self.dims[d]).to_uppercase()),
            Shape::Offset(d, _) => format!("{}I", ident(&self.dims[d]).to_uppercase()),
        };
        self.axis_name(base, l)
    }
    fn push(&mut self, name: String, text: String, coord: String) {
        self.decls.push(Decl { name, text, coord });
    }
    fn handle(&mut self, h: String) -> String {
        self.handles.push(h.clone());
        h
    }
    fn size_param(&mut self, s: String) -> String {
        self.sizes.push(s.clone());
        s
    }

    fn finish(mut self, format: &str) -> String {
        let a = "a".to_string();
        self.handles.insert(0, a.clone());
        let axes: Vec<&str> = self.decls.iter().map(|d| d.name.as_str()).collect();
        let mut out = String::new();
        out.push_str(&format!("# {format}: {}\n", self.enc.to_text()));
        let coords: Vec<&str> = self.decls.iter().map(|d| d.coord.as_str()).collect();
        let elem = self.dims.join(", ");
        out.push_str(&format!(
            "# buffer A[{}] holds element ({elem}) at coordinates ({})\n",
            axes.join(", "),
            coords.join(", ")
        ));
        for n in &self.notes {
            out.push_str(&format!("# {n}\n"));
        }
        out.push_str(&format!("# handles: {}\n", self.handles.join(", ")));
        out.push_str(&format!("# sizes: {}\n", self.sizes.join(", ")));
        for d in &self.decls {
            out.push_str(&format!("{} = {}\n", d.name, d.text));
        }
        let comma = if axes.len() == 1 { "," } else { "" };
        out.push_str(&format!(
            "A = T.sp.match_buffer({a}, ({}{comma}), \"float32\")\n",
            axes.join(", ")
        ));
        out
    }
}

fn shape_of(e: &AffineExpr) -> Option<Shape> {
    match e {
        AffineExpr::Var(d) => Some(Shape::Dim(*d)),
        AffineExpr::FloorDiv(a, k) => match **a {
            AffineExpr::Var(d) => Some(Shape::Block(d, *k)),
            _ => None,
        },
        AffineExpr::Mod(a, k) => match **a {
            AffineExpr::Var(d) => Some(Shape::Offset(d, *k)),
            _ => None,
        },
        _ => None,
    }
}

fn classify(enc: &Encoding, shapes: &[Shape]) -> &'static str {
    use LevelFormat::*;
    let f: Vec<LevelFormat> = enc.levels.iter().map(|l| l.format).collect();
    let dim = |s: &Shape| match s {
        Shape::Dim(d) | Shape::Block(d, _) | Shape::Offset(d, _) => *d,
    };
    let order: Vec<usize> = shapes.iter().map(dim).collect();
    let plain = shapes.iter().all(|s| matches!(s, Shape::Dim(_)));
    match (f.as_slice(), enc.dims.len()) {
        ([Dense, Compressed], 2) if plain => {
            if order == [0, 1] {
                "CSR"
            } else {
                "CSC"
            }
        }
        ([Compressed, Compressed], 2) if plain => {
            if order == [0, 1] {
                "DCSR"
            } else {
                "DCSC"
            }
        }
        ([Compressed, Singleton], 2) if plain => "COO",
        ([Compressed, Singleton, ..], _) if plain => "COO",
        ([Dense, Compressed, Dense, Dense], 2)
            if matches!(
                shapes,
                [
                    Shape::Block(..),
                    Shape::Block(..),
                    Shape::Offset(..),
                    Shape::Offset(..)
                ]
            ) =>
        {
            if order == [0, 1, 0, 1] {
                "BSR"
            } else {
                "BSC"
            }
        }
        _ if matches!(f.last(), Some(Structured { .. })) => "n:m structured",
        _ if f.iter().all(|x| matches!(x, Dense | Batch)) => "dense",
        _ => "sparse axes",
    }
}

impl Encoding {
    /// The equivalent stage-I declarations: comment lines (`# <format>: <encoding>`, the
    /// buffer's coordinate order, `# handles: ...` and `# sizes: ...` naming the parameters
    /// the declarations use), the axes, and `A = T.sp.match_buffer(a, (...), "float32")`.
    pub fn to_sparse_axes(&self) -> Result<String, NoEquivalent> {
        let dims = self.dim_names();
        if let Some(d) = self.dims.iter().find(|d| d.slice.is_some()) {
            return none(format!(
                "dimension `{}` is a slice (a strided view of a larger tensor); sparse axes \
                 describe whole tensors",
                d.name
            ));
        }
        if self.levels.is_empty() {
            return none("a rank-0 encoding has no levels to declare as axes");
        }
        let idtype = if self.pos_width == 64 || self.crd_width == 64 {
            "int64"
        } else {
            "int32"
        };
        let mut b = Builder {
            enc: self,
            dims: dims.clone(),
            decls: Vec::new(),
            handles: Vec::new(),
            sizes: Vec::new(),
            idtype,
            notes: Vec::new(),
        };
        if matches!(self.pos_width, 8 | 16) || matches!(self.crd_width, 8 | 16) {
            b.notes
                .push("narrow posWidth/crdWidth are widened to int32 index arrays".into());
        }
        if self.implicit_val.is_some_and(|v| v != 0.0) {
            b.notes.push(
                "implicitVal becomes the buffer's default_value (add default_value=...)".into(),
            );
        }
        for (l, lvl) in self.levels.iter().enumerate() {
            if lvl.format == LevelFormat::LooseCompressed {
                return none(format!(
                    "level {l} is loose_compressed (lo/hi segments that may leave holes); no \
                     axis kind stores separate segment bounds"
                ));
            }
            if lvl.props.nonordered {
                return none(format!(
                    "level {l} is nonordered; sparse axes keep each parent's coordinates in a \
                     defined sorted order"
                ));
            }
            if lvl.format == LevelFormat::Batch
                && self.levels[..l]
                    .iter()
                    .any(|p| p.format != LevelFormat::Batch)
            {
                return none(format!(
                    "level {l} is a batch level after a non-batch level; only leading batch \
                     levels map to dense_fixed axes"
                ));
            }
        }
        if !self.symbols.is_empty() {
            return self.ell(b);
        }
        let mut shapes = Vec::new();
        for (l, lvl) in self.levels.iter().enumerate() {
            match shape_of(&lvl.expr) {
                Some(s) => shapes.push(s),
                None => {
                    return none(format!(
                        "level {l}'s expression `{}` is not a dimension, a block index \
                         `d floordiv k` or an in-block offset `d mod k`",
                        lvl.expr.to_text(&dims, &self.symbols)
                    ))
                }
            }
        }
        for (d, name) in dims.iter().enumerate() {
            let mut plain = 0;
            let mut blocks = Vec::new();
            let mut offsets = Vec::new();
            for s in &shapes {
                match *s {
                    Shape::Dim(x) if x == d => plain += 1,
                    Shape::Block(x, k) if x == d => blocks.push(k),
                    Shape::Offset(x, k) if x == d => offsets.push(k),
                    _ => {}
                }
            }
            let ok = (plain == 1 && blocks.is_empty() && offsets.is_empty())
                || (plain == 0 && blocks.len() == 1 && blocks == offsets);
            if !ok {
                return none(format!(
                    "dimension `{name}` must appear once as a level, or be split into one \
                     `{name} floordiv k` and one `{name} mod k` with the same k"
                ));
            }
        }
        let format = classify(self, &shapes);
        let nl = self.levels.len();
        let lead = self
            .levels
            .iter()
            .take_while(|l| matches!(l.format, LevelFormat::Dense | LevelFormat::Batch))
            .count();
        let mut start = lead;
        // `true` while the last axis's element count equals the level's number of positions.
        let mut chain_ok = true;
        if lead >= 2 && lead < nl {
            let sizes: Vec<String> = (0..lead).map(|l| b.size_text(shapes[l])).collect();
            let factors: Vec<String> = sizes
                .iter()
                .map(|s| {
                    if s.contains(' ') {
                        format!("({s})")
                    } else {
                        s.clone()
                    }
                })
                .collect();
            let mut coord = b.coord_text(shapes[0]);
            for l in 1..lead {
                let c = b.coord_text(shapes[l]);
                let outer = if l > 1 { format!("({coord})") } else { coord };
                coord = format!("{outer} * {} + {c}", factors[l]);
            }
            let name = b.axis_name("G".into(), 0);
            b.push(
                name,
                format!("T.sp.dense_fixed({})", factors.join(" * ")),
                coord,
            );
            b.notes.push(format!(
                "levels 0..{lead} (all dense) are fused into one row-major dense_fixed axis G"
            ));
        } else if lead == 0 {
            b.push("O".into(), "T.sp.dense_fixed(1)".into(), "0".into());
        } else {
            start = 0;
        }
        for (l, (lvl, &shape)) in self.levels.iter().zip(&shapes).enumerate().skip(start) {
            let name = b.shape_name(shape, l);
            let coord = b.coord_text(shape);
            let size = b.size_text(shape);
            let is_sparse = !matches!(lvl.format, LevelFormat::Dense | LevelFormat::Batch);
            if is_sparse && !chain_ok {
                return none(format!(
                    "level {l} is sparse below a dense level that follows a sparse level; its \
                     parent positions are tuples of several axes, which no single parent axis \
                     enumerates"
                ));
            }
            let parent = b.decls.last().map(|d| d.name.clone()).unwrap_or_default();
            let id = b.idtype;
            let text = match lvl.format {
                LevelFormat::Dense | LevelFormat::Batch => {
                    chain_ok = l < lead;
                    format!("T.sp.dense_fixed({size})")
                }
                LevelFormat::Compressed => {
                    let nnz = b.size_param(format!("nnz_{l}"));
                    let indptr = b.handle(format!("indptr_{l}"));
                    let indices = b.handle(format!("indices_{l}"));
                    let sorted = if lvl.props.nonunique {
                        b.notes.push(format!(
                            "level {l} is nonunique: its indices repeat, so the axis is \
                             declared sorted=False"
                        ));
                        ", sorted=False"
                    } else {
                        ""
                    };
                    format!(
                        "T.sp.compressed_varied({parent}, ({size}, {nnz}), ({indptr}, \
                         {indices}), \"{id}\"{sorted})"
                    )
                }
                LevelFormat::Singleton => {
                    let indices = b.handle(format!("indices_{l}"));
                    format!("T.sp.compressed_fixed({parent}, ({size}, 1), {indices}, \"{id}\")")
                }
                LevelFormat::Structured { n, m } => {
                    let indices = b.handle(format!("indices_{l}"));
                    format!("T.sp.compressed_fixed({parent}, ({m}, {n}), {indices}, \"{id}\")")
                }
                LevelFormat::LooseCompressed => return none("loose_compressed level"),
            };
            b.push(name, text, coord);
        }
        if format == "CSC" || format == "DCSC" || format == "BSC" {
            b.notes.push(
                "column-major: the buffer's first coordinate is the column, so index it \
                 A[j, i] for element (i, j)"
                    .into(),
            );
        }
        Ok(b.finish(format))
    }

    fn ell(&self, mut b: Builder<'_>) -> Result<String, NoEquivalent> {
        let not_ell = |why: &str| {
            none(format!(
                "the map uses symbols ({}) but is not the ELL counting form \
                 `[c](i, j) -> (c * K * i : dense, i : dense, j : compressed)`: {why}",
                self.symbols.join(", ")
            ))
        };
        if self.dims.len() != 2 || self.levels.len() != 3 {
            return not_ell("it needs 2 dimensions and 3 levels");
        }
        let Some((_, d0, k)) = counting_form(&self.levels[0].expr) else {
            return not_ell("level 0 is not a product of one symbol, one dimension and constants");
        };
        let Some(width) = k.filter(|&k| k > 0) else {
            return not_ell("level 0 has no positive constant giving the number of slots");
        };
        let f: Vec<LevelFormat> = self.levels.iter().map(|l| l.format).collect();
        let d1 = 1 - d0;
        let ok =
            f == [
                LevelFormat::Dense,
                LevelFormat::Dense,
                LevelFormat::Compressed,
            ] && self.levels[1].expr == AffineExpr::Var(d0)
                && self.levels[2].expr == AffineExpr::Var(d1)
                && self.levels.iter().all(|l| !l.props.nonunique);
        if !ok {
            return not_ell("the levels must be (count : dense, i : dense, j : compressed)");
        }
        let rows = b.dim_size(d0);
        let cols = b.dim_size(d1);
        let rn = b.shape_name(Shape::Dim(d0), 1);
        let rc = b.coord_text(Shape::Dim(d0));
        b.push(rn.clone(), format!("T.sp.dense_fixed({rows})"), rc);
        let cn = b.shape_name(Shape::Dim(d1), 2);
        let cc = b.coord_text(Shape::Dim(d1));
        let indices = b.handle("indices_2".into());
        let id = b.idtype;
        b.push(
            cn,
            format!("T.sp.compressed_fixed({rn}, ({cols}, {width}), {indices}, \"{id}\")"),
            cc,
        );
        b.notes.push(format!(
            "ELL: {width} slots per {}; the encoding stores slot-major, the axes row-major; \
             short rows are padded (values 0)",
            self.dims[d0].name
        ));
        Ok(b.finish("ELL"))
    }
}
