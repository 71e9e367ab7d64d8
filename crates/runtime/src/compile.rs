//! Invoking the C compiler (`$CC`, default `cc`) to build a kernel's C source into a shared object.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use crate::error::{number_lines, RunError};

/// The flags every kernel is compiled with (SPEC §8).
pub const DEFAULT_FLAGS: [&str; 6] = [
    "-std=c11",
    "-O3",
    "-march=native",
    "-fopenmp",
    "-fPIC",
    "-shared",
];

/// Libraries linked after the source (math functions of the generated code).
const LINK_LIBS: [&str; 1] = ["-lm"];

/// A C compiler command: the program (with any leading words of `$CC`, e.g. `ccache gcc`) and
/// the flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiler {
    /// The program to run.
    pub program: String,
    /// Words of the compiler command after the program (from `$CC = "ccache gcc"`).
    pub prefix_args: Vec<String>,
    /// [`DEFAULT_FLAGS`] followed by the user's extra flags.
    pub flags: Vec<String>,
}

impl Compiler {
    /// The compiler `cc` names (or `$CC`, or `cc`), with the default flags plus `extra_flags`.
    pub fn new(cc: Option<&str>, extra_flags: &[String]) -> Compiler {
        let command = match cc {
            Some(c) if !c.trim().is_empty() => c.to_string(),
            _ => match std::env::var("CC") {
                Ok(c) if !c.trim().is_empty() => c,
                _ => "cc".to_string(),
            },
        };
        let mut words = command.split_whitespace().map(str::to_string);
        let program = words.next().unwrap_or_else(|| "cc".to_string());
        let prefix_args = words.collect();
        let mut flags: Vec<String> = DEFAULT_FLAGS.iter().map(|s| s.to_string()).collect();
        flags.extend(extra_flags.iter().cloned());
        Compiler {
            program,
            prefix_args,
            flags,
        }
    }

    /// The compiler command as one string (program and leading words).
    pub fn command_name(&self) -> String {
        let mut s = self.program.clone();
        for w in &self.prefix_args {
            s.push(' ');
            s.push_str(w);
        }
        s
    }

    /// The output of `<cc> --version`, memoized per process and compiler command (it is part of
    /// every cache key, and spawning the compiler on each cached load would cost milliseconds).
    pub fn version(&self) -> Result<String, RunError> {
        static VERSIONS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);
        let name = self.command_name();
        if let Ok(guard) = VERSIONS.lock() {
            if let Some(v) = guard.as_ref().and_then(|m| m.get(&name)) {
                return Ok(v.clone());
            }
        }
        let out = Command::new(&self.program)
            .args(&self.prefix_args)
            .arg("--version")
            .output()
            .map_err(|e| RunError::NoCompiler {
                cc: name.clone(),
                message: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(RunError::NoCompiler {
                cc: name,
                message: format!(
                    "`--version` failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let version = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Ok(mut guard) = VERSIONS.lock() {
            guard
                .get_or_insert_with(HashMap::new)
                .insert(name, version.clone());
        }
        Ok(version)
    }

    /// A description of the compiler binary that changes whenever it is replaced: its resolved
    /// path (through `$PATH` and symlinks), size and modification time. `None` when it cannot be
    /// found, or when `$CC` has leading words (a wrapper such as `ccache gcc`, whose identity
    /// says nothing about the compiler behind it).
    pub fn identity(&self) -> Option<String> {
        if !self.prefix_args.is_empty() {
            return None;
        }
        let program = Path::new(&self.program);
        let found = if self.program.contains('/') {
            program.to_path_buf()
        } else {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| p.is_file())?
        };
        let real = std::fs::canonicalize(found).ok()?;
        let meta = std::fs::metadata(&real).ok()?;
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(format!("{}|{}|{mtime}", real.display(), meta.len()))
    }

    /// The arguments after the program for compiling `src` into `out`.
    fn args(&self, src: &Path, out: &Path) -> Vec<String> {
        let mut args = self.prefix_args.clone();
        args.extend(self.flags.iter().cloned());
        args.push("-o".into());
        args.push(out.display().to_string());
        args.push(src.display().to_string());
        args.extend(LINK_LIBS.iter().map(|s| s.to_string()));
        args
    }

    /// Everything that decides the produced object besides the source: the command, its flags
    /// and linked libraries (part of the cache key).
    pub fn key_flags(&self) -> Vec<String> {
        let mut v = self.flags.clone();
        v.extend(LINK_LIBS.iter().map(|s| s.to_string()));
        v
    }

    /// Compiles the C file `src` (whose text is `source`, shown on failure) into the shared
    /// object `out`.
    pub fn compile(&self, src: &Path, source: &str, out: &Path) -> Result<(), RunError> {
        self.run(&self.args(src, out), || number_lines(source))
    }

    /// Runs the compiler with `args`; a failure is a [`RunError::Compile`] showing
    /// `numbered_source()`.
    fn run(
        &self,
        args: &[String],
        numbered_source: impl FnOnce() -> String,
    ) -> Result<(), RunError> {
        let result = Command::new(&self.program)
            .args(args)
            .output()
            .map_err(|e| RunError::NoCompiler {
                cc: self.command_name(),
                message: e.to_string(),
            })?;
        if result.status.success() {
            return Ok(());
        }
        Err(RunError::Compile {
            command: format!("{} {} ({})", self.program, args.join(" "), result.status),
            stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
            numbered_source: numbered_source(),
        })
    }

    /// Precompiles the header `header` into `out` (GCC's `.gch`) with this compiler's flags,
    /// except that a language given with `-x L` becomes `-x L-header` and `-shared` and the
    /// linked libraries are left out: the flags a later compile including `header` uses must
    /// match for the compiler to take the precompiled form.
    pub fn compile_header(&self, header: &Path, out: &Path) -> Result<(), RunError> {
        let mut args = self.prefix_args.clone();
        let mut language = false;
        for f in &self.flags {
            if language && !f.ends_with("-header") {
                args.push(format!("{f}-header"));
            } else if f != "-shared" {
                args.push(f.clone());
            }
            language = f == "-x";
        }
        args.push("-o".into());
        args.push(out.display().to_string());
        args.push(header.display().to_string());
        self.run(&args, String::new)
    }
}

/// Whether `compiler` can be run at all (`--version` succeeds): tests skip when it cannot.
pub fn compiler_available(compiler: &Compiler) -> bool {
    compiler.version().is_ok()
}
