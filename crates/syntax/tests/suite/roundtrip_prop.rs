//! Property test of the printer/parser round trip on random valid IR of all three stages:
//! `verify(f)` is clean, `g = parse(print(f))` succeeds, `g` equals `f` up to renaming (with the
//! same structural hash), and printing `g` gives back the same text.

use proptest::prelude::*;
use proptest::test_runner::Config;
use sparsetir_ir::arbitrary::{arb_stage1_func, arb_stage2_func, arb_stage3_func};
use sparsetir_ir::equal::{func_eq, func_hash};
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, PrimFunc};
use sparsetir_syntax::parse_module;

fn config() -> Config {
    // no regression files in the source tree: failures print the offending script instead
    // PROPTEST_CASES raises the count for a longer local run
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// The generated function is valid and equal to its own clone (independent of the printer).
fn check_generated(f: &PrimFunc) -> Result<(), TestCaseError> {
    if let Err(errs) = verify_func(f) {
        return Err(TestCaseError::fail(format!(
            "generated function does not verify: {errs:#?}"
        )));
    }
    let g = f.clone();
    prop_assert!(func_eq(f, &g));
    prop_assert_eq!(func_hash(f), func_hash(&g));
    Ok(())
}

/// `{:?}` of a function with every `span: Span { .. }` removed.
fn debug_without_spans(f: &PrimFunc) -> String {
    let text = format!("{f:?}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find("span: Span {") {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        match rest.find('}') {
            Some(j) => rest = &rest[j + 1..],
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// Where the IR of `f` and `g` first differ (spans ignored), with some context.
fn first_difference(f: &PrimFunc, g: &PrimFunc) -> String {
    let (a, b) = (debug_without_spans(f), debug_without_spans(g));
    let i = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let lo = a[..i].char_indices().rev().nth(200).map_or(0, |(k, _)| k);
    let end = |s: &str| {
        s[i..]
            .char_indices()
            .nth(200)
            .map_or(s.len(), |(k, _)| i + k)
    };
    format!(
        "...{}\n  generated: {}\n  parsed:    {}",
        &a[lo..i],
        &a[i..end(&a)],
        &b[i..end(&b)]
    )
}

/// print → parse → equal, and print(parse(print(f))) == print(f).
fn check_roundtrip(f: &PrimFunc) -> Result<(), TestCaseError> {
    check_generated(f)?;
    let text = print_func(f);
    let module = parse_module(&text).map_err(|diags| {
        TestCaseError::fail(format!(
            "printed text does not parse: {diags:#?}\n--- text ---\n{text}"
        ))
    })?;
    prop_assert_eq!(module.funcs.len(), 1, "one function expected\n{}", text);
    let g = &module.funcs[0];
    let again = print_func(g);
    prop_assert!(
        func_eq(f, g),
        "parse(print(f)) differs from f\n--- print(f) ---\n{}\n--- print(parse(print(f))) ---\n{}\n\
         --- first IR difference ---\n{}",
        text,
        again,
        first_difference(f, g)
    );
    prop_assert_eq!(func_hash(f), func_hash(g));
    prop_assert_eq!(
        &again,
        &text,
        "printing the parsed function gives other text"
    );
    if let Err(errs) = verify_func(g) {
        return Err(TestCaseError::fail(format!(
            "parsed function does not verify: {errs:#?}\n{text}"
        )));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn generated_stage1_is_valid(f in arb_stage1_func()) {
        check_generated(&f)?;
    }

    #[test]
    fn generated_stage2_is_valid(f in arb_stage2_func()) {
        check_generated(&f)?;
    }

    #[test]
    fn generated_stage3_is_valid(f in arb_stage3_func()) {
        check_generated(&f)?;
    }

    #[test]
    fn roundtrip_stage1(f in arb_stage1_func()) {
        check_roundtrip(&f)?;
    }

    #[test]
    fn roundtrip_stage2(f in arb_stage2_func()) {
        check_roundtrip(&f)?;
    }

    #[test]
    fn roundtrip_stage3(f in arb_stage3_func()) {
        check_roundtrip(&f)?;
    }
}
