//! Derive macros for Weir (`weir-macros`).
//!
//! Apps do not depend on this crate directly: `weir` re-exports its derives. This crate owns
//! only code generation; every runtime type the generated code names lives in `weir`.
//!
//! The operator derives (`#[derive(Operator)]`, `#[weir(state)]`, `#[weir(config)]`) are the
//! subject of their own issue; for now the crate provides `Record`, which marks a type as a
//! stream element and checks at compile time that it meets [`weir::Data`]'s bounds.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, DeriveInput};

/// Marks a struct or enum as a Weir record.
///
/// Expands to a compile-time assertion that the type is `Clone + Send + Serialize +
/// DeserializeOwned + 'static` (the bounds of `weir::Data`), so a missing derive is reported
/// at the type rather than at the first operator that uses it.
#[proc_macro_derive(Record, attributes(weir))]
pub fn derive_record(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        const _: () = {
            fn __weir_assert_data #impl_generics () #where_clause {
                fn check<T: ::weir::Data>() {}
                check::<#name #ty_generics>();
            }
        };
    }
    .into()
}

/// Derives `weir::Operator` (work in progress).
#[proc_macro_derive(Operator, attributes(weir))]
pub fn derive_operator(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
