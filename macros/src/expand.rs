//! Code generation (thiserror's `expand.rs`). Everything generated names `weir` by full path
//! (`::weir::hooks::Operator`, `::weir::hooks::__private::..`), is `#[automatically_derived]`
//! where it is an impl, and sits in a `const _: () = { .. };` so it adds no name to the
//! user's module.
//!
//! Checks on a field's type (state fields serialize, config fields parse) are emitted with
//! the type's span, so the compiler's error points at the field's type rather than at the
//! derive.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{DeriveInput, LitStr, Type};

use crate::ast::{Data, Field, Input};
use crate::attr::Derive;
use crate::ctxt::Ctxt;
use crate::fallback;

/// `#[derive(Operator)]`: the impl, or the errors and a fallback impl.
pub(crate) fn derive_operator(input: DeriveInput) -> TokenStream {
    let ident = input.ident.clone();
    let generics = input.generics.clone();
    derive_operator_impl(input).unwrap_or_else(|err| {
        let errors = err.into_compile_error();
        let fallback = fallback::operator(&ident, &generics);
        quote! {
            #errors
            #fallback
        }
    })
}

/// `#[derive(Record)]`: the assertion and trait impls, or the errors.
pub(crate) fn derive_record(input: DeriveInput) -> TokenStream {
    derive_record_impl(input).unwrap_or_else(syn::Error::into_compile_error)
}

/// The expansion of `#[derive(Operator)]`, or every error found in `input`, combined.
pub(crate) fn derive_operator_impl(input: DeriveInput) -> syn::Result<TokenStream> {
    let cx = Ctxt::new();
    let model = Input::from_syn(&cx, &input, Derive::Operator);
    model.validate_operator(&cx);
    cx.check()?;
    Ok(expand_operator(&model))
}

/// The expansion of `#[derive(Record)]`, or every error found in `input`, combined.
pub(crate) fn derive_record_impl(input: DeriveInput) -> syn::Result<TokenStream> {
    let cx = Ctxt::new();
    let model = Input::from_syn(&cx, &input, Derive::Record);
    model.validate_record(&cx);
    cx.check()?;
    Ok(expand_record(&model))
}

