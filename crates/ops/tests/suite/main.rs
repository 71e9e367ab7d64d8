//! The ops crate's integration tests in one test binary (one link instead of one per file;
//! their tests share both cores): each file is a module as it was a test crate.
mod catalog;
mod numerics;
