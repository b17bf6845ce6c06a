//! Compile-time behaviour of `#[distributed_lock]`: every supported fn shape
//! compiles and runs (on the in-memory backend), every misuse is a compile
//! error at the offending token (`tests/ui/fail/*.stderr`; regenerate with
//! `TRYBUILD=overwrite` after an intended change and review the diff).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
