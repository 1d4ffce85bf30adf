//! The rules of each derive (thiserror's `valid.rs`). Every rule reports a
//! `syn::Error::new_spanned` at the user's tokens into the [`Ctxt`]; all are checked, so the
//! user gets every error at once.

use crate::ast::{Data, Field, Input, Style, KEYED_STATE_TYPES};
use crate::ctxt::Ctxt;

/// The message for an item `#[derive(Operator)]` cannot implement.
pub(crate) const OPERATOR_SHAPE: &str = "`#[derive(Operator)]` supports structs with named fields";

impl Input<'_> {
    /// The rules of `#[derive(Operator)]`.
    pub(crate) fn validate_operator(&self, cx: &Ctxt) {
        match &self.data {
            Data::Struct(Style::Named, _) => {}
            Data::Struct(Style::Tuple(fields), _) => cx.error_spanned_by(fields, OPERATOR_SHAPE),
            Data::Struct(Style::Unit, _) | Data::Enum(_) | Data::Union(_) => {
                cx.error_spanned_by(self.ident, OPERATOR_SHAPE)
            }
        }
        if let Some(name) = &self.attrs.name {
            if name.value().trim().is_empty() {
                cx.error_spanned_by(name, "the operator name must not be empty");
            }
        }
        if let Data::Struct(_, fields) = &self.data {
            validate_state_fields(cx, fields);
        }
    }

    /// The rules of `#[derive(Record)]`.
    pub(crate) fn validate_record(&self, cx: &Ctxt) {
        match &self.data {
            Data::Struct(_, fields) => {
                let mut key: Option<String> = None;
                let mut event_time: Option<String> = None;
                for f in fields {
                    if let Some(path) = &f.attrs.key {
                        match &key {
                            None => key = Some(f.name()),
                            Some(first) => cx.error_spanned_by(
                                path,
                                format!(
                                    "a record has at most one `#[weir(key)]` field; `{first}` is the key already"
                                ),
                            ),
                        }
                    }
                    if let Some(path) = &f.attrs.event_time {
                        match &event_time {
                            None => event_time = Some(f.name()),
                            Some(first) => cx.error_spanned_by(
                                path,
                                format!(
                                    "a record has at most one `#[weir(event_time)]` field; `{first}` is the event time already"
                                ),
                            ),
                        }
                    }
                }
            }
            Data::Enum(fields) | Data::Union(fields) => {
                for f in fields {
                    if let Some(path) = f.attrs.any() {
                        cx.error_spanned_by(
                            path,
                            "`#[weir(key)]` and `#[weir(event_time)]` are supported on struct fields only",
                        );
                    }
                }
            }
        }
    }
}

/// The most keyed fields one operator can have (one key's values are a tuple of them).
const MAX_KEYED_FIELDS: usize = 16;

/// The rules of state fields: per key or per subtask, not both; `ttl` only on keyed state;
/// a keyed field is not also a config field.
fn validate_state_fields(cx: &Ctxt, fields: &[Field]) {
    let keyed_types = KEYED_STATE_TYPES.join(", ");
    let mut keyed = 0;
    for f in fields {
        let a = &f.attrs;
        if let (Some(_), Some((path, _))) = (&a.state, &a.operator_state) {
            cx.error_spanned_by(
                path,
                "a state field is kept either per key (`state`) or per subtask (`operator_state`), not both",
            );
        }
        if let Some((path, _)) = &a.ttl {
            if a.state.is_none() {
                cx.error_spanned_by(path, "`ttl` applies to a keyed `#[weir(state)]` field");
            } else if !f.is_keyed_type() {
                cx.error_spanned_by(
                    path,
                    format!(
                        "`ttl` needs a keyed state type ({keyed_types}); `{}` is kept per subtask",
                        f.name()
                    ),
                );
            }
        }
        if f.is_keyed_state() {
            keyed += 1;
            if let Some(path) = &a.config {
                cx.error_spanned_by(
                    path,
                    "a keyed state field cannot also be a config field (its value is per key)",
                );
            }
            if keyed == MAX_KEYED_FIELDS + 1 {
                cx.error_spanned_by(
                    &f.member,
                    format!("an operator has at most {MAX_KEYED_FIELDS} keyed state fields; group some in a struct inside one `ValueState`"),
                );
            }
        }
    }
}
