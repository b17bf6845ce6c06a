//! Compile-time rules of the `LockLayer`'s modes: a layer has one mode, and
//! the options of an answer exist only in the modes that give it
//! (`tests/tower-ui/*.stderr`; regenerate with `TRYBUILD=overwrite` after an
//! intended change and review the diff).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/tower-ui/*.rs");
}
