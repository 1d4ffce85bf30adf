//! The typed model of a derive's input (thiserror's `ast.rs`): the item, its shape, its
//! fields and their parsed `#[weir(...)]` attributes. Built from syn without judging it;
//! the rules are in `valid.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{DeriveInput, Generics, Ident, Member, Type};

use crate::attr::{self, Derive};
use crate::ctxt::Ctxt;

/// The names of weir's keyed state types.
pub(crate) const KEYED_STATE_TYPES: &[&str] =
    &["ValueState", "MapState", "ListState", "ReducingState"];

/// A derive's input.
pub(crate) struct Input<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) generics: &'a Generics,
    pub(crate) attrs: attr::Container,
    pub(crate) data: Data<'a>,
}

/// The item's shape.
pub(crate) enum Data<'a> {
    /// A struct; its fields in order.
    Struct(Style<'a>, Vec<Field<'a>>),
    /// An enum; the fields of all its variants.
    Enum(Vec<Field<'a>>),
    /// A union; its fields.
    Union(Vec<Field<'a>>),
}

/// How a struct's fields are written.
pub(crate) enum Style<'a> {
    /// `struct S { a: A }`
    Named,
    /// `struct S(A);` with the parenthesized fields (for spans).
    Tuple(&'a syn::FieldsUnnamed),
    /// `struct S;`
    Unit,
}

/// One field.
pub(crate) struct Field<'a> {
    /// How the field is accessed: `self.#member`.
    pub(crate) member: Member,
    /// The field's type, as written.
    pub(crate) ty: &'a Type,
    /// Its `#[weir(...)]` attributes.
    pub(crate) attrs: attr::FieldAttrs,
}

impl Field<'_> {
    /// The field's name as a string (`r#type` is `type`); a tuple field's index.
    pub(crate) fn name(&self) -> String {
        match &self.member {
            Member::Named(ident) => ident.unraw().to_string(),
            Member::Unnamed(index) => index.index.to_string(),
        }
    }

    /// Whether the field's type is one of weir's keyed state types (by its last path segment:
    /// `ValueState`, `MapState`, `ListState`, `ReducingState`). The generated code also checks
    /// that the type implements `weir::state::KeyedStateType`, so a look-alike is an error.
    pub(crate) fn is_keyed_type(&self) -> bool {
        match self.ty {
            Type::Path(p) => p
                .path
                .segments
                .last()
                .is_some_and(|s| KEYED_STATE_TYPES.iter().any(|k| s.ident == k)),
            _ => false,
        }
    }

    /// A `#[weir(state)]` field kept per key.
    pub(crate) fn is_keyed_state(&self) -> bool {
        self.attrs.state.is_some() && self.is_keyed_type()
    }

    /// A field kept per subtask: `#[weir(operator_state)]`, or `#[weir(state)]` of a type that
    /// is not a keyed state type.
    pub(crate) fn is_subtask_state(&self) -> bool {
        self.attrs.operator_state.is_some() || (self.attrs.state.is_some() && !self.is_keyed_type())
    }

    /// The span of the field's type: compile-time checks on the type are reported there.
    pub(crate) fn ty_span(&self) -> Span {
        self.ty.span()
    }
}

impl<'a> Input<'a> {
    /// Models `input`, reporting malformed attributes into `cx`.
    pub(crate) fn from_syn(cx: &Ctxt, input: &'a DeriveInput, derive: Derive) -> Self {
        let attrs = attr::container(cx, &input.attrs, derive);
        let data = match &input.data {
            syn::Data::Struct(s) => {
                let fields = fields(cx, &s.fields, derive);
                let style = match &s.fields {
                    syn::Fields::Named(_) => Style::Named,
                    syn::Fields::Unnamed(u) => Style::Tuple(u),
                    syn::Fields::Unit => Style::Unit,
                };
                Data::Struct(style, fields)
            }
            syn::Data::Enum(e) => Data::Enum(
                e.variants
                    .iter()
                    .flat_map(|v| fields(cx, &v.fields, derive))
                    .collect(),
            ),
            syn::Data::Union(u) => Data::Union(
                u.fields
                    .named
                    .iter()
                    .enumerate()
                    .map(|(i, f)| field(cx, i, f, derive))
                    .collect(),
            ),
        };
        Input {
            ident: &input.ident,
            generics: &input.generics,
            attrs,
            data,
        }
    }
}

fn fields<'a>(cx: &Ctxt, fields: &'a syn::Fields, derive: Derive) -> Vec<Field<'a>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| field(cx, i, f, derive))
        .collect()
}

fn field<'a>(cx: &Ctxt, index: usize, f: &'a syn::Field, derive: Derive) -> Field<'a> {
    let member = match &f.ident {
        Some(ident) => Member::Named(ident.clone()),
        None => Member::Unnamed(syn::Index {
            index: index as u32,
            span: f.ty.span(),
        }),
    };
    Field {
        member,
        ty: &f.ty,
        attrs: attr::field(cx, &f.attrs, derive),
    }
}
