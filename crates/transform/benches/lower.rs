//! Lowering benchmark: the whole kernel catalog (parsed once, outside the measurement) lowered to
//! stage III through the pipeline, without and with verification after every pass. The target
//! is well under one second for the catalog in a release build.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use sparsetir_ir::{IRModule, Stage};
use sparsetir_transform::{lower, PipelineOptions};

fn catalog() -> Vec<(&'static str, IRModule)> {
    sparsetir_ops::catalog()
        .iter()
        .filter_map(|k| match sparsetir_syntax::parse_module(k.source) {
            Ok(m) => Some((k.name, m)),
            Err(d) => {
                eprintln!("note: skipping `{}`: it does not parse: {d:?}", k.name);
                None
            }
        })
        .collect()
}

fn lower_all(modules: &[(&str, IRModule)], opts: &PipelineOptions) -> usize {
    let mut funcs = 0;
    for (name, m) in modules {
        match lower(m, opts) {
            Ok(out) => funcs += out.funcs.len(),
            Err(e) => panic!("`{name}` does not lower: {e}"),
        }
    }
    funcs
}

fn lower_catalog(c: &mut Criterion) {
    let modules = catalog();
    let plain = PipelineOptions {
        verify: false,
        ..PipelineOptions::to_stage(Stage::III)
    };
    let verified = PipelineOptions {
        verify: true,
        ..plain.clone()
    };
    eprintln!(
        "note: lowering {} catalog kernels to stage III",
        modules.len()
    );
    let mut g = c.benchmark_group("lower");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.bench_function("catalog_to_stage_iii", |b| {
        b.iter(|| lower_all(&modules, &plain))
    });
    g.bench_function("catalog_to_stage_iii_verified", |b| {
        b.iter(|| lower_all(&modules, &verified))
    });
    g.finish();
}

criterion_group!(benches, lower_catalog);
criterion_main!(benches);
