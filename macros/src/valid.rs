//! The rules of each derive (thiserror's `valid.rs`). Every rule reports a
//! `syn::Error::new_spanned` at the user's tokens into the [`Ctxt`]; all are checked, so the
//! user gets every error at once.

use crate::ast::{Data, Input, Style};
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
