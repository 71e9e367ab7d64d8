//! `storage_align` through the C backend: csrmm's gathered rows of B cached in a local tile
//! whose rows are padded to a stride of 1 modulo 16 compile to code addressing the padded
//! layout, and equal the evaluator.

use sparsetir_eval::eval_func;
use sparsetir_ops::data::{random_args, Pattern};

use crate::common;
use common::{assert_outputs_close, catalog_shape, have_cc, opts};

#[test]
fn a_padded_cache_tile_runs_in_c() {
    if !have_cc() {
        return;
    }
    let f = sparsetir_ops::load("csrmm").expect("csrmm");
    let sched = "# stage III\n\
                 b1 = sch.get_block(\"csrmm1\")\n\
                 c = sch.reverse_cache_read(b1, 1, \"local\")\n\
                 sch.storage_align(c, 0, 0, 16, 1)\n";
    let spec = [("feat_size".to_string(), 5i64)];
    let k = sparsetir_runtime::build::build(&f, Some(sched), &spec, &opts("storage-align"))
        .expect("builds");
    // The tile's rows are 17 elements apart (5 used), and the tile is sized for them.
    assert!(k.source().contains("* 17"), "{}", k.source());
    let shape = catalog_shape(Pattern::Random { empty_rows: true });
    for seed in 0..3 {
        let case = random_args("csrmm", &shape, seed).expect("case");
        let mut want = case.args.clone();
        eval_func(&f, &mut want).expect("evaluator");
        let mut got = case.args.clone();
        k.run(&mut got).expect("runs");
        assert_outputs_close("padded tile", &case.outputs, &got, &want, 1e-5);
    }
}
