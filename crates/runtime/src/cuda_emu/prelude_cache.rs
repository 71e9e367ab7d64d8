//! The emulator's prelude shared by the modules of a kernel cache: its module-side view as a
//! header (precompiled where the compiler can), and its runtime as one library every module links.
//!
//! # Why
//!
//! The prelude is about 2,400 lines over `<functional>`, `<thread>`, `<unordered_map>`, ... .
//! Compiled into every module, it cost about 1.5 of the 2.5 to 6.5 seconds the host compiler
//! spends on one: parsing it, instantiating the standard templates its functions use and
//! generating code for the scheduler, the traffic counter and the race checker, again for each
//! module. A test suite compiles hundreds of modules, each in a fresh cache.
//!
//! # How
//!
//! The prelude has two views (`prelude.hpp`): with `SPTIR_EMU_RUNTIME` defined, the runtime,
//! every function defined; without, what a module's source uses (types, the proxies and other
//! templates, the CUDA surface) with the runtime's entry points only declared.
//!
//! - The header `emu-prelude-<hash>.hpp` holds the module-side view (the `<hash>` over the
//!   prelude, the compiler command, its version and flags). A module's source includes it by
//!   its absolute path, as its first line, instead of embedding the text (the cache key still
//!   changes with the prelude, through the name). GCC precompiles it once (`<header>.gch`, with
//!   the modules' flags and `-x c++-header`); a missing, stale or foreign `.gch` costs time,
//!   never correctness, as the compiler then reads the header's text.
//! - The library `emu-runtime-<hash>.so` is the runtime (`emu-runtime-<hash>.cpp`, kept next to
//!   it), compiled once at `-O2` with hidden visibility but for the entry points, its soname its
//!   file name. A module links it by that name (`-l:`) and finds it next to itself (`$ORIGIN`):
//!   a cache directory can move.
//!
//! [`SharedPrelude::ensure`] makes all three (on a cache miss, before the module's compile), each
//! through a temporary file and a rename, or copies them from another cache of the same
//! process. A module whose library went missing fails to load, and the cache then rebuilds
//! both. ELF platforms only (sonames and `$ORIGIN`); elsewhere, and with
//! `SPARSETIR_EMU_PCH=0`, every module embeds the whole prelude, runtime included.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cache::KernelCache;
use crate::compile::Compiler;

use super::PRELUDE;

/// What this process did with shared preludes, behind the lock that serializes making their
/// files: the threads of a test binary wanting the same files wait for one compile instead of
/// each running its own.
struct Made {
    /// The precompiled headers it tried to make (whether or not it worked: a compiler that
    /// cannot precompile is asked once) or discarded (neither made nor copied again).
    tried: Vec<PathBuf>,
    /// The cache directories where it made (or found) a prelude's header and library: another
    /// cache wanting the same files (same names: same prelude and compiler) takes copies.
    dirs: Vec<PathBuf>,
}

static MADE: Mutex<Made> = Mutex::new(Made {
    tried: Vec::new(),
    dirs: Vec::new(),
});

/// The runtime library's flags after the modules' (part of the files' hash).
const RUNTIME_FLAGS: [&str; 3] = ["-O2", "-fvisibility=hidden", "-fno-semantic-interposition"];

/// Whether `SPARSETIR_EMU_PCH` leaves the shared prelude on (anything but `0`).
fn enabled() -> bool {
    std::env::var("SPARSETIR_EMU_PCH").map_or(true, |v| v.trim() != "0")
}

/// The prelude's files in one cache for one compiler (from [`SharedPrelude::of`]).
#[derive(Clone, Debug)]
pub(super) struct SharedPrelude {
    /// The module-side view, included by every module.
    pub header: PathBuf,
    /// The runtime library's file name (also its soname), next to the header.
    runtime: String,
}

impl SharedPrelude {
    /// The prelude's files in `cache` for `compiler`, or `None` where the whole prelude is to be
    /// embedded in each module instead: `SPARSETIR_EMU_PCH=0`, not an ELF platform, a compiler
    /// whose version cannot be read, or a cache path an `#include` or a linker flag cannot name
    /// (quotes, backslashes, line breaks, commas, not UTF-8).
    pub fn of(cache: &KernelCache, compiler: &Compiler) -> Option<SharedPrelude> {
        if !enabled() || !cfg!(target_os = "linux") {
            return None;
        }
        let version = cache.compiler_version(compiler).ok()?;
        let mut h = blake3::Hasher::new();
        for part in [
            PRELUDE,
            &compiler.command_name(),
            &version,
            &compiler.key_flags().join("\u{1f}"),
            &RUNTIME_FLAGS.join("\u{1f}"),
        ] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let hash = &h.finalize().to_hex()[..32];
        let dir = if cache.dir().is_absolute() {
            cache.dir().to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(cache.dir())
        };
        let header = dir.join(format!("emu-prelude-{hash}.hpp"));
        if header.to_str()?.contains(['"', '\\', '\n', '\r', ',']) {
            return None;
        }
        Some(SharedPrelude {
            header,
            runtime: format!("emu-runtime-{hash}.so"),
        })
    }

