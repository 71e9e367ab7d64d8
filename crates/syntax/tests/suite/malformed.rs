//! Data-driven malformed-script corpus: every `tests/malformed/<name>.sp` (repository root) must
//! fail to parse, and the rendered diagnostics must contain `<name>.sp:<line>:<col>` and the
//! message substring listed in `tests/malformed/expected.txt`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use sparsetir_syntax::{parse_bytes, render};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/malformed")
}

struct Expected {
    name: String,
    loc: String,
    substring: String,
}

fn expected() -> Vec<Expected> {
    let text = std::fs::read_to_string(corpus_dir().join("expected.txt")).expect("expected.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let name = parts.next().unwrap_or_default().to_string();
            let loc = parts.next().unwrap_or_default().to_string();
            let substring = parts.next().unwrap_or_default().to_string();
            Expected {
                name,
                loc,
                substring,
            }
        })
        .collect()
}

#[test]
fn corpus_has_expectations_for_every_file() {
    let exp: BTreeSet<String> = expected().into_iter().map(|e| e.name).collect();
    let files: BTreeSet<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|n| n.strip_suffix(".sp").map(str::to_string))
        .collect();
    assert_eq!(
        exp, files,
        "expected.txt and the .sp files must list the same names"
    );
    assert!(
        files.len() >= 35,
        "the corpus needs at least 35 scripts, has {}",
        files.len()
    );
}

#[test]
fn every_malformed_script_is_reported_at_the_right_place() {
    let mut failures = Vec::new();
    for e in expected() {
        let file = format!("{}.sp", e.name);
        let bytes = std::fs::read(corpus_dir().join(&file)).expect("corpus file");
        let source = String::from_utf8_lossy(&bytes);
        let diags = match parse_bytes(&bytes) {
            Ok(_) => {
                failures.push(format!("{file}: parsed without error"));
                continue;
            }
            Err(d) => d,
        };
        assert!(
            !diags.is_empty(),
            "{file}: an error must carry at least one diagnostic"
        );
        for d in &diags {
            assert!(d.span.start <= d.span.end, "{file}: inverted span");
            assert!(
                d.span.end as usize <= bytes.len(),
                "{file}: span past the end of the input"
            );
        }
        let out = render(&diags, &file, &source);
        let first = out.lines().next().unwrap_or_default();
        let want_loc = format!("{file}:{}: error: ", e.loc);
        if !first.starts_with(&want_loc) || !first.contains(&e.substring) {
            failures.push(format!(
                "{file}: expected `{want_loc}...{}...`, got:\n{out}",
                e.substring
            ));
        }
        assert!(
            out.contains('^'),
            "{file}: the rendering must show a caret:\n{out}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
