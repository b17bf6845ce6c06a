//! Options that apply to one topology only do not compile on another
//! (`tests/ui-client/fail/*.stderr`; regenerate with `TRYBUILD=overwrite`
//! after an intended change and review the diff), and each compiles where
//! it applies (`tests/ui-client/pass`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui-client/pass/*.rs");
    t.compile_fail("tests/ui-client/fail/*.rs");
}
