//! The kernel catalog of SPEC §6 as sparsetir scripts.
