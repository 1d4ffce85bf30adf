//! Compile-fail tests of the derives: each `ui/*.rs` must fail to compile with the
//! errors in its `.stderr` file, each pointing at the offending tokens (the field's type,
//! the attribute key, the enum's name).
//!
//! The `.stderr` files were generated with rustc 1.95.0 (the toolchain of this project's
//! machines and CI); compiler messages change between releases. After a toolchain change or
//! a change of the derives' messages, regenerate them with
//! `TRYBUILD=overwrite cargo test -p weir-compile-fail --test ui`, then read each diff: every error
//! must still point at the user's tokens.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
}