    /// The first line of a module's source: the `#include` of the header.
    pub fn include_line(&self) -> String {
        format!("#include \"{}\"\n", self.header.display())
    }

    fn dir(&self) -> &Path {
        self.header.parent().unwrap_or(Path::new("."))
    }

    /// The precompiled header's path.
    fn gch(&self) -> PathBuf {
        PathBuf::from(format!("{}.gch", self.header.display()))
    }

    /// `compiler` linking a module to the runtime library (found next to the module).
    pub fn module_compiler(&self, compiler: &Compiler) -> Compiler {
        let mut c = compiler.clone();
        c.flags.extend([
            // (Recorded even though the library comes before the source that needs it.)
            "-Wl,--no-as-needed".to_string(),
            format!("-L{}", self.dir().display()),
            format!("-l:{}", self.runtime),
            "-Wl,-rpath,$ORIGIN".to_string(),
        ]);
        c
    }

    /// `compiler` building the runtime library: optimized further (compiled once per cache),
    /// only the entry points exported, named by its soname.
    fn runtime_compiler(&self, compiler: &Compiler) -> Compiler {
        let mut c = compiler.clone();
        c.flags.extend(RUNTIME_FLAGS.iter().map(|f| f.to_string()));
        c.flags.push(format!("-Wl,-soname,{}", self.runtime));
        c
    }

    /// Makes sure the header, the runtime library and, best effort, the precompiled header
    /// exist: copied from another cache where this process has them, else made. Failing to write
    /// the header or to build the library is an error (every module needs them); failing to
    /// precompile the header only leaves the compiler to read its text.
    pub fn ensure(&self, cache: &KernelCache, compiler: &Compiler) -> Result<(), crate::RunError> {
        let gch = self.gch();
        let runtime = self.dir().join(&self.runtime);
        let source = runtime.with_extension("cpp");
        if self.header.exists() && gch.exists() && runtime.exists() {
            return Ok(());
        }
        let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
        let name = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
                .unwrap_or_default()
        };
        // Copies, not links: a file damaged in one cache stays out of the others. (Not a
        // precompiled header this process tried, or discarded: the compiler rejected it.)
        for file in [&self.header, &source, &runtime, &gch] {
            if file.exists() || (*file == gch && made.tried.contains(&gch)) {
                continue;
            }
            let Some(from) = made
                .dirs
                .iter()
                .map(|d| d.join(name(file)))
                .find(|f| f.exists())
            else {
                continue;
            };
            let _ = cache.publish_with(&name(file), |tmp| {
                std::fs::copy(&from, tmp)
                    .map(drop)
                    .map_err(|e| crate::RunError::Cache {
                        path: from.display().to_string(),
                        message: e.to_string(),
                    })
            });
        }
        if !self.header.exists() {
            cache.publish(&name(&self.header), super::prelude_text().as_bytes())?;
        }
        let precompile = !gch.exists() && !made.tried.contains(&gch);
        if precompile {
            made.tried.push(gch.clone());
        }
        // The two compiles at once (each is one compiler process).
        std::thread::scope(|s| {
            if precompile {
                // The header must be compiled where it lies: GCC ties a `.gch` to the header it
                // was made from only by name, and the flags are checked when it is used.
                s.spawn(|| {
                    let _ = cache.publish_with(&name(&gch), |tmp| {
                        compiler.compile_header(&self.header, tmp)
                    });
                });
            }
            if runtime.exists() {
                return Ok(());
            }
            let text = super::embedded_prelude();
            let src = cache.publish(&name(&source), text.as_bytes())?;
            let rc = self.runtime_compiler(compiler);
            cache
                .publish_with(&self.runtime, |tmp| rc.compile(&src, &text, tmp))
                .map(drop)
        })?;
        let dir = self.dir().to_path_buf();
        if !made.dirs.contains(&dir) {
            made.dirs.push(dir);
        }
        Ok(())
    }

    /// Removes the precompiled header, if there is one, after a compile including the header
    /// failed on it (a damaged `.gch` fails every compile; a later [`SharedPrelude::ensure`] in
    /// another process makes it anew); whether it did.
    pub fn discard_gch(&self) -> bool {
        let gch = self.gch();
        let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
        if !made.tried.contains(&gch) {
            made.tried.push(gch.clone());
        }
        std::fs::remove_file(gch).is_ok()
    }
}

/// Whether a compiler's `stderr` blames a precompiled header (GCC: "cannot read PCH file", "PCH
/// files were found, but they were invalid").
pub(super) fn names_pch(stderr: &str) -> bool {
    stderr.contains("PCH")
}
