//! Where the libraries are looked for: an explicit snapshot of the environment variables that
//! matter, and the ordered list of NVRTC candidates it gives (no process state is read or changed
//! except through [`SearchEnv::from_process`], so tests can pass their own snapshot).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variables that steer the search. Build one with [`SearchEnv::from_process`],
/// or [`SearchEnv::empty`] plus [`SearchEnv::with`] in tests.
#[derive(Clone, Debug, Default)]
pub struct SearchEnv {
    vars: BTreeMap<String, OsString>,
}

/// The variables [`SearchEnv::from_process`] reads.
const VARS: &[&str] = &[
    "SPARSETIR_NVRTC",
    "SPARSETIR_CUDA_DRIVER",
    "SPARSETIR_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HOME",
    "CUDA_HOME",
    "CUDA_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
];

/// The file names tried in each directory, in order: the development link, then the CUDA 13 and
/// CUDA 12 sonames (what wheels ship).
pub(crate) const NVRTC_NAMES: &[&str] = &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"];

impl SearchEnv {
    /// The current process's values of the variables that matter.
    pub fn from_process() -> SearchEnv {
        let mut env = SearchEnv::empty();
        for &k in VARS {
            if let Some(v) = std::env::var_os(k) {
                env.vars.insert(k.to_string(), v);
            }
        }
        env
    }

    /// No variable set.
    pub fn empty() -> SearchEnv {
        SearchEnv::default()
    }

    /// This snapshot with `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Into<OsString>) -> SearchEnv {
        self.vars.insert(key.to_string(), value.into());
        self
    }

    /// A variable's value; an empty value counts as unset.
    pub fn get(&self, key: &str) -> Option<&OsString> {
        self.vars.get(key).filter(|v| !v.is_empty())
    }

    /// The sparsetir cache directory: `$SPARSETIR_CACHE_DIR`, else `$XDG_CACHE_HOME/sparsetir`,
    /// else `$HOME/.cache/sparsetir` (the same rule as sparsetir-runtime and
    /// `scripts/setup-nvrtc.sh`).
    pub fn cache_dir(&self) -> Option<PathBuf> {
        if let Some(d) = self.get("SPARSETIR_CACHE_DIR") {
            return Some(PathBuf::from(d));
        }
        if let Some(d) = self.get("XDG_CACHE_HOME") {
            return Some(Path::new(d).join("sparsetir"));
        }
        self.get("HOME")
            .map(|h| Path::new(h).join(".cache").join("sparsetir"))
    }
}

/// One place NVRTC may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// `$SPARSETIR_NVRTC`: must load, or the search stops with an error.
    Explicit(PathBuf),
    /// A file path tried only if it exists.
    File(PathBuf),
    /// A bare name resolved by the system loader (`LD_LIBRARY_PATH`, `ld.so.cache`).
    LoaderName(&'static str),
}

impl Candidate {
    /// The path (or bare name) as reported in [`crate::CudaError::NvrtcNotFound`].
    pub fn display_path(&self) -> PathBuf {
        match self {
            Candidate::Explicit(p) | Candidate::File(p) => p.clone(),
            Candidate::LoaderName(n) => PathBuf::from(n),
        }
    }
}

/// Every place NVRTC is looked for, in order (see the crate docs for the order). Directory
/// wildcards are expanded against the file system now; nothing is loaded.
pub fn nvrtc_candidates(env: &SearchEnv) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(p) = env.get("SPARSETIR_NVRTC") {
        out.push(Candidate::Explicit(PathBuf::from(p)));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env.get(var) {
            dirs.push(Path::new(root).join("lib64"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for d in versioned_children(Path::new("/usr/local"), "cuda-") {
        dirs.push(d.join("lib64"));
    }
    push_files(&mut out, &dirs);
    for &name in NVRTC_NAMES {
        out.push(Candidate::LoaderName(name));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(cache) = env.cache_dir() {
        dirs.push(cache.join("nvrtc/nvidia/cuda_nvrtc/lib"));
    }
    for site in site_packages(env) {
        dirs.push(site.join("nvidia/cuda_nvrtc/lib"));
        dirs.push(site.join("nvidia/cu13/lib"));
    }
    push_files(&mut out, &dirs);
    dedup(out)
}

fn push_files(out: &mut Vec<Candidate>, dirs: &[PathBuf]) {
    for d in dirs {
        for &name in NVRTC_NAMES {
            out.push(Candidate::File(d.join(name)));
        }
    }
}

fn dedup(list: Vec<Candidate>) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::with_capacity(list.len());
    for c in list {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Python package directories found without running Python: `$PYTHONPATH` entries, then the
/// `site-packages` of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `/usr/local`, and `/usr`'s
/// `dist-packages` (newest Python first within each).
pub fn site_packages(env: &SearchEnv) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(pp) = env.get("PYTHONPATH") {
        out.extend(std::env::split_paths(pp).filter(|p| !p.as_os_str().is_empty()));
    }
    let mut prefixes: Vec<(PathBuf, &str)> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = env.get(var) {
            prefixes.push((PathBuf::from(p), "site-packages"));
        }
    }
    if let Some(h) = env.get("HOME") {
        prefixes.push((Path::new(h).join(".local"), "site-packages"));
    }
    prefixes.push((PathBuf::from("/usr/local"), "site-packages"));
    prefixes.push((PathBuf::from("/usr/local"), "dist-packages"));
    prefixes.push((PathBuf::from("/usr"), "dist-packages"));
    for (prefix, leaf) in prefixes {
        for py in versioned_children(&prefix.join("lib"), "python3") {
            let d = py.join(leaf);
            if d.is_dir() {
                out.push(d);
            }
        }
    }
    out
}

/// The subdirectories of `dir` whose names start with `prefix`, the highest version (the numbers
/// after the prefix, compared numerically) first. A missing `dir` gives none.
fn versioned_children(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(Vec<u64>, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(prefix)?;
            let path = e.path();
            path.is_dir().then(|| (version_key(rest), path))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, p)| p).collect()
}

/// `"12.4"` → `[12, 4]`, `".11"` → `[11]`: the runs of digits, for ordering versions.
pub(crate) fn version_key(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numerically() {
        assert!(version_key("12.10") > version_key("12.9"));
        assert!(version_key(".12") > version_key(".9"));
        assert_eq!(version_key(""), Vec::<u64>::new());
    }

    #[test]
    fn empty_values_count_as_unset() {
        let env = SearchEnv::empty().with("SPARSETIR_NVRTC", "");
        assert!(env.get("SPARSETIR_NVRTC").is_none());
        assert!(!matches!(
            nvrtc_candidates(&env).first(),
            Some(Candidate::Explicit(_))
        ));
    }

    #[test]
    fn cache_dir_rule() {
        let e = SearchEnv::empty().with("HOME", "/h");
        assert_eq!(e.cache_dir(), Some(PathBuf::from("/h/.cache/sparsetir")));
        let e = e.with("XDG_CACHE_HOME", "/x");
        assert_eq!(e.cache_dir(), Some(PathBuf::from("/x/sparsetir")));
        let e = e.with("SPARSETIR_CACHE_DIR", "/c");
        assert_eq!(e.cache_dir(), Some(PathBuf::from("/c")));
        assert_eq!(SearchEnv::empty().cache_dir(), None);
    }
}
