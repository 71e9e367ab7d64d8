//! Tests of `lower_sparse_buffer`: the RFC's BSR example lowers to the stage-III form of SPEC
//! §3.4; every catalog kernel lowers (through `lower_sparse_iter`) to IR that verifies at stage
//! III, prints, and parses back equal; functions of other stages are left alone.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, PrimFunc, Stage};
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

fn parse(src: &str) -> PrimFunc {
    match sparsetir_syntax::parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("parse failed: {d:?}"),
    }
}

fn stage_iii(f: &PrimFunc) -> PrimFunc {
    let ii = lower_sparse_iter(f, &LowerOptions::default()).expect("lower_sparse_iter");
    let iii = match lower_sparse_buffer(&ii) {
        Ok(o) => o,
        Err(e) => panic!("{}: lower_sparse_buffer failed: {e}", f.name),
    };
    if let Err(errs) = verify_func(&iii) {
        panic!(
            "{}: stage III does not verify: {errs:?}\n{}",
            f.name,
            print_func(&iii)
        );
    }
    iii
}

#[test]
fn catalog_lowers_verifies_and_round_trips() {
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("kernel parses");
        let out = stage_iii(&f);
        assert_eq!(out.stage(), Stage::III, "{}", k.name);
        assert!(out.axes.is_empty(), "{}", k.name);
        let text = print_func(&out);
        println!("{text}");
        let back = parse(&text);
        assert!(
            func_eq(&out, &back),
            "{}: printed stage III does not parse back equal\n{text}",
            k.name
        );
    }
}
