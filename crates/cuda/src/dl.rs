//! A macro that declares a table of C functions resolved from a shared library at run time, so
//! the NVRTC and driver bindings each list their functions once.

/// `fn_table!(Name { field: "symbol" => fn(args) -> ret; ... })` declares `struct Name` holding
/// the library and one function pointer per entry, and `Name::resolve(lib)`, which fails with
/// the name of the first missing symbol.
macro_rules! fn_table {
    ($name:ident { $($field:ident : $sym:literal => fn($($arg:ty),* $(,)?) -> $ret:ty;)* }) => {
        pub(crate) struct $name {
            $(pub(crate) $field: unsafe extern "C" fn($($arg),*) -> $ret,)*
            // Last: the pointers above are valid only while the library stays loaded.
            _lib: libloading::Library,
        }

        impl $name {
            /// Looks up every function in `lib`.
            ///
            /// # Safety
            /// `lib` must be the library these C signatures were written for.
            pub(crate) unsafe fn resolve(lib: libloading::Library) -> Result<Self, String> {
                $(
                    let $field = *lib
                        .get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                            concat!($sym, "\0").as_bytes(),
                        )
                        .map_err(|e| format!("missing function {}: {e}", $sym))?;
                )*
                Ok($name { $($field,)* _lib: lib })
            }
        }
    };
}

pub(crate) use fn_table;
