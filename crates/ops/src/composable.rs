//! Composable formats of SpMM (SPEC §5.3): the format names `sparsetir bench --format` takes
//! (`csr`, `hyb`, `hyb(parts=P,buckets=1,2,4)`, `bsr:B`, `ell`, `auto`), the stage-III schedule
//! of a hyb-decomposed csrmm (one section per (part, bucket) block, from
//! `schedules/hyb_{init,bucket}.sched`), and the choice of candidates for `auto` from the
//! matrix's degree distribution and the feature width.

use std::fmt;

/// Bucket widths are powers of two up to at most this.
pub const MAX_BUCKET: usize = 4096;

/// A storage format for SpMM's sparse operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// The catalog's csrmm.
    Csr,
    /// Column parts × degree buckets; `None` fields are chosen from the matrix
    /// ([`default_buckets`], one part).
    Hyb {
        parts: Option<usize>,
        buckets: Option<Vec<usize>>,
    },
    /// Blocked CSR with square `B × B` blocks.
    Bsr(usize),
    /// ELL (one bucket as wide as the longest row).
    Ell,
    /// Chosen per matrix and feature width.
    Auto,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Csr => f.write_str("csr"),
            Format::Hyb { parts, buckets } => {
                let mut fields = Vec::new();
                if let Some(p) = parts {
                    fields.push(format!("parts={p}"));
                }
                if let Some(b) = buckets {
                    let b: Vec<String> = b.iter().map(|x| x.to_string()).collect();
                    fields.push(format!("buckets={}", b.join(",")));
                }
                if fields.is_empty() {
                    f.write_str("hyb")
                } else {
                    write!(f, "hyb({})", fields.join(","))
                }
            }
            Format::Bsr(b) => write!(f, "bsr:{b}"),
            Format::Ell => f.write_str("ell"),
            Format::Auto => f.write_str("auto"),
        }
    }
}

/// Why a format name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad format `{text}`: {reason} (expected csr, hyb, hyb(parts=P,buckets=1,2,4,...), bsr:B, ell or auto)")]
pub struct FormatError {
    pub text: String,
    pub reason: String,
}

fn positive(text: &str, what: &str, v: &str) -> Result<usize, FormatError> {
    match v.trim().parse::<usize>() {
        Ok(x) if x >= 1 => Ok(x),
        _ => Err(FormatError {
            text: text.to_string(),
            reason: format!("{what} must be a positive integer, got `{}`", v.trim()),
        }),
    }
}

impl Format {
    /// Parses a format name (see the module documentation).
    pub fn parse(text: &str) -> Result<Format, FormatError> {
        let t = text.trim();
        let err = |reason: &str| FormatError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        match t {
            "csr" => return Ok(Format::Csr),
            "hyb" => {
                return Ok(Format::Hyb {
                    parts: None,
                    buckets: None,
                })
            }
            "ell" => return Ok(Format::Ell),
            "auto" => return Ok(Format::Auto),
            _ => {}
        }
        if let Some(b) = t.strip_prefix("bsr:") {
            let b = positive(text, "the block size", b)?;
            if b > 64 {
                return Err(err("the block size must be at most 64"));
            }
            return Ok(Format::Bsr(b));
        }
        let Some(inner) = t.strip_prefix("hyb(").and_then(|r| r.strip_suffix(')')) else {
            return Err(err("unknown format"));
        };
        let (mut parts, mut buckets) = (None, None);
        // `parts=2,buckets=1,2,4`: a field starts at `name=`; later bare numbers extend it.
        let mut field: Option<&str> = None;
        for item in inner.split(',').map(str::trim) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v),
                None => match field {
                    Some(n) => (n, item),
                    None => return Err(err("expected `name=value`")),
                },
            };
            field = Some(name);
            match name {
                "parts" => {
                    if parts.is_some() {
                        return Err(err("`parts` given twice"));
                    }
                    parts = Some(positive(text, "parts", value)?);
                }
                "buckets" => {
                    let w = positive(text, "a bucket width", value)?;
                    let list: &mut Vec<usize> = buckets.get_or_insert_with(Vec::new);
                    if list.last().is_some_and(|&l| l >= w) {
                        return Err(err("bucket widths must increase"));
                    }
                    if w > MAX_BUCKET {
                        return Err(err("bucket widths must be at most 4096"));
                    }
                    list.push(w);
                }
                other => return Err(err(&format!("unknown field `{other}`"))),
            }
        }
        Ok(Format::Hyb { parts, buckets })
    }
}

/// The row degrees of a CSR matrix (`indptr` of length `rows + 1`, non-decreasing).
pub fn degrees(indptr: &[i32]) -> Vec<usize> {
    indptr
        .windows(2)
        .map(|w| (w[1] - w[0]).max(0) as usize)
        .collect()
}

/// The largest number of entries a row has inside one of `parts` column parts (part width
/// `ceil(cols / parts)`, as `builders::hyb`). Out-of-range columns are ignored.
pub fn max_part_degree(indptr: &[i32], indices: &[i32], cols: usize, parts: usize) -> usize {
    let w = cols.div_ceil(parts.max(1)).max(1);
    let mut best = 0;
    let mut count = vec![0usize; parts.max(1)];
    for r in indptr.windows(2) {
        let (lo, hi) = (
            r[0].max(0) as usize,
            (r[1].max(0) as usize).min(indices.len()),
        );
        count.iter_mut().for_each(|c| *c = 0);
        for &c in indices.get(lo..hi).unwrap_or(&[]) {
            if let Some(x) = count.get_mut(c.max(0) as usize / w) {
                *x += 1;
                best = best.max(*x);
            }
        }
    }
    best
}

