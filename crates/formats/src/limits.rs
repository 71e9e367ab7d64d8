//! The process-wide allocation limit for arrays whose size comes from user data (packing a
//! file into its storage, allocating outputs): a few bytes of input can declare billions of
//! rows, and the allocation must be refused with an error naming it rather than attempted
//! (with overcommit, an oversized allocation "succeeds" and the process is killed later).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// 0: not set (the default, physical memory, applies).
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The largest array (bytes) sized by user data: physical memory unless set.
pub fn max_alloc_bytes() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        0 => physical_memory(),
        n => n,
    }
}

/// Sets the limit (bytes); 0 restores the default.
pub fn set_max_alloc_bytes(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// Refuses `n` elements of `elem_bytes` each past the limit: `Err` says how many bytes that is.
pub fn check(n: usize, elem_bytes: usize) -> Result<(), String> {
    let limit = max_alloc_bytes();
    match n.checked_mul(elem_bytes) {
        Some(b) if b <= limit => Ok(()),
        b => Err(format!(
            "{n} elements ({} bytes) exceed the allocation limit of {limit} bytes",
            b.map_or_else(|| "over 2^64".to_string(), |b| b.to_string())
        )),
    }
}

/// Total memory from `/proc/meminfo` (unlimited where that cannot be read).
fn physical_memory() -> usize {
    static MEM: OnceLock<usize> = OnceLock::new();
    *MEM.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
                kb.checked_mul(1024)
            })
            .unwrap_or(usize::MAX)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn check_refuses_past_the_limit() {
        assert!(super::check(usize::MAX, 8).is_err());
        assert!(super::check(16, 8).is_ok());
        assert!(super::max_alloc_bytes() > 0);
    }
}
