//! Parsing of `#[weir(...)]` attributes.
//!
//! Each derive has its own vocabulary: `#[derive(Operator)]` takes `name = ".."` and
//! `version = N` on the struct and `state` (with `ttl = ..`) / `operator_state` / `config` on
//! fields; `#[derive(Record)]` takes
//! `key` / `event_time` on fields and nothing on the struct. A key outside the derive's
//! vocabulary, a repeated key or a malformed value is reported at its own tokens into the
//! [`Ctxt`], and parsing goes on with the next key.

use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, Ident, Lit, LitInt, LitStr, Path, Token};

use crate::ctxt::Ctxt;

/// Which derive is reading the attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Derive {
    Operator,
    Record,
}

impl Derive {
    /// The derive as the user writes it, for messages.
    pub(crate) fn display(self) -> &'static str {
        match self {
            Derive::Operator => "#[derive(Operator)]",
            Derive::Record => "#[derive(Record)]",
        }
    }
}

/// The struct-level attributes (`#[weir(name = "..", version = N)]`).
#[derive(Default)]
pub(crate) struct Container {
    /// `name = ".."`: the operator's stable type name.
    pub(crate) name: Option<LitStr>,
    /// `version = N`: the state format version, and the literal it was read from.
    pub(crate) version: Option<(u32, LitInt)>,
}

/// The field-level attributes; each is the key's path as written (for spans).
#[derive(Default)]
pub(crate) struct FieldAttrs {
    /// `#[weir(state)]` (Operator).
    pub(crate) state: Option<Path>,
    /// `#[weir(config)]` (Operator).
    pub(crate) config: Option<Path>,
    /// `#[weir(key)]` (Record).
    pub(crate) key: Option<Path>,
    /// `#[weir(event_time)]` (Record).
    pub(crate) event_time: Option<Path>,
    /// `#[weir(operator_state)]` or `#[weir(operator_state(split | union))]` (Operator): the
    /// path, and the rule if one was given.
    pub(crate) operator_state: Option<(Path, Option<Ident>)>,
    /// `#[weir(ttl = expr)]` (Operator, with `state`): the path and the expression.
    pub(crate) ttl: Option<(Path, Expr)>,
}

impl FieldAttrs {
    /// The first weir key given on the field, if any (for "not allowed here" errors).
    pub(crate) fn any(&self) -> Option<&Path> {
        self.state
            .as_ref()
            .or(self.config.as_ref())
            .or(self.key.as_ref())
            .or(self.event_time.as_ref())
            .or(self.operator_state.as_ref().map(|(p, _)| p))
            .or(self.ttl.as_ref().map(|(p, _)| p))
    }
}

/// Reads the struct-level `#[weir(...)]` attributes.
pub(crate) fn container(cx: &Ctxt, attrs: &[Attribute], derive: Derive) -> Container {
    let mut out = Container::default();
    for attr in weir_attrs(cx, attrs) {
        let parsed = attr.parse_nested_meta(|meta| {
            match (derive, key_name(&meta.path).as_str()) {
                (Derive::Operator, "name") => {
                    if let Some(lit) = string_value(cx, &meta)? {
                        if out.name.is_some() {
                            duplicate(cx, &meta.path);
                        } else {
                            out.name = Some(lit);
                        }
                    }
                }
                (Derive::Operator, "version") => {
                    if let Some(v) = u32_value(cx, &meta)? {
                        if out.version.is_some() {
                            duplicate(cx, &meta.path);
                        } else {
                            out.version = Some(v);
                        }
                    }
                }
                (Derive::Operator, other) => {
                    cx.error_spanned_by(
                        &meta.path,
                        format!(
                            "unknown weir attribute `{other}`; expected `name = \"..\"` or `version = N`"
                        ),
                    );
                    skip_value(&meta)?;
                }
                (Derive::Record, other) => {
                    cx.error_spanned_by(
                        &meta.path,
                        format!(
                            "unknown weir attribute `{other}`; `{}` takes no struct-level weir attributes (put `key` or `event_time` on a field)",
                            derive.display()
                        ),
                    );
                    skip_value(&meta)?;
                }
            }
            Ok(())
        });
        if let Err(e) = parsed {
            cx.syn_error(e);
        }
    }
    out
}

