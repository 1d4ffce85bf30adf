//! Derive macros for Weir (`weir-macros`).
//!
//! Apps do not depend on this crate directly: `weir` re-exports its derives. This crate owns
//! only code generation; every runtime type the generated code names lives in `weir`
//! (`weir::hooks` and its hidden `__private` helpers, `weir::RecordKey`, `weir::EventTime`).
//!
//! The crate follows thiserror's and serde's layout: this file holds the entry points only;
//! `ast.rs` models the input, `attr.rs` parses `#[weir(...)]`, `valid.rs` holds the rules
//! (each reported at the user's tokens, all reported together, see `ctxt.rs`), `expand.rs`
//! generates the code, and `fallback.rs` what a failed derive emits besides its errors.

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Marks a struct or enum as a Weir record.
///
/// Expands to a compile-time assertion that the type is `Clone + Send + Sync + Serialize +
/// DeserializeOwned + 'static` (the bounds of `weir::Data`), so a missing derive is reported
/// at the type rather than at the first operator that uses it.
///
/// Field attributes (structs only, each on one field at most):
///
/// - `#[weir(key)]`: implements `weir::RecordKey` with the field's type as the key (a clone
///   of the field), so `stream.key_by_field()` partitions by it. The type must be a
///   `weir::Key`; the compiler says so at the field's type if it is not.
/// - `#[weir(event_time)]`: implements `weir::EventTime`, the field converted `Into<u64>`
///   (milliseconds since the Unix epoch; `u64`, `u32`, `u16` or `u8`).
///
/// ```ignore
/// #[derive(Clone, serde::Serialize, serde::Deserialize, weir::Record)]
/// struct Click {
///     #[weir(key)]
///     user: String,
///     #[weir(event_time)]
///     at_ms: u64,
/// }
/// ```
#[proc_macro_derive(Record, attributes(weir))]
pub fn derive_record(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_record(input).into()
}

/// Implements `weir::hooks::Operator` for a struct with named fields: its stable name and
/// state version, the snapshot and restore of its `#[weir(state)]` fields and live changes
/// of its `#[weir(config)]` fields.
///
/// - On the struct, `#[weir(name = "..", version = N)]`, both optional: the operator's type
///   name (default: the struct's name) and state format version (default 1). A snapshot of
///   another name or version is refused on restore.
/// - `#[weir(state)]` on a field: snapshotted and restored (the type must be `Serialize +
///   DeserializeOwned`). A restore decodes every state field before it assigns any, so a
///   failed restore leaves the operator unchanged.
/// - `#[weir(config)]` on a field: settable while the job runs, from text (the type must be
///   `FromStr` with a `Display` error). A field may be both state and config.
///
/// The checks on field types are reported at the field's type. Generic structs are
/// supported; no bound is added to those written (the trait needs `Send + 'static`).
///
/// See `weir::hooks` for an example.
#[proc_macro_derive(Operator, attributes(weir))]
pub fn derive_operator(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_operator(input).into()
}
