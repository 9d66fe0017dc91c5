//! The library's public API: dropping a guard by accident is a compile
//! warning. Each of `tests/ui/must_use.rs`'s misuses fails under
//! `deny(unused_must_use)`, with a message that says what is lost.

#[test]
fn a_dropped_lock_permit_watchdog_builder_or_options_warns() {
    trybuild::TestCases::new().compile_fail("tests/ui/must_use.rs");
}