/// Reads a field's `#[weir(...)]` attributes.
pub(crate) fn field(cx: &Ctxt, attrs: &[Attribute], derive: Derive) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    for attr in weir_attrs(cx, attrs) {
        let parsed = attr.parse_nested_meta(|meta| {
            let name = key_name(&meta.path);
            match (derive, name.as_str()) {
                (Derive::Operator, "ttl") => return ttl_value(cx, &meta, &mut out.ttl),
                (Derive::Operator, "operator_state") => {
                    return operator_state_value(cx, &meta, &mut out.operator_state)
                }
                _ => {}
            }
            let slot = match (derive, name.as_str()) {
                (Derive::Operator, "state") => &mut out.state,
                (Derive::Operator, "config") => &mut out.config,
                (Derive::Record, "key") => &mut out.key,
                (Derive::Record, "event_time") => &mut out.event_time,
                (_, other) => {
                    let expected = match derive {
                        Derive::Operator => "`state`, `operator_state`, `ttl` or `config`",
                        Derive::Record => "`key` or `event_time`",
                    };
                    cx.error_spanned_by(
                        &meta.path,
                        format!("unknown weir attribute `{other}`; expected {expected}"),
                    );
                    return skip_value(&meta);
                }
            };
            if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
                cx.error_spanned_by(
                    &meta.path,
                    format!("weir attribute `{name}` takes no value; write `#[weir({name})]`"),
                );
                skip_value(&meta)?;
            }
            if slot.is_some() {
                duplicate(cx, &meta.path);
            } else {
                *slot = Some(meta.path.clone());
            }
            Ok(())
        });
        if let Err(e) = parsed {
            cx.syn_error(e);
        }
    }
    out
}

/// `ttl = expr`: a `Duration` or a `weir::StateTtl`, checked by the compiler where it is used.
fn ttl_value(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    slot: &mut Option<(Path, Expr)>,
) -> syn::Result<()> {
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            "weir attribute `ttl` needs a value: `ttl = std::time::Duration::from_secs(60)`",
        );
        return skip_value(meta);
    }
    let expr: Expr = meta.value()?.parse()?;
    if slot.is_some() {
        duplicate(cx, &meta.path);
    } else {
        *slot = Some((meta.path.clone(), expr));
    }
    Ok(())
}

/// `operator_state`, `operator_state(split)` or `operator_state(union)`.
fn operator_state_value(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    slot: &mut Option<(Path, Option<Ident>)>,
) -> syn::Result<()> {
    let mut rule = None;
    if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        let ident: Ident = content.parse()?;
        if ident != "split" && ident != "union" {
            cx.error_spanned_by(
                &ident,
                format!("unknown redistribution `{ident}`; expected `split` or `union`"),
            );
        } else {
            rule = Some(ident);
        }
        if !content.is_empty() {
            cx.error_spanned_by(
                &meta.path,
                "`operator_state` takes one rule: `operator_state(split)` or `operator_state(union)`",
            );
            content.parse::<proc_macro2::TokenStream>()?;
        }
    } else if meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            "write the rule in parentheses: `operator_state(split)` or `operator_state(union)`",
        );
        return skip_value(meta);
    }
    if slot.is_some() {
        duplicate(cx, &meta.path);
    } else {
        *slot = Some((meta.path.clone(), rule));
    }
    Ok(())
}

/// The `#[weir(...)]` attributes among `attrs`; a `#[weir]` or `#[weir = ..]` is an error.
fn weir_attrs<'a>(cx: &'a Ctxt, attrs: &'a [Attribute]) -> impl Iterator<Item = &'a Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("weir"))
        .filter(move |a| match &a.meta {
            syn::Meta::List(_) => true,
            _ => {
                cx.error_spanned_by(a, "expected `#[weir(...)]`");
                false
            }
        })
}

/// A key as text (a path such as `a::b` is shown as written, without spaces).
fn key_name(path: &Path) -> String {
    match path.get_ident() {
        Some(ident) => ident.to_string(),
        None => quote::quote!(#path).to_string().replace(' ', ""),
    }
}

fn duplicate(cx: &Ctxt, path: &Path) {
    cx.error_spanned_by(
        path,
        format!("duplicate weir attribute `{}`", key_name(path)),
    );
}

/// Consumes the value of a key that was reported as an error, so parsing can go on with
/// the next key: `= expr` or a parenthesized group.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

/// The `= ".."` of a key; `None` (and an error) if the value is not a string literal.
fn string_value(cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<Option<LitStr>> {
    let name = key_name(&meta.path);
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            format!("weir attribute `{name}` needs a value: `{name} = \"..\"`"),
        );
        skip_value(meta)?;
        return Ok(None);
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(Some(s)),
        other => {
            cx.error_spanned_by(
                other,
                format!("expected a string literal: `{name} = \"..\"`"),
            );
            Ok(None)
        }
    }
}

/// The `= N` of a key; `None` (and an error) if the value is not a `u32` literal.
fn u32_value(cx: &Ctxt, meta: &ParseNestedMeta) -> syn::Result<Option<(u32, LitInt)>> {
    let name = key_name(&meta.path);
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            format!("weir attribute `{name}` needs a value: `{name} = 1`"),
        );
        skip_value(meta)?;
        return Ok(None);
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(i), ..
        }) => match i.base10_parse::<u32>() {
            Ok(v) => Ok(Some((v, i))),
            Err(_) => {
                cx.error_spanned_by(
                    &i,
                    format!("`{name}` must be an integer in 0..={}", u32::MAX),
                );
                Ok(None)
            }
        },
        other => {
            cx.error_spanned_by(other, format!("expected an integer literal: `{name} = 1`"));
            Ok(None)
        }
    }
}
