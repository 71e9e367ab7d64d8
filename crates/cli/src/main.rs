//! The `sparsetir` command-line tool: fmt, check, run.

fn main() {}
