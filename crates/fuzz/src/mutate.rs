//! The deterministic seeded mutator: byte-level mutations, token- and line-level mutations of
//! script text (swap identifiers, numbers, axis kinds, delete/duplicate/swap lines, change
//! indentation, splice lines from other seeds) and numeric mutations for data.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Words worth swapping into scripts: axis kinds, dtypes, iteration letters, keywords.
const DICT: &[&str] = &[
    "dense_fixed",
    "dense_varied",
    "compressed_fixed",
    "compressed_varied",
    "sparse_fixed",
    "sparse_variable",
    "dense_variable",
    "fuse",
    "attach",
    "iteration",
    "match_buffer",
    "alloc_buffer",
    "init",
    "int32",
    "int64",
    "float32",
    "float64",
    "float16",
    "bool",
    "handle",
    "\"SRS\"",
    "\"SSR\"",
    "\"R\"",
    "\"S\"",
    "\"\"",
    "T",
    "T.sp",
    "None",
    "True",
    "False",
    "with",
    "for",
    "in",
    "if",
    "else",
    "def",
    "as",
    "sparse_tir_level",
    "T.serial",
    "T.grid",
    "T.block",
    "T.axis.remap",
    "T.max",
    "T.min",
    "T.exp",
    "T.floordiv",
    "T.floormod",
    "T.cast",
    "T.if_then_else",
    "assume_buffer_domain",
];

/// Numbers worth substituting: boundaries of the integer dtypes, zero, negatives, floats.
pub const INTERESTING_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    7,
    255,
    256,
    65535,
    65536,
    i32::MAX as i64,
    i32::MAX as i64 + 1,
    i32::MIN as i64,
    u32::MAX as i64,
    i64::MAX,
    i64::MIN,
    1 << 40,
    -(1 << 31) - 1,
];

const INTERESTING_TEXT_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "1e308",
    "1e999",
    "-0.0",
    "0.5",
    "nan",
    "0x10",
    "1_000",
];

/// A seeded mutator; the same seed always gives the same mutations.
pub struct Mutator {
    pub rng: ChaCha8Rng,
}

/// A token of script text: what it is matters only for picking replacements.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok {
    Ident,
    Number,
    Str,
    Space,
    Newline,
    Punct,
}

fn tokenize(s: &str) -> Vec<(Tok, &str)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Ident
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            Tok::Number
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                i += 1;
            }
            i = (i + 1).min(b.len());
            Tok::Str
        } else if c == b'\n' {
            i += 1;
            Tok::Newline
        } else if c == b' ' || c == b'\t' {
            while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                i += 1;
            }
            Tok::Space
        } else {
            // One char (possibly multi-byte UTF-8).
            i += 1;
            while i < b.len() && !s.is_char_boundary(i) {
                i += 1;
            }
            Tok::Punct
        };
        out.push((kind, &s[start..i]));
    }
    out
}

impl Mutator {
    pub fn new(seed: u64) -> Mutator {
        Mutator {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.rng.random_range(0..n)
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// Shuffles `xs` in place (Fisher–Yates, from the back).
    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for k in (1..xs.len()).rev() {
            xs.swap(k, self.below(k + 1));
        }
    }

    /// One to a few byte-level mutations in place.
    pub fn bytes(&mut self, v: &mut Vec<u8>) {
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            let n = v.len();
            match self.below(8) {
                0 if n > 0 => {
                    let i = self.below(n);
                    v[i] ^= 1 << self.below(8);
                }
                1 if n > 0 => {
                    let i = self.below(n);
                    v[i] = self.rng.random();
                }
                2 => {
                    let i = self.below(n + 1);
                    let b = *self.pick(b"\0\n\t \"'()[]{}:,.=#\\\xff0-9");
                    v.insert(i, b);
                }
                3 if n > 0 => {
                    let i = self.below(n);
                    let len = 1 + self.below((n - i).min(16));
                    v.drain(i..i + len);
                }
                4 if n > 0 => {
                    let i = self.below(n);
                    let len = 1 + self.below((n - i).min(64));
                    let chunk = v[i..i + len].to_vec();
                    let at = self.below(n + 1);
                    v.splice(at..at, chunk);
                }
                5 if n > 0 => {
                    let i = self.below(n);
                    v.truncate(i);
                }
                6 if n > 0 => {
                    let i = self.below(n);
                    let j = self.below(n);
                    v.swap(i, j);
                }
                _ => {
                    let i = self.below(n + 1);
                    let s = self.pick(INTERESTING_TEXT_NUMBERS).as_bytes();
                    v.splice(i..i, s.iter().copied());
                }
            }
        }
    }

