//! Builds the mocked CUDA driver (`libcuda_mock.c` beside this file) for one mode with `$CC`:
//! shared by `sparsetir-cuda`'s `mock_driver.rs` and the runtime's `cuda_mock_launch.rs`
//! (included by `#[path]`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The mock driver of `src` (the C file) built for `mode` into `dir`; `None` (with a note)
/// without a C compiler.
pub fn mock_driver(src: &Path, mode: u32, dir: &Path) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).ok()?;
    let out = dir.join(format!("libcuda_mock{mode}-{}.so", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args([
            "-shared",
            "-fPIC",
            "-O1",
            &format!("-DMOCK_MODE={mode}"),
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        _ => {
            eprintln!("note: skipping: no C compiler to build the mock driver");
            None
        }
    }
}
