//! Per-kernel resources (registers, spills, shared memory, stack) read from the report that
//! ptxas writes into NVRTC's log under `--ptxas-options=-v`.

/// What ptxas reported for one `__global__` function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel's symbol.
    pub kernel: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes stored to local memory because registers ran out.
    pub spill_stores: u64,
    /// Bytes loaded back from those spills.
    pub spill_loads: u64,
    /// Bytes of static shared memory.
    pub shared_bytes: u64,
    /// Bytes of stack frame per thread.
    pub stack_bytes: u64,
}

/// Reads the kernels' resources from a ptxas report, in the report's order (which is not the
/// source's: look kernels up by name). The report
/// looks like:
///
/// ```text
/// ptxas info    : Compiling entry function 'axpy' for 'sm_80'
/// ptxas info    : Function properties for axpy
/// ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 10 registers, used 0 barriers
/// ```
///
/// Lines it does not recognise are skipped; properties of non-entry functions are ignored.
pub fn parse_ptxas_info(log: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    // The kernel whose lines follow (an index into `out`), if the current function is an entry.
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let body = line
            .trim()
            .strip_prefix("ptxas info")
            .map(|r| r.trim_start().trim_start_matches(':').trim());
        match body {
            Some(b) if b.starts_with("Compiling entry function") => {
                let name = quoted(b).unwrap_or_default().to_string();
                current = Some(match out.iter().position(|k| k.kernel == name) {
                    Some(i) => i,
                    None => {
                        out.push(KernelResources {
                            kernel: name,
                            ..KernelResources::default()
                        });
                        out.len() - 1
                    }
                });
            }
            Some(b) if b.starts_with("Function properties for") => {
                let name = b["Function properties for".len()..].trim();
                current = out.iter().position(|k| k.kernel == name);
            }
            Some(b) if b.starts_with("Used") => {
                if let Some(i) = current {
                    apply_items(&mut out[i], b);
                }
            }
            Some(_) => {}
            None => {
                if let Some(i) = current {
                    if line.contains("bytes stack frame") {
                        apply_items(&mut out[i], line.trim());
                    }
                }
            }
        }
    }
    out
}

/// The text between the first pair of single quotes.
fn quoted(s: &str) -> Option<&str> {
    let start = s.find('\'')? + 1;
    let len = s[start..].find('\'')?;
    Some(&s[start..start + len])
}

/// Applies the comma-separated items of a `Used ...` or `... stack frame ...` line.
fn apply_items(k: &mut KernelResources, line: &str) {
    for item in line.split(',') {
        // The count is the first number of the item: `Used 10 registers`, `used 0 barriers`,
        // `ptxas . 16 bytes stack frame` (newer ptxas prefix the properties line).
        let words: Vec<&str> = item.split_whitespace().collect();
        let Some(i) = words.iter().position(|w| w.parse::<u64>().is_ok()) else {
            continue;
        };
        let n: u64 = words[i].parse().unwrap_or(0);
        match words[i + 1..].join(" ").as_str() {
            "registers" => k.registers = u32::try_from(n).unwrap_or(u32::MAX),
            "bytes smem" => k.shared_bytes = n,
            "bytes stack frame" => k.stack_bytes = n,
            "bytes spill stores" => k.spill_stores = n,
            "bytes spill loads" => k.spill_loads = n,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_entry() {
        let log = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_80'
ptxas info    : Function properties for a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 380 bytes cmem[0]
ptxas info    : Function properties for helper
    32 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'b' for 'sm_80'
ptxas info    : Function properties for b
ptxas         .     16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
";
        let r = parse_ptxas_info(log);
        assert_eq!(
            r,
            vec![
                KernelResources {
                    kernel: "a".into(),
                    registers: 10,
                    ..Default::default()
                },
                KernelResources {
                    kernel: "b".into(),
                    registers: 255,
                    spill_stores: 24,
                    spill_loads: 20,
                    shared_bytes: 4096,
                    stack_bytes: 16,
                },
            ]
        );
        assert!(parse_ptxas_info("").is_empty());
    }
}
