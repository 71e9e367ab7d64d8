//! Source spans: byte ranges into the script a node was parsed from. A default (empty) span means
//! "made by a pass, no source"; spans never take part in structural equality.

/// A half-open byte range `[start, end)` in the source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }
    /// True for spans made by passes rather than the parser.
    pub fn is_unknown(self) -> bool {
        self.start == 0 && self.end == 0
    }
    /// The smallest span covering both.
    pub fn join(self, other: Span) -> Span {
        if self.is_unknown() {
            return other;
        }
        if other.is_unknown() {
            return self;
        }
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Converts a byte offset into a 1-based `(line, column)` pair (columns count characters).
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let mut line = 1;
    let mut line_start = 0;
    for (i, b) in source.bytes().enumerate() {
        if i >= offset {
            break;
        }
        if b == b'\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    let col = source
        .get(line_start..offset)
        .map(|s| s.chars().count())
        .unwrap_or(offset - line_start)
        + 1;
    (line, col)
}
