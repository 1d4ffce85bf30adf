//! Compile-fail tests of Weir's derives: see `tests/ui.rs`. The crate has no code of its own.
