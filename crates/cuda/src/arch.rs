//! GPU architectures as NVRTC names them (`sm_80`, `compute_90a`): parsing and printing.

use std::fmt;

use crate::CudaError;

/// A GPU architecture: the compute capability as one number (`80` for 8.0, `120` for 12.0) and
/// an optional feature suffix (`a`: architecture-specific features such as Hopper's `wgmma`;
/// `f`: family-specific, CUDA 12.9+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    number: u32,
    suffix: Option<char>,
}

impl Arch {
    /// Parses `sm_80`, `sm_90a`, `compute_80`, `80`, `sm_100f` (case-insensitive prefix).
    pub fn parse(text: &str) -> Result<Arch, CudaError> {
        let err = |reason: &str| CudaError::InvalidArch {
            input: text.to_string(),
            reason: reason.to_string(),
        };
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        let rest = lower
            .strip_prefix("sm_")
            .or_else(|| lower.strip_prefix("compute_"))
            .unwrap_or(&lower);
        if rest.is_empty() {
            return Err(err("expected `sm_XX`, `compute_XX` or `XX` (e.g. sm_80)"));
        }
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(digits_end);
        if digits.is_empty() {
            return Err(err(
                "no compute capability digits (expected e.g. sm_80, compute_90a, 86)",
            ));
        }
        if !(2..=3).contains(&digits.len()) {
            return Err(err(
                "the compute capability must have 2 or 3 digits (e.g. 80, 120)",
            ));
        }
        let suffix = match tail {
            "" => None,
            "a" => Some('a'),
            "f" => Some('f'),
            _ => {
                return Err(err(&format!(
                    "unknown suffix `{tail}` (only `a` and `f` exist)"
                )))
            }
        };
        let number: u32 = digits.parse().map_err(|_| err("not a number"))?;
        if number < 30 {
            return Err(err("compute capabilities below 3.0 do not exist for CUDA"));
        }
        Ok(Arch { number, suffix })
    }

    /// The architecture of a device with compute capability `major.minor` (no suffix).
    pub fn from_compute_capability(major: i32, minor: i32) -> Result<Arch, CudaError> {
        if !(3..=99).contains(&major) || !(0..=9).contains(&minor) {
            return Err(CudaError::InvalidArch {
                input: format!("{major}.{minor}"),
                reason: "not a compute capability (major 3..99, minor 0..9)".to_string(),
            });
        }
        Ok(Arch {
            number: (major * 10 + minor) as u32,
            suffix: None,
        })
    }

    /// This architecture with its architecture-specific features (`sm_90` → `sm_90a`).
    pub fn with_arch_specific(self) -> Arch {
        Arch {
            suffix: Some('a'),
            ..self
        }
    }

    /// `(major, minor)`, e.g. `(9, 0)`.
    pub fn compute_capability(&self) -> (u32, u32) {
        (self.number / 10, self.number % 10)
    }

    /// The feature suffix, if any (`'a'` or `'f'`).
    pub fn suffix(&self) -> Option<char> {
        self.suffix
    }

    /// The real-architecture name, `sm_90a` (the target of a cubin).
    pub fn sm_name(&self) -> String {
        format!("sm_{}{}", self.number, self.suffix_str())
    }

    /// The virtual-architecture name, `compute_90a` (the target of PTX).
    pub fn compute_name(&self) -> String {
        format!("compute_{}{}", self.number, self.suffix_str())
    }

    fn suffix_str(&self) -> String {
        self.suffix.map(String::from).unwrap_or_default()
    }
}

impl fmt::Display for Arch {
    /// Prints [`Arch::sm_name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sm_name())
    }
}

impl std::str::FromStr for Arch {
    type Err = CudaError;
    fn from_str(s: &str) -> Result<Arch, CudaError> {
        Arch::parse(s)
    }
}
