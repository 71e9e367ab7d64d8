//! Runs the malformed-script corpus (`tests/malformed/`) through the binary: every file must fail
//! `sparsetir check` (and `fmt`) with exit code 1 and a `file:line:col` diagnostic carrying the
//! expected message, never a panic.

use std::path::PathBuf;
use std::process::Command;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/malformed")
}

/// `(name, line, col, message substring)` from `expected.txt`.
fn expectations() -> Vec<(String, usize, usize, String)> {
    let text = std::fs::read_to_string(corpus().join("expected.txt")).expect("expected.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let name = parts.next().unwrap().to_string();
            let (line, col) = parts.next().unwrap().split_once(':').unwrap();
            let msg = parts.next().unwrap_or("").to_string();
            (name, line.parse().unwrap(), col.parse().unwrap(), msg)
        })
        .collect()
}

#[test]
fn every_malformed_script_fails_with_a_located_error() {
    let cases = expectations();
    assert!(cases.len() >= 30, "only {} malformed cases", cases.len());
    for (name, line, col, msg) in &cases {
        let path = corpus().join(format!("{name}.sp"));
        assert!(path.exists(), "{} listed but missing", path.display());
        for cmd in ["check", "fmt"] {
            let o = Command::new(env!("CARGO_BIN_EXE_sparsetir"))
                .args([cmd, path.to_str().unwrap()])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{cmd} {name}: exit {:?}\n{err}",
                o.status
            );
            assert!(!err.contains("panicked"), "{cmd} {name} panicked:\n{err}");
            let loc = format!("{name}.sp:{line}:{col}");
            assert!(
                err.contains(&loc),
                "{cmd} {name}: expected `{loc}` in\n{err}"
            );
            assert!(
                err.contains(msg.as_str()),
                "{cmd} {name}: expected `{msg}` in\n{err}"
            );
            assert!(o.stdout.is_empty(), "{cmd} {name} printed to stdout");
        }
    }
}

#[test]
fn every_corpus_file_is_listed() {
    let listed: Vec<String> = expectations().into_iter().map(|c| c.0).collect();
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) == Some("sp") {
            let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
            assert!(listed.contains(&stem), "{stem}.sp is not in expected.txt");
        }
    }
}
