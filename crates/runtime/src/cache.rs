//! The content-hashed kernel cache: one shared object per (source, compiler, compiler version,
//! flags), written atomically (unique temporary file in the cache directory, then `rename`), so
//! concurrent processes never see a half-written library; an entry that fails to load is rebuilt.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::compile::Compiler;
use crate::error::RunError;
use crate::kernel::{CompiledKernel, KernelParam};

/// What the cache did for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A valid entry existed and was loaded.
    Hit,
    /// No entry existed: compiled and stored.
    Miss,
    /// An entry existed but could not be loaded (corrupt, truncated): recompiled and replaced.
    Rebuilt,
}

/// Timings and the cache outcome of one [`KernelCache::load`].
#[derive(Clone, Debug, PartialEq)]
pub struct LoadReport {
    pub outcome: CacheOutcome,
    /// The cache key (hex BLAKE3).
    pub key: String,
    /// The shared object loaded.
    pub path: PathBuf,
    /// Time spent in the C compiler (zero on a hit).
    pub compile_time: Duration,
    /// Time from the request to a loaded kernel, compile included.
    pub total_time: Duration,
}

/// A kernel cache rooted at a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    dir: PathBuf,
}

/// Distinguishes temporary files of threads of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl KernelCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache { dir: dir.into() }
    }

    /// The user's cache directory: `$SPARSETIR_CACHE_DIR`, else `$XDG_CACHE_HOME/sparsetir`, else
    /// `~/.cache/sparsetir`; `None` when none of these variables is set.
    pub fn default_dir() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(d) = var("SPARSETIR_CACHE_DIR") {
            return Some(PathBuf::from(d));
        }
        if let Some(d) = var("XDG_CACHE_HOME") {
            return Some(PathBuf::from(d).join("sparsetir"));
        }
        var("HOME").map(|h| PathBuf::from(h).join(".cache").join("sparsetir"))
    }

    /// The cache in [`KernelCache::default_dir`].
    pub fn from_env() -> Result<KernelCache, RunError> {
        KernelCache::default_dir()
            .map(KernelCache::new)
            .ok_or_else(|| RunError::Cache {
                path: String::new(),
                message: "no cache directory: set SPARSETIR_CACHE_DIR, XDG_CACHE_HOME or HOME"
                    .into(),
            })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of `source` compiled by `compiler`: BLAKE3 of the source, the compiler command, its
    /// `--version` output and the flags (each length-prefixed, so no two inputs collide by
    /// concatenation).
    pub fn key(&self, source: &str, compiler: &Compiler) -> Result<String, RunError> {
        let version = self.compiler_version(compiler)?;
        let mut h = blake3::Hasher::new();
        let mut part = |tag: &str, bytes: &[u8]| {
            h.update(tag.as_bytes());
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        part("sparsetir-kernel-v1", b"");
        part("source", source.as_bytes());
        part("compiler", compiler.command_name().as_bytes());
        part("version", version.as_bytes());
        for f in compiler.key_flags() {
            part("flag", f.as_bytes());
        }
        Ok(h.finalize().to_hex().to_string())
    }

    /// The compiler's `--version` output, remembered in the cache directory per compiler binary
    /// ([`Compiler::identity`]: resolved path, size, modification time), so that a cached load
    /// in a fresh process does not spawn the compiler. Falls back to running it.
    pub fn compiler_version(&self, compiler: &Compiler) -> Result<String, RunError> {
        let Some(identity) = compiler.identity() else {
            return compiler.version();
        };
        let id = blake3::hash(identity.as_bytes()).to_hex();
        let memo = self.dir.join(format!("cc-{}.version", &id.as_str()[..32]));
        // The memo holds the identity line, then the version text.
        if let Ok(text) = std::fs::read_to_string(&memo) {
            if let Some((first, version)) = text.split_once('\n') {
                if first == identity {
                    return Ok(version.to_string());
                }
            }
        }
        let version = compiler.version()?;
        // Best effort: a failure to remember only costs a later spawn.
        if std::fs::create_dir_all(&self.dir).is_ok() {
            let tmp = self.temp_path("cc", "version");
            if std::fs::write(&tmp, format!("{identity}\n{version}")).is_ok()
                && std::fs::rename(&tmp, &memo).is_err()
            {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        Ok(version)
    }

    /// Where the entry of `key` lives.
    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.so"))
    }

    fn io_err(&self, path: &Path, e: impl std::fmt::Display) -> RunError {
        RunError::Cache {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// A file name no other thread or process uses at the same time.
    fn temp_path(&self, key: &str, ext: &str) -> PathBuf {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        self.dir.join(format!(
            ".tmp-{key}-{}-{n}-{nanos}.{ext}",
            std::process::id()
        ))
    }

    /// Compiles `source` and publishes it atomically at [`KernelCache::entry_path`]`(key)`; the
    /// source is kept next to it (`<key>.c`) for inspection. Returns the compile time.
    pub fn build(
        &self,
        source: &str,
        compiler: &Compiler,
        key: &str,
    ) -> Result<Duration, RunError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io_err(&self.dir, e))?;
        let src_tmp = self.temp_path(key, "c");
        let so_tmp = self.temp_path(key, "so");
        std::fs::write(&src_tmp, source).map_err(|e| self.io_err(&src_tmp, e))?;
        let start = Instant::now();
        let result = compiler.compile(&src_tmp, source, &so_tmp);
        let elapsed = start.elapsed();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&src_tmp);
            let _ = std::fs::remove_file(&so_tmp);
            return Err(e);
        }
        let final_path = self.entry_path(key);
        if let Err(e) = std::fs::rename(&so_tmp, &final_path) {
            let _ = std::fs::remove_file(&src_tmp);
            let _ = std::fs::remove_file(&so_tmp);
            return Err(self.io_err(&final_path, e));
        }
        // The source copy is informational; failing to keep it is not an error.
        if std::fs::rename(&src_tmp, self.dir.join(format!("{key}.c"))).is_err() {
            let _ = std::fs::remove_file(&src_tmp);
        }
        Ok(elapsed)
    }

    /// Loads the kernel of `source` (entry point `entry`, parameters `params`), compiling it on a
    /// miss and rebuilding an entry that does not load.
    pub fn load(
        &self,
        source: &str,
        entry: &str,
        params: &[KernelParam],
        compiler: &Compiler,
    ) -> Result<(CompiledKernel, LoadReport), RunError> {
        self.load_with(source, compiler, |path| {
            CompiledKernel::load(path, entry, params.to_vec())
        })
    }

    /// The shared object of `source` opened by `open`, compiling it on a miss and rebuilding an
    /// entry that does not open.
    pub fn load_with<T>(
        &self,
        source: &str,
        compiler: &Compiler,
        open: impl Fn(&Path) -> Result<T, RunError>,
    ) -> Result<(T, LoadReport), RunError> {
        self.load_prepared(source, compiler, || Ok(()), open)
    }

    /// [`KernelCache::load_with`], running `prepare` before compiling (on a miss or a rebuild
    /// only): what the compile needs besides the source, e.g. a header it includes.
    pub fn load_prepared<T>(
        &self,
        source: &str,
        compiler: &Compiler,
        prepare: impl FnOnce() -> Result<(), RunError>,
        open: impl Fn(&Path) -> Result<T, RunError>,
    ) -> Result<(T, LoadReport), RunError> {
        let start = Instant::now();
        let key = self.key(source, compiler)?;
        let path = self.entry_path(&key);
        let mut outcome = CacheOutcome::Miss;
        if path.exists() {
            // dlopen can crash on a truncated object, so the file's layout is checked first.
            match check_object_file(&path).and_then(|()| open(&path)) {
                Ok(k) => {
                    let report = LoadReport {
                        outcome: CacheOutcome::Hit,
                        key,
                        path,
                        compile_time: Duration::ZERO,
                        total_time: start.elapsed(),
                    };
                    return Ok((k, report));
                }
                Err(_) => outcome = CacheOutcome::Rebuilt,
            }
        }
        prepare()?;
        let compile_time = self.build(source, compiler, &key)?;
        let loaded = open(&path)?;
        let report = LoadReport {
            outcome,
            key,
            path,
            compile_time,
            total_time: start.elapsed(),
        };
        Ok((loaded, report))
    }

    /// Writes `bytes` as the entry `file_name` of the cache (another compiler's output, e.g. a
    /// cubin) through a temporary file and a rename, so a reader never sees half of it; returns
    /// its path.
    pub fn publish(&self, file_name: &str, bytes: &[u8]) -> Result<PathBuf, RunError> {
        self.publish_with(file_name, |tmp| {
            std::fs::write(tmp, bytes).map_err(|e| self.io_err(tmp, e))
        })
    }

    /// The entry `file_name` written by `write` (given a temporary path in the cache directory)
    /// and then renamed into place, so that a reader never sees half of it; returns its path. A
    /// failure of `write` leaves nothing behind.
    pub fn publish_with(
        &self,
        file_name: &str,
        write: impl FnOnce(&Path) -> Result<(), RunError>,
    ) -> Result<PathBuf, RunError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io_err(&self.dir, e))?;
        let tmp = self.temp_path(file_name, "part");
        if let Err(e) = write(&tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let path = self.dir.join(file_name);
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.io_err(&path, e));
        }
        Ok(path)
    }
}

