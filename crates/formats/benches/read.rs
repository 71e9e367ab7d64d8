//! Reading benchmark: parse `../shared/data/pubmed.mtx` and pack it to CSR
//! (`[dense_fixed, compressed_varied]`). Skips with a note when the file is absent.
//! Override the file with `SPARSETIR_BENCH_MTX=path`.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use sparsetir_formats::mtx::parse_mtx;
use sparsetir_formats::{pack, LevelSpec};

fn data_file() -> PathBuf {
    match std::env::var_os("SPARSETIR_BENCH_MTX") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/pubmed.mtx"),
    }
}

fn read_and_pack(c: &mut Criterion) {
    let path = data_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("note: skipping the read benchmark: {}: {e}", path.display());
            return;
        }
    };
    let csr = [
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
    ];
    match parse_mtx(&text).map(|coo| pack(&csr, &coo, 0)) {
        Ok(Ok(p)) => eprintln!(
            "note: {}: {} rows, nnz {}",
            path.display(),
            p.levels[0].length,
            p.values.len()
        ),
        Ok(Err(e)) => {
            eprintln!("note: skipping: packing {} failed: {e}", path.display());
            return;
        }
        Err(e) => {
            eprintln!("note: skipping: {}: {e}", path.display());
            return;
        }
    }
    let mut g = c.benchmark_group("pubmed");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("read_file+parse+pack_csr", |b| {
        b.iter(|| {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let coo = parse_mtx(&text).ok();
            coo.and_then(|coo| pack(&csr, &coo, 0).ok())
        })
    });
    g.bench_function("parse", |b| b.iter(|| parse_mtx(&text).ok()));
    if let Ok(coo) = parse_mtx(&text) {
        g.bench_function("pack_csr", |b| b.iter(|| pack(&csr, &coo, 0).ok()));
    }
    g.finish();
}

criterion_group!(benches, read_and_pack);
criterion_main!(benches);
