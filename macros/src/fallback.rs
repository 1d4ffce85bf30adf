//! What a failed derive still emits besides its errors (thiserror's `fallback.rs`): an
//! `Operator` impl with the right signatures and no behaviour, so that one mistake in the
//! attributes does not also cause "`Operator` is not implemented" at every `apply(op)`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::{Generics, Ident};

/// An `Operator` impl for `ident` whose methods are never reached (the crate does not
/// compile, because the derive's errors are emitted next to it).
pub(crate) fn operator(ident: &Ident, generics: &Generics) -> TokenStream {
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let name = ident.unraw().to_string();
    quote! {
        const _: () = {
            #[automatically_derived]
            impl #impl_generics ::weir::hooks::Operator for #ident #ty_generics #where_clause {
                const NAME: &'static str = #name;
                const STATE_VERSION: u32 = 1;

                fn config_keys() -> &'static [::weir::hooks::ConfigKey] {
                    &[]
                }

                fn snapshot_state(
                    &self,
                ) -> ::core::result::Result<::weir::hooks::StateSnapshot, ::weir::hooks::StateError>
                {
                    ::core::unreachable!()
                }

                fn restore_state(
                    &mut self,
                    _: &::weir::hooks::StateSnapshot,
                ) -> ::core::result::Result<(), ::weir::hooks::StateError> {
                    ::core::unreachable!()
                }

                fn on_config(
                    &mut self,
                    _: &str,
                    _: &str,
                ) -> ::core::result::Result<(), ::weir::hooks::ConfigError> {
                    ::core::unreachable!()
                }
            }

            #[automatically_derived]
            impl #impl_generics ::weir::hooks::KeyedFields for #ident #ty_generics #where_clause {
                type Keyed = ();

                fn keyed_ttls() -> ::std::vec::Vec<::core::option::Option<::weir::StateTtl>> {
                    ::core::unreachable!()
                }

                fn load_keyed(
                    &mut self,
                    _: &mut (),
                    _: &[::core::option::Option<::weir::StateTtl>],
                    _: u64,
                ) {
                    ::core::unreachable!()
                }

                fn store_keyed(
                    &mut self,
                    _: &mut (),
                    _: &[::core::option::Option<::weir::StateTtl>],
                    _: u64,
                ) -> bool {
                    ::core::unreachable!()
                }

                fn prune_keyed(
                    _: &mut (),
                    _: &[::core::option::Option<::weir::StateTtl>],
                    _: u64,
                ) -> bool {
                    ::core::unreachable!()
                }
            }
        };
    }
}