/// Bucket widths `1, 2, 4, ..., cap` with `cap` the power of two at least the longest row of a
/// column part ([`max_part_degree`]), at most [`MAX_BUCKET`]: no row is split (split rows need
/// atomic updates, which cost far more on a CPU than the padding of a bucket at most twice as
/// wide as its rows) unless a row is longer than [`MAX_BUCKET`].
pub fn default_buckets(indptr: &[i32], indices: &[i32], cols: usize, parts: usize) -> Vec<usize> {
    let d = max_part_degree(indptr, indices, cols, parts);
    let cap = d.clamp(1, MAX_BUCKET).next_power_of_two().min(MAX_BUCKET);
    let mut out = vec![1];
    while *out.last().unwrap_or(&1) < cap {
        let next = out.last().map_or(1, |x| x * 2);
        out.push(next);
    }
    out
}

/// The formats `auto` measures for a matrix with `cols` columns at feature width `feat`: CSR,
/// hyb with one part, and — when the dense operand (`cols × feat` floats) is larger than a
/// core's share of cache (1 MiB) — hyb with 2 and 4 column parts (each part reads a slice of
/// the dense operand that is a half or a quarter of it).
pub fn auto_candidates(indptr: &[i32], indices: &[i32], cols: usize, feat: usize) -> Vec<Format> {
    let mut out = vec![Format::Csr];
    let dense_bytes = cols.saturating_mul(feat).saturating_mul(4);
    let mut parts = vec![1];
    if dense_bytes > 1 << 20 {
        parts.extend([2, 4]);
    }
    for p in parts {
        if p > cols.max(1) {
            continue;
        }
        out.push(Format::Hyb {
            parts: Some(p),
            buckets: Some(default_buckets(indptr, indices, cols, p)),
        });
    }
    out
}

/// The stage-III schedule of csrmm decomposed into `parts` column parts × `num_buckets`
/// buckets (block names `csrmm_<p>_<k>1`): the init nest in parallel, then every bucket's rows
/// in parallel with its feature loop vectorised.
pub fn hyb_spmm_schedule(parts: usize, num_buckets: usize) -> String {
    let mut out = String::from(include_str!("../schedules/hyb_init.sched"));
    let bucket = include_str!("../schedules/hyb_bucket.sched");
    for p in 0..parts {
        for k in 0..num_buckets {
            let tag = format!("{p}_{k}");
            out.push_str(
                &bucket
                    .replace("{block}", &format!("csrmm_{tag}1"))
                    .replace("{tag}", &tag),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for text in [
            "csr",
            "hyb",
            "ell",
            "auto",
            "bsr:4",
            "hyb(parts=2,buckets=1,2,4,8,16,32)",
            "hyb(parts=3)",
            "hyb(buckets=2,8)",
        ] {
            let f = Format::parse(text).unwrap();
            assert_eq!(f.to_string(), text);
        }
        assert_eq!(
            Format::parse("hyb(parts=2, buckets=1, 4)").unwrap(),
            Format::Hyb {
                parts: Some(2),
                buckets: Some(vec![1, 4])
            }
        );
        for bad in [
            "coo",
            "bsr:0",
            "bsr:x",
            "hyb(parts=0)",
            "hyb(buckets=4,2)",
            "hyb(parts=1,parts=2)",
            "hyb(width=3)",
            "hyb(3)",
            "hyb(parts=2",
            "hyb(buckets=8192)",
        ] {
            assert!(Format::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_buckets_cover_the_longest_part_row() {
        // Row 0: columns 0..5 (5 entries, all in part 0 of 2 when cols = 10); row 1: 0, 9.
        let indptr = [0, 5, 7];
        let indices = [0, 1, 2, 3, 4, 0, 9];
        assert_eq!(max_part_degree(&indptr, &indices, 10, 1), 5);
        assert_eq!(max_part_degree(&indptr, &indices, 10, 2), 5);
        assert_eq!(max_part_degree(&indptr, &indices, 10, 5), 2);
        assert_eq!(default_buckets(&indptr, &indices, 10, 1), vec![1, 2, 4, 8]);
        assert_eq!(default_buckets(&indptr, &indices, 10, 5), vec![1, 2]);
        assert_eq!(default_buckets(&[0, 0, 0], &[], 3, 1), vec![1]);
    }

    #[test]
    fn candidates_add_parts_for_large_dense_operands() {
        let (indptr, indices) = ([0, 1, 2], [0, 1]);
        assert_eq!(auto_candidates(&indptr, &indices, 100, 32).len(), 2);
        assert_eq!(auto_candidates(&indptr, &indices, 100_000, 32).len(), 4);
    }

    #[test]
    fn schedule_names_every_bucket() {
        let s = hyb_spmm_schedule(2, 3);
        for p in 0..2 {
            for k in 0..3 {
                assert!(s.contains(&format!("sch.get_block(\"csrmm_{p}_{k}1\")")));
            }
        }
        assert!(!s.contains('{'));
    }
}
