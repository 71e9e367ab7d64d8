//! What the host machine offers that schedules adapt to: the per-core L2 cache size.

/// The L2 cache size of CPU 0 in bytes, read from Linux's sysfs
/// (`/sys/devices/system/cpu/cpu0/cache/index*/{level,size}`) once per process; 1 MiB where
/// it cannot be read (another OS, a container hiding sysfs).
pub fn l2_cache_bytes() -> usize {
    static L2: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *L2.get_or_init(read_l2_cache_bytes)
}

fn read_l2_cache_bytes() -> usize {
    const FALLBACK: usize = 1 << 20;
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    for index in 0..8 {
        let dir = base.join(format!("index{index}"));
        let Ok(level) = std::fs::read_to_string(dir.join("level")) else {
            continue;
        };
        if level.trim() != "2" {
            continue;
        }
        if let Some(bytes) = std::fs::read_to_string(dir.join("size"))
            .ok()
            .and_then(|s| parse_size(&s))
        {
            return bytes;
        }
    }
    FALLBACK
}

/// Parses sysfs cache sizes: `2048K`, `1M`, `512` (bytes).
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("2048K\n"), Some(2 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("x1K"), None);
        assert_eq!(parse_size(""), None);
        // Whatever the machine, a plausible size.
        let l2 = l2_cache_bytes();
        assert!((16 << 10..=1 << 30).contains(&l2), "{l2}");
    }
}
