//! Architecture names: what parses, what does not, and how they print.

use sparsetir_cuda::{Arch, CudaError};

#[test]
fn accepted_forms() {
    for (input, sm, compute) in [
        ("sm_80", "sm_80", "compute_80"),
        ("compute_80", "sm_80", "compute_80"),
        ("80", "sm_80", "compute_80"),
        ("sm_90a", "sm_90a", "compute_90a"),
        ("SM_86", "sm_86", "compute_86"),
        (" sm_120 ", "sm_120", "compute_120"),
        ("sm_100f", "sm_100f", "compute_100f"),
    ] {
        let a = Arch::parse(input).unwrap();
        assert_eq!(a.sm_name(), sm);
        assert_eq!(a.compute_name(), compute);
        assert_eq!(a.to_string(), sm);
        assert_eq!(input.parse::<Arch>().unwrap(), a);
    }
    let a = Arch::parse("sm_90a").unwrap();
    assert_eq!(a.compute_capability(), (9, 0));
    assert_eq!(a.suffix(), Some('a'));
    assert_eq!(Arch::parse("sm_90").unwrap().with_arch_specific(), a);
    assert_eq!(Arch::parse("sm_120").unwrap().compute_capability(), (12, 0));
}

#[test]
fn rejected_forms() {
    for input in [
        "", "sm_", "compute_", "sm_8", "sm_8000", "sm_80b", "gfx90a", "sm_x80", "12", "sm_80 a",
    ] {
        match Arch::parse(input) {
            Err(CudaError::InvalidArch { input: got, reason }) => {
                assert_eq!(got, input);
                assert!(!reason.is_empty());
            }
            other => panic!("{input:?}: expected InvalidArch, got {other:?}"),
        }
    }
    let e = Arch::parse("sm_80b").unwrap_err().to_string();
    assert!(e.contains("sm_80b") && e.contains("suffix"), "{e}");
}

#[test]
fn from_compute_capability() {
    assert_eq!(
        Arch::from_compute_capability(9, 0).unwrap().sm_name(),
        "sm_90"
    );
    assert_eq!(
        Arch::from_compute_capability(8, 6).unwrap().sm_name(),
        "sm_86"
    );
    assert_eq!(
        Arch::from_compute_capability(12, 0).unwrap().sm_name(),
        "sm_120"
    );
    for (major, minor) in [(0, 0), (9, 10), (-1, 0), (8, -1)] {
        assert!(matches!(
            Arch::from_compute_capability(major, minor),
            Err(CudaError::InvalidArch { .. })
        ));
    }
}
