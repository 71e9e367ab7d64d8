//! A reduction loop whose iterations write disjoint elements, run apart (the schedule proves
//! it: `sparsetir_schedule`'s disjointness check): spmm_24's fused group loop split into rows
//! and the groups of a row, its row part `parallel` (C + OpenMP, 2 threads) or over `blockIdx.x`
//! (CUDA, in the emulator), equals the stage-I reference evaluator on random 2:4 data.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_ir::DType;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{assert_outputs_close, have_cc, opts, spmm_24_args};

const PARALLEL_ROWS: &str = "# stage III
b0 = sch.get_block(\"spmm_240\")
g, j, f = sch.get_loops(b0)
gr, gk = sch.split(g, [None, 8])
sch.parallel(gr)
";

const BLOCK_ROWS: &str = "# stage III
b0 = sch.get_block(\"spmm_240\")
g, j, f = sch.get_loops(b0)
gr, gk = sch.split(g, [None, 8])
sch.reorder(gr, f, gk, j)
sch.bind(gr, \"blockIdx.x\")
sch.bind(f, \"threadIdx.x\")
";

#[test]
fn spmm_24_rows_run_apart_on_c_and_cuda() {
    let g = sparsetir_ops::load("spmm_24").expect("spmm_24");
    let spec = vec![("n".to_string(), 32i64)];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("disjoint-parallel"),
    );
    let gpu = GpuKernel::build(&g, Some(BLOCK_ROWS), &spec, GpuDevice::Emulator, &cache)
        .expect("rows over blockIdx.x");
    let cpu = have_cc().then(|| {
        let mut o = opts("disjoint_parallel");
        o.threads = Some(2);
        sparsetir_runtime::build::build(&g, Some(PARALLEL_ROWS), &spec, &o)
            .expect("rows in parallel")
    });
    for (m, feat) in [(1usize, 3usize), (13, 5), (40, 2)] {
        let a = spmm_24_args(&mut rng, m, 32, feat, DType::F32);
        let mut want = a.clone();
        eval_func(&g, &mut want).expect("evaluator");
        let outs = ["c".to_string()];
        let mut got = a.clone();
        gpu.run(&mut got).expect("emulator");
        assert_outputs_close(&format!("blockIdx rows, m {m}"), &outs, &got, &want, 1e-5);
        if let Some(k) = &cpu {
            let mut got = a.clone();
            k.run(&mut got).expect("C");
            assert_outputs_close(&format!("parallel rows, m {m}"), &outs, &got, &want, 1e-5);
        }
    }
}
