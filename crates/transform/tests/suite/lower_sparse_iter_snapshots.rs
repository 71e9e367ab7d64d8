//! Snapshots of the printed stage-II form of every catalog kernel (unchecked searches), plus the
//! checked form of the kernels that search.

use sparsetir_ir::printer::print_func;
use sparsetir_transform::{lower_sparse_iter, LowerOptions};

fn lowered(name: &str, check: bool) -> String {
    let f = sparsetir_ops::load(name).expect("catalog kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: check,
        assembly: None,
    };
    let out = lower_sparse_iter(&f, &opts).expect("lowers");
    print_func(&out)
}

#[test]
fn stage_ii_snapshots() {
    for k in sparsetir_ops::catalog() {
        if sparsetir_ops::alias_of(k.name).is_some() {
            continue;
        }
        insta::assert_snapshot!(format!("stage_ii_{}", k.name), lowered(k.name, false));
    }
}

#[test]
fn stage_ii_checked_snapshots() {
    for name in ["csrmm_dense_iter", "csr2bsr"] {
        insta::assert_snapshot!(format!("stage_ii_checked_{name}"), lowered(name, true));
    }
}
