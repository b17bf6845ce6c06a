//! The compile-time tests (trybuild), in one test binary with one
//! `TestCases`, so that trybuild builds the crate's dependencies for them
//! once, not once per binary. Each `.stderr` pins a compile error; regenerate
//! with `TRYBUILD=overwrite` after an intended change and review the diff.
//!
//! - `tests/ui/`: `#[distributed_lock]`. Every supported fn shape compiles
//!   and runs (on the in-memory backend, `pass/`), every misuse is a compile
//!   error at the offending token (`fail/`).
//! - `tests/ui-client/`: options that apply to one topology only do not
//!   compile on another (`fail/`), and each compiles where it applies
//!   (`pass/`).
//! - `tests/tower-ui/` (with the `tower` feature): the `LockLayer`'s modes.
//!   A layer has one mode, and the options of an answer exist only in the
//!   modes that give it.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui-client/pass/*.rs");
    t.compile_fail("tests/ui-client/fail/*.rs");
    #[cfg(feature = "tower")]
    t.compile_fail("tests/tower-ui/*.rs");
}