    /// Structure-aware mutation of script text; `others` are seeds to splice lines from.
    pub fn script(&mut self, text: &str, others: &[String]) -> String {
        let mut s = text.to_string();
        let rounds = if self.chance(0.7) {
            1
        } else {
            2 + self.below(2)
        };
        for _ in 0..rounds {
            s = match self.below(12) {
                0..=4 => self.token_mutation(&s),
                5..=8 => self.line_mutation(&s, others),
                9 => self.indent_mutation(&s),
                _ => {
                    let mut b = s.into_bytes();
                    self.bytes(&mut b);
                    String::from_utf8_lossy(&b).into_owned()
                }
            };
        }
        s
    }

    fn token_mutation(&mut self, s: &str) -> String {
        let toks = tokenize(s);
        if toks.is_empty() {
            return s.to_string();
        }
        let idents: Vec<&str> = toks
            .iter()
            .filter(|t| t.0 == Tok::Ident)
            .map(|t| t.1)
            .collect();
        let numbers: Vec<&str> = toks
            .iter()
            .filter(|t| t.0 == Tok::Number)
            .map(|t| t.1)
            .collect();
        let mut out: Vec<String> = toks.iter().map(|t| t.1.to_string()).collect();
        // Prefer meaningful tokens.
        let meaningful: Vec<usize> = (0..toks.len())
            .filter(|&i| !matches!(toks[i].0, Tok::Space | Tok::Newline))
            .collect();
        if meaningful.is_empty() {
            return s.to_string();
        }
        let i = *self.pick(&meaningful);
        match (toks[i].0, self.below(6)) {
            (Tok::Ident, 0 | 1) if !idents.is_empty() => out[i] = self.pick(&idents).to_string(),
            (Tok::Ident, 2) => out[i] = self.pick(DICT).to_string(),
            (Tok::Number, 0..=2) => {
                out[i] = if self.chance(0.5) || numbers.is_empty() {
                    self.pick(INTERESTING_TEXT_NUMBERS).to_string()
                } else {
                    self.pick(&numbers).to_string()
                }
            }
            (Tok::Str, 0..=2) => out[i] = self.pick(DICT).to_string(),
            (_, 3) => out[i].clear(),
            (_, 4) => {
                let dup = out[i].clone();
                out[i].push_str(&dup);
            }
            _ => {
                let j = *self.pick(&meaningful);
                out.swap(i, j);
            }
        }
        out.concat()
    }

    fn line_mutation(&mut self, s: &str, others: &[String]) -> String {
        let mut lines: Vec<String> = s.lines().map(str::to_string).collect();
        if lines.is_empty() {
            return s.to_string();
        }
        let n = lines.len();
        let i = self.below(n);
        match self.below(5) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(self.below(n + 1), l);
            }
            2 => {
                let j = self.below(n);
                lines.swap(i, j);
            }
            3 if !others.is_empty() => {
                let o = self.pick(others);
                let ol: Vec<&str> = o.lines().collect();
                if !ol.is_empty() {
                    let l = self.pick(&ol).to_string();
                    lines.insert(self.below(n + 1), l);
                }
            }
            _ => {
                // Keep a prefix of the line (a truncated statement).
                let l = &lines[i];
                let mut cut = self.below(l.len() + 1);
                while !l.is_char_boundary(cut) {
                    cut -= 1;
                }
                lines[i] = l[..cut].to_string();
            }
        }
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }

    fn indent_mutation(&mut self, s: &str) -> String {
        let mut lines: Vec<String> = s.lines().map(str::to_string).collect();
        if lines.is_empty() {
            return s.to_string();
        }
        let i = self.below(lines.len());
        let l = &lines[i];
        let body = l.trim_start();
        let indent = l.len() - body.len();
        let new = match self.below(5) {
            0 => indent + 4,
            1 => indent.saturating_sub(4),
            2 => indent + 1,
            3 => 0,
            _ => indent.saturating_sub(1),
        };
        lines[i] = if self.chance(0.1) {
            format!("\t{body}")
        } else {
            format!("{}{body}", " ".repeat(new))
        };
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }

    /// A mutated integer: an interesting value, an off-by-one, or a random one.
    pub fn int(&mut self, v: i64) -> i64 {
        match self.below(5) {
            0 | 1 => *self.pick(INTERESTING_INTS),
            2 => v.wrapping_add(1),
            3 => v.wrapping_sub(1),
            _ => self.rng.random_range(-10..100),
        }
    }

    /// A mutated float: NaN, infinities, extremes, or a random value.
    pub fn float(&mut self, v: f64) -> f64 {
        let r = self.rng.random_range(-1e3..1e3);
        *self.pick(&[
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
            -0.0,
            v * 1e300,
            r,
        ])
    }
}
