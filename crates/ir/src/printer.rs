//! Printer: IR → canonical script text. `parse(print(ir))` is structurally equal to `ir` and
//! `print(parse(print(ir)))` is the same text.

use crate::func::{IRModule, PrimFunc};

/// Prints every function of the module, separated by a blank line.
pub fn print_module(module: &IRModule) -> String {
    let _ = module;
    todo!("printer")
}

/// Prints one function as `@T.prim_func def ...`.
pub fn print_func(func: &PrimFunc) -> String {
    let _ = func;
    todo!("printer")
}
