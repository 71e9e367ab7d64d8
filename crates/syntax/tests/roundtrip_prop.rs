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
    Config {
        cases: 64,
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
        "parse(print(f)) differs from f\n--- print(f) ---\n{}\n--- print(parse(print(f))) ---\n{}",
        text,
        again
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
    #[ignore = "enable once the printer and parser are implemented"]
    fn roundtrip_stage1(f in arb_stage1_func()) {
        check_roundtrip(&f)?;
    }

    #[test]
    #[ignore = "enable once the printer and parser are implemented"]
    fn roundtrip_stage2(f in arb_stage2_func()) {
        check_roundtrip(&f)?;
    }

    #[test]
    #[ignore = "enable once the printer and parser are implemented"]
    fn roundtrip_stage3(f in arb_stage3_func()) {
        check_roundtrip(&f)?;
    }
}
