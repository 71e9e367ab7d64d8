//! Snapshots of the printed stage-III form of every catalog kernel (stage I → `lower_sparse_iter`
//! → `lower_sparse_buffer`), plus the checked-search forms of the kernels that search.

use sparsetir_ir::printer::print_func;
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

fn lowered(name: &str, check: bool) -> String {
    let f = sparsetir_ops::load(name).expect("catalog kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: check,
        assembly: None,
    };
    let ii = lower_sparse_iter(&f, &opts).expect("lowers to stage II");
    let iii = lower_sparse_buffer(&ii).expect("lowers to stage III");
    print_func(&iii)
}

#[test]
fn stage_iii_snapshots() {
    for k in sparsetir_ops::catalog() {
        if sparsetir_ops::alias_of(k.name).is_some() {
            continue;
        }
        insta::assert_snapshot!(format!("stage_iii_{}", k.name), lowered(k.name, false));
    }
}

#[test]
fn stage_iii_checked_snapshots() {
    for name in ["csrmm_dense_iter", "csr2bsr"] {
        insta::assert_snapshot!(format!("stage_iii_checked_{name}"), lowered(name, true));
    }
}