/// `snapshot_state`'s body: the subtask-state fields, encoded with the operator's name and
/// state version.
fn snapshot_body(
    state: &[&Field],
    operator: &TokenStream,
    state_version: &TokenStream,
) -> TokenStream {
    if state.is_empty() {
        quote! {
            ::weir::hooks::__private::encode(#operator, #state_version, ::std::vec::Vec::new())
        }
    } else {
        let count = Literal::usize_unsuffixed(state.len());
        let puts = state.iter().map(|f| {
            let (member, key, ty) = (&f.member, f.name(), f.ty);
            quote_spanned! {f.ty_span()=>
                ::weir::hooks::__private::assert_state_field::<#ty>();
                ::weir::hooks::__private::put_field::<#ty>(
                    &mut __weir_fields, __weir_operator, #key, &self.#member
                )?;
            }
        });
        quote! {
            let __weir_operator: &'static str = #operator;
            let mut __weir_fields: ::weir::hooks::__private::Fields =
                ::std::vec::Vec::with_capacity(#count);
            #(#puts)*
            ::weir::hooks::__private::encode(__weir_operator, #state_version, __weir_fields)
        }
    }
}

/// `restore_state`'s body: every subtask-state field decoded before any is assigned.
fn restore_body(
    state: &[&Field],
    operator: &TokenStream,
    state_version: &TokenStream,
) -> TokenStream {
    if state.is_empty() {
        quote! {
            ::weir::hooks::__private::decode(#operator, #state_version, __weir_snapshot)?;
            ::core::result::Result::Ok(())
        }
    } else {
        let temps: Vec<_> = (0..state.len())
            .map(|i| format_ident!("__weir_state_{}", i))
            .collect();
        let takes = state.iter().zip(&temps).map(|(f, temp)| {
            let (key, ty) = (f.name(), f.ty);
            quote_spanned! {f.ty_span()=>
                ::weir::hooks::__private::assert_state_field::<#ty>();
                let #temp: #ty = ::weir::hooks::__private::take_field::<#ty>(
                    &mut __weir_fields, __weir_operator, #key
                )?;
            }
        });
        let members = state.iter().map(|f| &f.member);
        quote! {
            let __weir_operator: &'static str = #operator;
            let mut __weir_fields =
                ::weir::hooks::__private::decode(__weir_operator, #state_version, __weir_snapshot)?;
            // Every field is decoded before any is assigned: a failed restore leaves the
            // operator as it was.
            #(#takes)*
            #(self.#members = #temps;)*
            ::core::result::Result::Ok(())
        }
    }
}

/// `on_config`'s body: a match of the key over the config fields, each value parsed.
fn on_config_body(config: &[&Field], operator: &TokenStream) -> TokenStream {
    if config.is_empty() {
        quote! {
            let _ = __weir_value;
            ::core::result::Result::Err(::weir::hooks::__private::unknown_key(
                #operator,
                __weir_key,
                __WEIR_CONFIG_KEYS,
            ))
        }
    } else {
        let arms = config.iter().map(|f| {
            let (member, key, ty) = (&f.member, f.name(), f.ty);
            let type_name = type_name(ty);
            let parse = quote_spanned! {f.ty_span()=>
                ::weir::hooks::__private::assert_config_field::<#ty>();
                let __weir_parsed: #ty = ::weir::hooks::__private::parse_config::<#ty>(
                    __weir_operator, #key, #type_name, __weir_value
                )?;
            };
            quote! {
                #key => {
                    #parse
                    self.#member = __weir_parsed;
                    ::core::result::Result::Ok(())
                }
            }
        });
        quote! {
            let __weir_operator: &'static str = #operator;
            match __weir_key {
                #(#arms)*
                _ => ::core::result::Result::Err(::weir::hooks::__private::unknown_key(
                    __weir_operator,
                    __weir_key,
                    __WEIR_CONFIG_KEYS,
                )),
            }
        }
    }
}

/// A field's entry in `state_fields()`: its name, type and scope; `None` if it is not state.
fn state_field(f: &Field) -> Option<TokenStream> {
    let (name, type_name) = (f.name(), type_name(f.ty));
    let scope = if f.is_keyed_state() {
        quote!(::weir::hooks::StateScope::Keyed)
    } else if f.is_subtask_state() {
        let rule = match &f.attrs.operator_state {
            Some((_, Some(r))) if r == "union" => quote!(Union),
            _ => quote!(Split),
        };
        let marked = f.attrs.operator_state.is_some();
        quote!(::weir::hooks::StateScope::Subtask {
            redistribution: ::weir::hooks::Redistribution::#rule,
            marked: #marked,
        })
    } else {
        return None;
    };
    Some(quote!(::weir::hooks::StateField { name: #name, type_name: #type_name, scope: #scope }))
}

/// The statements that check each state, keyed-state and config field's type where it is
/// written (in a function never called).
fn field_checks(state: &[&Field], keyed: &[&Field], config: &[&Field]) -> TokenStream {
    let state_checks = state.iter().map(|f| {
        let ty = f.ty;
        quote_spanned!(f.ty_span()=> ::weir::hooks::__private::assert_state_field::<#ty>();)
    });
    let keyed_checks = keyed.iter().map(|f| {
        let ty = f.ty;
        quote_spanned!(f.ty_span()=> ::weir::hooks::__private::assert_keyed_field::<#ty>();)
    });
    let config_checks = config.iter().map(|f| {
        let ty = f.ty;
        quote_spanned!(f.ty_span()=> ::weir::hooks::__private::assert_config_field::<#ty>();)
    });
    quote! {
        #(#state_checks)*
        #(#keyed_checks)*
        #(#config_checks)*
    }
}

fn expand_operator(input: &Input) -> TokenStream {
    let fields: &[Field] = match &input.data {
        Data::Struct(_, fields) => fields,
        // `validate_operator` accepts named structs only.
        Data::Enum(_) | Data::Union(_) => &[],
    };
    let ident = input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let name = match &input.attrs.name {
        Some(lit) => lit.clone(),
        None => LitStr::new(&ident.unraw().to_string(), ident.span()),
    };
    let version = Literal::u32_unsuffixed(input.attrs.version.as_ref().map_or(1, |v| v.0));
    // Snapshotted with the operator: per-subtask state. Keyed state is stored per key by the
    // runtime (`KeyedFields`).
    let state: Vec<&Field> = fields.iter().filter(|f| f.is_subtask_state()).collect();
    let keyed: Vec<&Field> = fields.iter().filter(|f| f.is_keyed_state()).collect();
    let config: Vec<&Field> = fields.iter().filter(|f| f.attrs.config.is_some()).collect();

    // The bodies use the name and version as literals rather than `<Self as Operator>::..`,
    // so that a struct that is not `Send` gets one error (at the struct), not one per use.
    let operator = quote!(#name);
    let state_version = quote!(#version);

    let config_keys = config.iter().map(|f| {
        let key = f.name();
        let type_name = type_name(f.ty);
        quote!(::weir::hooks::ConfigKey { name: #key, type_name: #type_name })
    });

    let snapshot_body = snapshot_body(&state, &operator, &state_version);

    let restore_body = restore_body(&state, &operator, &state_version);

    let on_config_body = on_config_body(&config, &operator);

    let field_checks = field_checks(&state, &keyed, &config);
    let state_fields = fields.iter().filter_map(state_field);
    let keyed_impl = expand_keyed_fields(input, &keyed);

    quote! {
        const _: () = {
            // Never called: it makes the compiler check each field's type where it is written.
            #[allow(dead_code)]
            fn __weir_assert_fields #impl_generics () #where_clause {
                #field_checks
            }

            const __WEIR_CONFIG_KEYS: &[::weir::hooks::ConfigKey] = &[#(#config_keys),*];
            const __WEIR_STATE_FIELDS: &[::weir::hooks::StateField] = &[#(#state_fields),*];

            #keyed_impl

            #[automatically_derived]
            impl #impl_generics ::weir::hooks::Operator for #ident #ty_generics #where_clause {
                const NAME: &'static str = #name;
                const STATE_VERSION: u32 = #version;

                fn config_keys() -> &'static [::weir::hooks::ConfigKey] {
                    __WEIR_CONFIG_KEYS
                }

                fn state_fields() -> &'static [::weir::hooks::StateField] {
                    __WEIR_STATE_FIELDS
                }

                fn snapshot_state(
                    &self,
                ) -> ::core::result::Result<::weir::hooks::StateSnapshot, ::weir::hooks::StateError>
                {
                    #snapshot_body
                }

                fn restore_state(
                    &mut self,
                    __weir_snapshot: &::weir::hooks::StateSnapshot,
                ) -> ::core::result::Result<(), ::weir::hooks::StateError> {
                    #restore_body
                }

                fn on_config(
                    &mut self,
                    __weir_key: &str,
                    __weir_value: &str,
                ) -> ::core::result::Result<(), ::weir::hooks::ConfigError> {
                    #on_config_body
                }
            }
        };
    }
}

/// The `KeyedFields` impl: one key's values are a tuple of `Slot`s, one per keyed field, moved
/// in and out of the fields around each record.
fn expand_keyed_fields(input: &Input, keyed: &[&Field]) -> TokenStream {
    let ident = input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let slots = keyed.iter().map(|f| {
        let ty = f.ty;
        quote_spanned!(f.ty_span()=> ::weir::hooks::__private::Slot<#ty>)
    });
    let ttls = keyed.iter().map(|f| match &f.attrs.ttl {
        Some((_, expr)) => quote_spanned!(expr.span()=> ::weir::hooks::__private::ttl(#expr)),
        None => quote!(::core::option::Option::None),
    });
    let index = |i: usize| syn::Index::from(i);
    let loads = keyed.iter().enumerate().map(|(i, f)| {
        let (member, ix) = (&f.member, index(i));
        quote!(__weir_entry.#ix.load(&mut self.#member, __weir_ttls[#i].as_ref(), __weir_now);)
    });
    let stores = keyed.iter().enumerate().map(|(i, f)| {
        let (member, ix) = (&f.member, index(i));
        quote!(__weir_empty &= __weir_entry.#ix.store(&mut self.#member, __weir_ttls[#i].as_ref(), __weir_now);)
    });
    let prunes = keyed.iter().enumerate().map(|(i, _)| {
        let ix = index(i);
        quote!(__weir_empty &= __weir_entry.#ix.prune(__weir_ttls[#i].as_ref(), __weir_now);)
    });
    quote! {
        #[automatically_derived]
        impl #impl_generics ::weir::hooks::KeyedFields for #ident #ty_generics #where_clause {
            type Keyed = (#(#slots,)*);

            fn keyed_ttls() -> ::std::vec::Vec<::core::option::Option<::weir::StateTtl>> {
                ::std::vec![#(#ttls),*]
            }

            #[inline]
            #[allow(unused_variables)]
            fn load_keyed(
                &mut self,
                __weir_entry: &mut Self::Keyed,
                __weir_ttls: &[::core::option::Option<::weir::StateTtl>],
                __weir_now: u64,
            ) {
                #(#loads)*
            }

            #[inline]
            #[allow(unused_variables, unused_mut)]
            fn store_keyed(
                &mut self,
                __weir_entry: &mut Self::Keyed,
                __weir_ttls: &[::core::option::Option<::weir::StateTtl>],
                __weir_now: u64,
            ) -> bool {
                let mut __weir_empty = true;
                #(#stores)*
                __weir_empty
            }

            #[allow(unused_variables, unused_mut)]
            fn prune_keyed(
                __weir_entry: &mut Self::Keyed,
                __weir_ttls: &[::core::option::Option<::weir::StateTtl>],
                __weir_now: u64,
            ) -> bool {
                let mut __weir_empty = true;
                #(#prunes)*
                __weir_empty
            }
        }
    }
}

fn expand_record(input: &Input) -> TokenStream {
    let ident = input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let fields: &[Field] = match &input.data {
        Data::Struct(_, fields) => fields,
        // `validate_record` accepts no weir field attribute outside structs.
        Data::Enum(_) | Data::Union(_) => &[],
    };

    let key_impl = fields.iter().find(|f| f.attrs.key.is_some()).map(|f| {
        let (member, ty) = (&f.member, f.ty);
        let key_type = quote_spanned!(f.ty_span()=> type Key = #ty;);
        quote! {
            #[automatically_derived]
            impl #impl_generics ::weir::RecordKey for #ident #ty_generics #where_clause {
                #key_type

                #[inline]
                fn record_key(&self) -> #ty {
                    ::core::clone::Clone::clone(&self.#member)
                }
            }
        }
    });

    let event_time_impl = fields
        .iter()
        .find(|f| f.attrs.event_time.is_some())
        .map(|f| {
            let (member, ty) = (&f.member, f.ty);
            let into = quote_spanned!(f.ty_span()=> <#ty as ::core::convert::Into<u64>>::into);
            quote! {
                #[automatically_derived]
                impl #impl_generics ::weir::EventTime for #ident #ty_generics #where_clause {
                    #[inline]
                    fn event_time(&self) -> u64 {
                        #into(::core::clone::Clone::clone(&self.#member))
                    }
                }
            }
        });

    quote! {
        const _: () = {
            // Never called: it makes the compiler check `weir::Data`'s bounds at the type.
            #[allow(dead_code)]
            fn __weir_assert_data #impl_generics () #where_clause {
                fn check<T: ::weir::Data>() {}
                check::<#ident #ty_generics>();
            }

            #key_impl
            #event_time_impl
        };
    }
}

/// A type as written, for messages: `quote!(#ty)` without the spaces the token printer puts
/// between punctuation (`Vec < String >` is `Vec<String>`, `HashMap<u64, u64>` keeps the
/// space after its comma).
fn type_name(ty: &Type) -> String {
    let raw = quote!(#ty).to_string();
    let chars: Vec<char> = raw.chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    let mut out = String::with_capacity(raw.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars.get(i + 1).copied();
            let keep = match (prev, next) {
                (Some(p), Some(n)) => (word(p) && word(n)) || p == ',' || p == ';',
                _ => false,
            };
            if !keep {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    /// The expansion as the token printer writes it.
    fn operator(input: DeriveInput) -> String {
        derive_operator_impl(input)
            .unwrap_or_else(|e| panic!("derive failed: {e}"))
            .to_string()
    }

    /// The messages of the errors of a failed derive, in order.
    fn operator_errors(input: DeriveInput) -> Vec<String> {
        match derive_operator_impl(input) {
            Ok(ts) => panic!("expected errors, got {ts}"),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn record_errors(input: DeriveInput) -> Vec<String> {
        match derive_record_impl(input) {
            Ok(ts) => panic!("expected errors, got {ts}"),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn threshold() -> DeriveInput {
        parse_quote! {
            #[weir(name = "threshold", version = 3)]
            struct Threshold {
                #[weir(config)]
                min: u64,
                #[weir(config)]
                label: String,
                #[weir(state)]
                passed: u64,
                #[weir(state, config)]
                limit: u32,
                #[weir(state)]
                per_key: std::collections::HashMap<u64, u64>,
                scratch: Vec<u8>,
            }
        }
    }

    #[test]
    fn operator_consts_and_config_keys() {
        let out = operator(threshold());
        assert!(
            out.contains(r#"const NAME : & 'static str = "threshold""#),
            "{out}"
        );
        assert!(out.contains("const STATE_VERSION : u32 = 3"), "{out}");
        assert!(
            out.contains(
                r#"& [:: weir :: hooks :: ConfigKey { name : "min" , type_name : "u64" } , :: weir :: hooks :: ConfigKey { name : "label" , type_name : "String" } , :: weir :: hooks :: ConfigKey { name : "limit" , type_name : "u32" }]"#
            ),
            "{out}"
        );
        assert!(out
            .contains("# [automatically_derived] impl :: weir :: hooks :: Operator for Threshold"));
        assert!(
            out.starts_with("const _ : () = { # [allow (dead_code)] fn __weir_assert_fields () {"),
            "{out}"
        );
        // A field with neither attribute is left alone.
        assert!(!out.contains("scratch"), "{out}");
    }

    #[test]
    fn operator_defaults_name_and_version() {
        let out = operator(parse_quote! {
            struct r#Plain {
                #[weir(state)]
                r#type: u64,
            }
        });
        assert!(
            out.contains(r#"const NAME : & 'static str = "Plain""#),
            "{out}"
        );
        assert!(out.contains("const STATE_VERSION : u32 = 1"), "{out}");
        // A raw field name is stored and configured under its plain name.
        assert!(out.contains(r#"put_field :: < u64 > (& mut __weir_fields , __weir_operator , "type" , & self . r#type)"#), "{out}");
        assert!(
            out.contains("const __WEIR_CONFIG_KEYS : & [:: weir :: hooks :: ConfigKey] = & [] ;"),
            "{out}"
        );
    }

    #[test]
    fn operator_snapshot_restore_and_config_code() {
        let out = operator(threshold());
        for field in ["passed", "limit", "per_key"] {
            assert!(
                out.contains(&format!("__weir_operator , \"{field}\" , & self . {field}")),
                "{out}"
            );
        }
        assert!(
            !out.contains(r#""min" , & self . min"#),
            "config only: not in state: {out}"
        );
        // Restore: every field is taken into a temporary, then all are assigned.
        let takes = out
            .find("take_field :: < std :: collections :: HashMap < u64 , u64 > >")
            .unwrap();
        let assign = out.find("self . passed = __weir_state_0 ;").unwrap();
        assert!(takes < assign, "{out}");
        assert!(out.contains("self . passed = __weir_state_0 ; self . limit = __weir_state_1 ; self . per_key = __weir_state_2 ;"), "{out}");
        // Config: parsed into a temporary, then assigned; unknown keys are refused.
        assert!(out.contains(r#""min" => { :: weir :: hooks :: __private :: assert_config_field :: < u64 > () ; let __weir_parsed : u64 = :: weir :: hooks :: __private :: parse_config :: < u64 > (__weir_operator , "min" , "u64" , __weir_value) ? ; self . min = __weir_parsed ;"#), "{out}");
        assert!(out.contains("_ => :: core :: result :: Result :: Err (:: weir :: hooks :: __private :: unknown_key ("), "{out}");
        // Compile-time checks, in a function that is never called.
        assert!(out.contains("fn __weir_assert_fields () { :: weir :: hooks :: __private :: assert_state_field :: < u64 > () ;"), "{out}");
        assert!(
            out.contains(":: weir :: hooks :: __private :: assert_config_field :: < String > () ;"),
            "{out}"
        );
    }

    #[test]
    fn operator_keeps_generics_without_adding_bounds() {
        let out = operator(parse_quote! {
            struct Windowed<T: Clone, const N: usize> where T: Send {
                #[weir(state)]
                items: Vec<T>,
            }
        });
        assert!(
            out.contains("impl < T : Clone , const N : usize > :: weir :: hooks :: Operator for Windowed < T , N > where T : Send"),
            "{out}"
        );
        assert!(
            out.contains(
                "fn __weir_assert_fields < T : Clone , const N : usize > () where T : Send"
            ),
            "{out}"
        );
    }

    #[test]
    fn type_names_read_as_written() {
        let ty = |t: Type| type_name(&t);
        assert_eq!(ty(parse_quote!(u64)), "u64");
        assert_eq!(ty(parse_quote!(String)), "String");
        assert_eq!(
            ty(parse_quote!(Option<std::net::IpAddr>)),
            "Option<std::net::IpAddr>"
        );
        assert_eq!(
            ty(parse_quote!(HashMap<u64, Vec<u8>>)),
            "HashMap<u64, Vec<u8>>"
        );
        assert_eq!(ty(parse_quote!(&'static str)), "&'static str");
        assert_eq!(ty(parse_quote!([u8; 4])), "[u8; 4]");
    }

    #[test]
    fn unsupported_shapes() {
        let shape = valid_shape();
        assert_eq!(
            operator_errors(parse_quote!(
                enum E {
                    A,
                    B,
                }
            )),
            [shape]
        );
        assert_eq!(
            operator_errors(parse_quote!(
                struct T(u64);
            )),
            [shape]
        );
        assert_eq!(
            operator_errors(parse_quote!(
                struct U;
            )),
            [shape]
        );
        assert_eq!(operator_errors(parse_quote!(union X { a: u64 })), [shape]);
    }

    fn valid_shape() -> &'static str {
        crate::valid::OPERATOR_SHAPE
    }

    #[test]
    fn keyed_fields_are_slots_and_left_out_of_the_snapshot() {
        let out = operator(parse_quote! {
            struct Detector {
                #[weir(config)]
                small: u64,
                #[weir(state, ttl = std::time::Duration::from_secs(60))]
                flag: weir::ValueState<u64>,
                #[weir(state)]
                seen: MapState<u64, u64>,
                #[weir(operator_state(union))]
                rules: Vec<String>,
                #[weir(state)]
                total: u64,
            }
        });
        assert!(out.contains("type Keyed = (:: weir :: hooks :: __private :: Slot < weir :: ValueState < u64 > > , :: weir :: hooks :: __private :: Slot < MapState < u64 , u64 > > ,)"), "{out}");
        assert!(out.contains(":: weir :: hooks :: __private :: ttl (std :: time :: Duration :: from_secs (60)) , :: core :: option :: Option :: None"), "{out}");
        assert!(
            out.contains("__weir_entry . 0 . load (& mut self . flag"),
            "{out}"
        );
        assert!(
            out.contains("__weir_entry . 1 . store (& mut self . seen"),
            "{out}"
        );
        // Only per-subtask fields are in the operator's own snapshot.
        assert!(!out.contains(r#"__weir_operator , "flag""#), "{out}");
        assert!(out.contains(r#"__weir_operator , "rules""#), "{out}");
        assert!(out.contains(r#"__weir_operator , "total""#), "{out}");
        assert!(out.contains(r#"name : "rules" , type_name : "Vec<String>" , scope : :: weir :: hooks :: StateScope :: Subtask { redistribution : :: weir :: hooks :: Redistribution :: Union , marked : true , }"#), "{out}");
        assert!(out.contains(r#"name : "total" , type_name : "u64" , scope : :: weir :: hooks :: StateScope :: Subtask { redistribution : :: weir :: hooks :: Redistribution :: Split , marked : false , }"#), "{out}");
        assert!(out.contains(r#"name : "flag" , type_name : "weir::ValueState<u64>" , scope : :: weir :: hooks :: StateScope :: Keyed"#), "{out}");
    }

    #[test]
    fn state_field_rules() {
        assert_eq!(
            operator_errors(parse_quote! {
                struct S {
                    #[weir(state, operator_state)]
                    a: Vec<u64>,
                    #[weir(ttl = 5)]
                    b: ValueState<u64>,
                    #[weir(state, ttl = d())]
                    c: u64,
                    #[weir(state, config)]
                    d: ValueState<u64>,
                    #[weir(operator_state(merge))]
                    e: Vec<u64>,
                }
            }),
            [
                // Attribute syntax first, then the rules.
                "unknown redistribution `merge`; expected `split` or `union`",
                "a state field is kept either per key (`state`) or per subtask (`operator_state`), not both",
                "`ttl` applies to a keyed `#[weir(state)]` field",
                "`ttl` needs a keyed state type (ValueState, MapState, ListState, ReducingState); `c` is kept per subtask",
                "a keyed state field cannot also be a config field (its value is per key)",
            ]
        );
    }

    #[test]
    fn unknown_field_attribute() {
        assert_eq!(
            operator_errors(parse_quote! {
                struct S { #[weir(stat)] a: u64 }
            }),
            ["unknown weir attribute `stat`; expected `state`, `operator_state`, `ttl` or `config`"]
        );
    }

    #[test]
    fn all_errors_are_reported_together() {
        let errors = operator_errors(parse_quote! {
            #[weir(name = 7, version = "one", flavour = "x")]
            struct S {
                #[weir(state, state)]
                a: u64,
                #[weir(cfg, config = "x")]
                b: u64,
                #[weir]
                c: u64,
                #[weir(key)]
                d: u64,
            }
        });
        assert_eq!(
            errors,
            [
                "expected a string literal: `name = \"..\"`",
                "expected an integer literal: `version = 1`",
                "unknown weir attribute `flavour`; expected `name = \"..\"` or `version = N`",
                "duplicate weir attribute `state`",
                "unknown weir attribute `cfg`; expected `state`, `operator_state`, `ttl` or `config`",
                "weir attribute `config` takes no value; write `#[weir(config)]`",
                "expected `#[weir(...)]`",
                "unknown weir attribute `key`; expected `state`, `operator_state`, `ttl` or `config`",
            ]
        );
    }

    #[test]
    fn duplicate_and_bad_struct_attributes() {
        let errors = operator_errors(parse_quote! {
            #[weir(name = "a")]
            #[weir(name = "b", version = 1, version = 2)]
            struct S { a: u64 }
        });
        assert_eq!(
            errors,
            [
                "duplicate weir attribute `name`",
                "duplicate weir attribute `version`"
            ]
        );
        assert_eq!(
            operator_errors(parse_quote! {
                #[weir(name = "", version = 4294967296)]
                struct S { a: u64 }
            }),
            [
                "`version` must be an integer in 0..=4294967295",
                "the operator name must not be empty"
            ]
        );
    }

    #[test]
    fn shape_and_attribute_errors_together() {
        let errors = operator_errors(parse_quote! {
            #[weir(nme = "x")]
            enum E { A }
        });
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn record_key_and_event_time_impls() {
        let out = derive_record_impl(parse_quote! {
            struct Click {
                #[weir(key)]
                user: String,
                #[weir(event_time)]
                at: u64,
                page: String,
            }
        })
        .unwrap()
        .to_string();
        assert!(out.contains("check :: < Click > ()"), "{out}");
        assert!(
            out.contains("impl :: weir :: RecordKey for Click { type Key = String ;"),
            "{out}"
        );
        assert!(
            out.contains(":: core :: clone :: Clone :: clone (& self . user)"),
            "{out}"
        );
        assert!(out.contains("impl :: weir :: EventTime for Click"), "{out}");
        assert!(out.contains("< u64 as :: core :: convert :: Into < u64 >> :: into (:: core :: clone :: Clone :: clone (& self . at))"), "{out}");
    }

    #[test]
    fn record_without_attributes_only_asserts_data() {
        let out = derive_record_impl(parse_quote! {
            enum Event { A(u64), B { x: String } }
        })
        .unwrap()
        .to_string();
        assert!(out.contains("check :: < Event > ()"), "{out}");
        assert!(
            !out.contains("RecordKey") && !out.contains("EventTime"),
            "{out}"
        );
    }

    #[test]
    fn record_tuple_struct_key() {
        let out = derive_record_impl(parse_quote! {
            struct Pair(#[weir(key)] u32, String);
        })
        .unwrap()
        .to_string();
        assert!(out.contains("Clone :: clone (& self . 0)"), "{out}");
    }

    #[test]
    fn record_errors_are_reported_together() {
        let errors = record_errors(parse_quote! {
            #[weir(name = "x")]
            struct R {
                #[weir(key)]
                a: u64,
                #[weir(key, event_time)]
                b: u64,
                #[weir(key, state)]
                c: u64,
                #[weir(event_time)]
                d: u64,
            }
        });
        assert_eq!(
            errors,
            [
                "unknown weir attribute `name`; `#[derive(Record)]` takes no struct-level weir attributes (put `key` or `event_time` on a field)",
                "unknown weir attribute `state`; expected `key` or `event_time`",
                "a record has at most one `#[weir(key)]` field; `a` is the key already",
                "a record has at most one `#[weir(key)]` field; `a` is the key already",
                "a record has at most one `#[weir(event_time)]` field; `b` is the event time already",
            ]
        );
        assert_eq!(
            record_errors(parse_quote! {
                enum E { A { #[weir(key)] k: u64 } }
            }),
            ["`#[weir(key)]` and `#[weir(event_time)]` are supported on struct fields only"]
        );
    }
}
