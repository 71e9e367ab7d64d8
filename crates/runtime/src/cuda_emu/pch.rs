//! The emulator's prelude as a header of the kernel cache, precompiled once per cache, prelude
//! and compiler (GCC's `.gch`), so that each emulated module's compile skips parsing it.
//!
//! # Why
//!
//! The prelude (about 2,400 lines over `<functional>`, `<thread>`, `<unordered_map>`, ...) takes
//! about 2 of the 2.5 to 6.5 seconds that the host compiler spends on one emulated module; a
//! test suite compiles hundreds of modules, each in a fresh cache.
//!
//! # How
//!
//! The header `emu-prelude-<hash>.hpp` (the `<hash>` over the prelude, the compiler command,
//! its version and flags) holds the prelude; the module's source includes it by its absolute
//! path, as its first line, instead of embedding the text (so the cache key still changes with
//! the prelude, through the name). Before a module is compiled (on a cache miss), [`ensure`]
//! writes the header and precompiles it next to it (`<header>.gch`, the flags of the modules
//! with `-x c++-header` for `-x c++`), each through a temporary file and a rename. GCC takes the `.gch` when it was
//! made by the same compiler with matching flags and otherwise reads the header's text, as any
//! other compiler does: a missing, stale or foreign `.gch` costs time, never correctness.
//! `SPARSETIR_EMU_PCH=0` embeds the prelude as before (no header, no `.gch`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cache::KernelCache;
use crate::compile::Compiler;

use super::PRELUDE;

/// The headers this process has tried to precompile (whether or not it worked), behind the lock
/// that serializes the tries: the threads of a test binary wanting the same header wait for one
/// compile instead of each running its own, and a compiler that cannot precompile is asked once.
static TRIED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Whether `SPARSETIR_EMU_PCH` leaves the precompiled prelude on (anything but `0`).
fn enabled() -> bool {
    std::env::var("SPARSETIR_EMU_PCH").map_or(true, |v| v.trim() != "0")
}

/// The path of the prelude's header in `cache` for `compiler`, or `None` where the prelude is
/// to be embedded instead: `SPARSETIR_EMU_PCH=0`, a compiler whose version cannot be read, or
/// a cache path an `#include` cannot name (quotes, backslashes, line breaks, not UTF-8).
pub(super) fn header_path(cache: &KernelCache, compiler: &Compiler) -> Option<PathBuf> {
    if !enabled() {
        return None;
    }
    let version = cache.compiler_version(compiler).ok()?;
    let mut h = blake3::Hasher::new();
    for part in [
        PRELUDE,
        &compiler.command_name(),
        &version,
        &compiler.key_flags().join("\u{1f}"),
    ] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let name = format!("emu-prelude-{}.hpp", &h.finalize().to_hex().as_str()[..32]);
    let dir = if cache.dir().is_absolute() {
        cache.dir().to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(cache.dir())
    };
    let path = dir.join(name);
    let text = path.to_str()?;
    if text.contains(['"', '\\', '\n', '\r']) {
        return None;
    }
    Some(path)
}

/// The first lines of a module's source that include the header at `path` (from
/// [`header_path`]).
pub(super) fn include_line(path: &Path) -> String {
    format!("#include \"{}\"\n", path.display())
}

/// Makes sure the header at `path` (from [`header_path`]) exists and, best effort, its
/// precompiled form. A failure to write the header is an error (the module includes it); a
/// failure to precompile it only leaves the compiler to read the text.
pub(super) fn ensure(
    cache: &KernelCache,
    compiler: &Compiler,
    path: &Path,
) -> Result<(), crate::RunError> {
    let gch = PathBuf::from(format!("{}.gch", path.display()));
    if path.exists() && gch.exists() {
        return Ok(());
    }
    let mut tried = TRIED.lock().unwrap_or_else(|p| p.into_inner());
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .unwrap_or_default()
    };
    if !path.exists() {
        cache.publish(&name(path), super::prelude_text().as_bytes())?;
    }
    if !gch.exists() && !tried.contains(&gch) {
        tried.push(gch.clone());
        // The header must be compiled where it lies: GCC ties a `.gch` to the header it was
        // made from only by name, and the flags are checked when it is used.
        let _ = cache.publish_with(&name(&gch), |tmp| compiler.compile_header(path, tmp));
    }
    Ok(())
}

/// Whether a compiler's `stderr` blames a precompiled header (GCC: "cannot read PCH file", "PCH
/// files were found, but they were invalid").
pub(super) fn names_it(stderr: &str) -> bool {
    stderr.contains("PCH")
}

/// Removes the precompiled form of the header at `path`, if there is one, after a compile
/// including the header failed on it (a damaged `.gch` fails every compile; a later [`ensure`]
/// in another process makes it anew); whether it did.
pub(super) fn discard(path: &Path) -> bool {
    std::fs::remove_file(format!("{}.gch", path.display())).is_ok()
}