/// Checks that the shared object at `path` is complete before it is handed to the dynamic
/// loader: on ELF platforms, the header, the program headers and every segment's file range and
/// the section header table must lie inside the file (a truncated or garbage file fails; the
/// loader itself may crash on those instead of failing). Other platforms only check that the
/// file is readable and not empty.
pub fn check_object_file(path: &Path) -> Result<(), RunError> {
    let bytes = std::fs::read(path).map_err(|e| RunError::Load {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    check_object_bytes(&bytes).map_err(|message| RunError::Load {
        path: path.display().to_string(),
        message,
    })
}

fn check_object_bytes(b: &[u8]) -> Result<(), String> {
    if b.is_empty() {
        return Err("empty file".into());
    }
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if b[4] != 2 || b[5] != 1 {
        // Not 64-bit little-endian: leave the judgement to the loader.
        return Ok(());
    }
    let u16_at = |o: usize| -> Option<u64> {
        Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?) as u64)
    };
    let u32_at = |o: usize| -> Option<u64> {
        Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as u64)
    };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?)) };
    let len = b.len() as u64;
    let truncated = || "truncated ELF file".to_string();
    let table_end = |off: u64, entsize: u64, num: u64| {
        entsize
            .checked_mul(num)
            .and_then(|s| s.checked_add(off))
            .filter(|end| *end <= len)
    };
    let (phoff, shoff) = (
        u64_at(0x20).ok_or_else(truncated)?,
        u64_at(0x28).ok_or_else(truncated)?,
    );
    let (phentsize, phnum) = (
        u16_at(0x36).ok_or_else(truncated)?,
        u16_at(0x38).ok_or_else(truncated)?,
    );
    let (shentsize, shnum) = (
        u16_at(0x3A).ok_or_else(truncated)?,
        u16_at(0x3C).ok_or_else(truncated)?,
    );
    if phnum == 0 || phentsize < 56 {
        return Err("no program headers".into());
    }
    table_end(phoff, phentsize, phnum).ok_or_else(truncated)?;
    if shnum > 0 {
        table_end(shoff, shentsize, shnum).ok_or_else(truncated)?;
    }
    for i in 0..phnum {
        let h = (phoff + i * phentsize) as usize;
        let p_type = u32_at(h).ok_or_else(truncated)?;
        let offset = u64_at(h + 8).ok_or_else(truncated)?;
        let filesz = u64_at(h + 32).ok_or_else(truncated)?;
        // PT_NULL segments carry no file range.
        if p_type != 0 && !matches!(offset.checked_add(filesz), Some(end) if end <= len) {
            return Err(truncated());
        }
    }
    Ok(())
}
