//! Fuzzing with proptest: random token sequences, random bytes and mutations (deletions,
//! insertions, swaps) of valid scripts. `parse_bytes` must never panic, every diagnostic span must
//! lie within the input, rendering must not panic, and whatever parses must print to text that
//! parses again to the same text.

use proptest::prelude::*;
use proptest::test_runner::Config;
use sparsetir_ir::printer::print_module;
use sparsetir_syntax::{parse_bytes, parse_module, render};

const SCRIPTS: &[&str] = &[
    include_str!("../scripts/csrmm.py"),
    include_str!("../scripts/fused_sddmm.py"),
    include_str!("../scripts/softmax.py"),
    include_str!("../scripts/dcsr.py"),
    include_str!("../scripts/bsrmm_stage_ii.py"),
    include_str!("../scripts/gpu_stage_iii.py"),
];

const TOKENS: &[&str] = &[
    "@T.prim_func",
    "def",
    "f",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    ".",
    "=",
    "+=",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "<",
    "==",
    "and",
    "or",
    "not",
    "if",
    "elif",
    "else",
    "for",
    "in",
    "with",
    "as",
    "pass",
    "T.handle",
    "T.int32",
    "a",
    "m",
    "I",
    "J",
    "A",
    "i",
    "j",
    "T.sp.dense_fixed",
    "T.sp.compressed_varied",
    "T.sp.match_buffer",
    "T.sp.iteration",
    "T.init()",
    "T.block",
    "T.serial",
    "T.grid",
    "T.axis.remap",
    "T.reads",
    "T.float32",
    "T.exp",
    "T.let",
    "\"SR\"",
    "\"float32\"",
    "'x",
    "0",
    "1",
    "-3",
    "2.5",
    "1e",
    "0x",
    "\n",
    "\n    ",
    "\n        ",
    "\t",
    "#c\n",
    "\\\n",
    "->",
    "None",
    "True",
    "T.func_attr",
    "T.sp.fuse",
    "T.max",
    "T.Select",
];

fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    match parse_bytes(bytes) {
        Ok(module) => {
            let text = print_module(&module);
            let again = parse_module(&text).map_err(|d| {
                TestCaseError::fail(format!(
                    "printed text does not parse:\n{}\n--- text ---\n{text}",
                    render(&d, "printed", &text)
                ))
            })?;
            prop_assert_eq!(print_module(&again), text);
        }
        Err(diags) => {
            prop_assert!(!diags.is_empty());
            for d in &diags {
                prop_assert!(d.span.start <= d.span.end, "inverted span {:?}", d.span);
                prop_assert!(
                    d.span.end as usize <= bytes.len(),
                    "span {:?} past the end ({} bytes)",
                    d.span,
                    bytes.len()
                );
            }
            let source = String::from_utf8_lossy(bytes);
            let out = render(&diags, "fuzz.sp", &source);
            prop_assert!(out.starts_with("fuzz.sp:"), "bad rendering: {}", out);
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, u8),
    Swap(usize, usize),
    Token(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Mutation::Token(a, t)),
    ]
}

fn apply(src: &str, muts: &[Mutation]) -> Vec<u8> {
    let mut b = src.as_bytes().to_vec();
    for m in muts {
        if b.is_empty() {
            break;
        }
        let len = b.len();
        match *m {
            Mutation::Delete(a, n) => {
                let a = a % len;
                b.drain(a..(a + n).min(len));
            }
            Mutation::Insert(a, byte) => b.insert(a % (len + 1), byte),
            Mutation::Swap(x, y) => b.swap(x % len, y % len),
            Mutation::Token(a, t) => {
                let at = a % (len + 1);
                b.splice(at..at, TOKENS[t].bytes());
            }
        }
    }
    b
}

fn config() -> Config {
    Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_token_sequences(toks in proptest::collection::vec(0..TOKENS.len(), 0..60),
                              seps in proptest::collection::vec(0u8..3, 60)) {
        let mut s = String::new();
        for (k, t) in toks.iter().enumerate() {
            s.push_str(TOKENS[*t]);
            s.push_str(match seps[k % seps.len()] { 0 => "", 1 => " ", _ => "\n" });
        }
        check(s.as_bytes())?;
    }

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_valid_scripts(which in 0..SCRIPTS.len(),
                             muts in proptest::collection::vec(mutation(), 1..6)) {
        check(&apply(SCRIPTS[which], &muts))?;
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for open in ["(", "[", "-", "not ", "T.exp("] {
        let src = format!(
            "@T.prim_func\ndef f(a: T.handle):\n    x: T.int32 = {}1\n",
            open.repeat(5000)
        );
        assert!(parse_bytes(src.as_bytes()).is_err());
    }
    let long = format!(
        "@T.prim_func\ndef f(m: T.int32):\n    x: T.int32 = m{}\n",
        " + m".repeat(5000)
    );
    assert!(parse_bytes(long.as_bytes()).is_err());
    let mut deep = String::from("@T.prim_func\ndef f(m: T.int32):\n");
    for d in 1..400 {
        deep.push_str(&"    ".repeat(d));
        deep.push_str("if m:\n");
    }
    deep.push_str(&"    ".repeat(400));
    deep.push_str("pass\n");
    assert!(parse_bytes(deep.as_bytes()).is_err());
}
