//! Identifiers of the generated C and CUDA: the words they must never be, sanitising script
//! names, the entry symbol, and unique names.

use std::collections::HashSet;

/// Words a generated identifier must never be: C keywords, the standard names the generated
/// source uses, and the ABI's names.
const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "main",
    "errno",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "size_t",
    "NULL",
    "INFINITY",
    "NAN",
    "FLT_MAX",
    "DBL_MAX",
    "INT8_MIN",
    "INT8_MAX",
    "INT16_MIN",
    "INT16_MAX",
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MIN",
    "INT64_MAX",
    "UINT8_MAX",
    "UINT16_MAX",
    "UINT32_MAX",
    "UINT64_MAX",
    "INT64_C",
    "UINT64_C",
    "calloc",
    "malloc",
    "free",
    "memset",
    "abs",
    "exp",
    "expf",
    "exp2",
    "exp2f",
    "log",
    "logf",
    "log2",
    "log2f",
    "sqrt",
    "sqrtf",
    "tanh",
    "tanhf",
    "fabs",
    "fabsf",
    "pow",
    "powf",
    "floor",
    "floorf",
    "ceil",
    "ceilf",
    "round",
    "roundf",
    "sin",
    "sinf",
    "cos",
    "cosf",
    "erf",
    "erff",
    "fmin",
    "fminf",
    "fmax",
    "fmaxf",
    "fmod",
    "fmodf",
    "args",
    "nargs",
    "omp_set_num_threads",
    "sparsetir_arg",
];

/// Makes `name` a valid, non-reserved C identifier.
pub(super) fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() {
        s.push('v');
    }
    let first = s.as_bytes()[0];
    if first.is_ascii_digit()
        || s.starts_with("__")
        || (first == b'_' && s.len() > 1 && s.as_bytes()[1].is_ascii_uppercase())
    {
        s.insert_str(0, "v_");
    }
    if RESERVED.contains(&s.as_str()) || s.starts_with("sptir_") || s.starts_with("sparsetir_") {
        s.push('_');
    }
    s
}

/// The entry symbol of a function named `name`.
pub fn entry_symbol(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s == "set_num_threads" || s.is_empty() {
        s.push('_');
    }
    format!("sparsetir_{s}")
}

/// Hands out unique identifiers.
#[derive(Default)]
pub(super) struct Namer {
    pub(super) used: HashSet<String>,
}

impl Namer {
    pub(super) fn fresh(&mut self, base: &str) -> String {
        let s = sanitize(base);
        if self.used.insert(s.clone()) {
            return s;
        }
        let mut k = 1;
        loop {
            let c = format!("{s}_{k}");
            if self.used.insert(c.clone()) {
                return c;
            }
            k += 1;
        }
    }
}
