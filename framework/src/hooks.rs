//! The glue that `#[derive(Operator)]` generates: an operator's stable name, the snapshot and
//! restore of its `#[weir(state)]` fields, and live changes of its `#[weir(config)]` fields.
//!
//! An app writes the behaviour (a [`ProcessFunction`](crate::ProcessFunction) or a two-input
//! function) and derives [`Operator`] for the same struct; `stream.apply(op)` then runs it with
//! its hooks. State is serialized with serde into CBOR (ciborium), inside an envelope that
//! carries the operator's name and state format version, so a snapshot of another operator or
//! of an unknown version is refused with a clear error instead of being misread.
//!
//! This module owns the trait, the envelope and the errors. It does not decide when snapshots
//! are taken (checkpoints) or where they are stored.
//!
//! ```
//! use weir::{Collector, Operator, ProcessFunction};
//!
//! #[derive(Clone, Default, Operator)]
//! #[weir(name = "threshold", version = 1)]
//! struct Threshold {
//!     #[weir(config)]
//!     min: u64,
//!     #[weir(state)]
//!     passed: u64,
//! }
//!
//! impl ProcessFunction<u64, u64> for Threshold {
//!     fn process(&mut self, x: u64, out: &mut Collector<u64>) {
//!         if x >= self.min {
//!             self.passed += 1;
//!             out.collect(x);
//!         }
//!     }
//! }
//!
//! let mut op = Threshold::default();
//! op.on_config("min", "10").unwrap();
//! assert_eq!(op.min, 10);
//! assert!(op.on_config("min", "ten").is_err());
//! op.passed = 7;
//! let snap = op.snapshot_state().unwrap();
//! let mut fresh = Threshold::default();
//! fresh.restore_state(&snap).unwrap();
//! assert_eq!(fresh.passed, 7);
//! ```

use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// One configurable field of an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigKey {
    /// The key (the field's name).
    pub name: &'static str,
    /// The field's type, as written in the struct.
    pub type_name: &'static str,
}

/// The hooks of a user operator. Implemented by `#[derive(Operator)]`; rarely by hand.
pub trait Operator: Send + 'static {
    /// The operator's stable type name (`#[weir(name = "..")]`, default the struct's name).
    const NAME: &'static str;
    /// The format version of its state (`#[weir(version = N)]`, default 1).
    const STATE_VERSION: u32;

    /// Its configurable fields.
    fn config_keys() -> &'static [ConfigKey]
    where
        Self: Sized;

    /// The `#[weir(state)]` fields, serialized.
    fn snapshot_state(&self) -> Result<StateSnapshot, StateError>;

    /// Sets the `#[weir(state)]` fields from a snapshot of the same operator and version.
    fn restore_state(&mut self, snapshot: &StateSnapshot) -> Result<(), StateError>;

    /// Sets the `#[weir(config)]` field `key` from its text form.
    fn on_config(&mut self, key: &str, value: &str) -> Result<(), ConfigError>;
}

/// A serialized operator state: CBOR in an envelope naming operator and format version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSnapshot {
    /// The operator's type name ([`Operator::NAME`]).
    pub operator: String,
    /// The state format version ([`Operator::STATE_VERSION`]).
    pub version: u32,
    /// The state fields, as a CBOR map from field name to value.
    pub bytes: Vec<u8>,
}

/// A state that could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A field could not be serialized.
    #[error("operator `{operator}`: cannot serialize state field `{field}`: {message}")]
    Encode {
        /// Operator type name.
        operator: String,
        /// The field.
        field: String,
        /// Why.
        message: String,
    },
    /// The snapshot's bytes are not a valid state of this operator.
    #[error("operator `{operator}`: cannot read state: {message}")]
    Decode {
        /// Operator type name.
        operator: String,
        /// Why.
        message: String,
    },
    /// The snapshot is of another operator.
    #[error("state of operator `{found}` cannot be restored into operator `{expected}`")]
    WrongOperator {
        /// This operator.
        expected: String,
        /// The snapshot's operator.
        found: String,
    },
    /// The snapshot's format version is not this operator's.
    #[error("operator `{operator}`: state format version {found} cannot be restored by version {expected}; migrate it or start without state")]
    Version {
        /// Operator type name.
        operator: String,
        /// This operator's version.
        expected: u32,
        /// The snapshot's version.
        found: u32,
    },
    /// A state field is missing from the snapshot.
    #[error("operator `{operator}`: the snapshot has no state field `{field}`")]
    MissingField {
        /// Operator type name.
        operator: String,
        /// The field.
        field: String,
    },
    /// The operator (uid) has no state hooks (it was not added with `apply`).
    #[error(
        "operator `{uid}` keeps no snapshot state (add it with `apply` and derive `Operator`)"
    )]
    NotSupported {
        /// The operator's uid.
        uid: String,
    },
    /// No running operator has that uid.
    #[error("no running operator has uid `{uid}`")]
    NoSuchOperator {
        /// The uid asked for.
        uid: String,
    },
}

/// A live configuration change that was refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The operator has no configurable field of that name.
    #[error("operator `{operator}` has no config key `{key}`; known keys: {known:?}")]
    UnknownKey {
        /// Operator type name.
        operator: String,
        /// The key asked for.
        key: String,
        /// Its configurable fields.
        known: Vec<String>,
    },
    /// The value does not parse into the field's type.
    #[error("operator `{operator}`: config key `{key}` expects a value of type `{expected}`, got {value:?}: {message}")]
    BadValue {
        /// Operator type name.
        operator: String,
        /// The key.
        key: String,
        /// The text given.
        value: String,
        /// The field's type.
        expected: String,
        /// The parser's message.
        message: String,
    },
    /// The operator (uid) has no config hooks (it was not added with `apply`).
    #[error(
        "operator `{uid}` has no configurable fields (add it with `apply` and derive `Operator`)"
    )]
    NotSupported {
        /// The operator's uid.
        uid: String,
    },
    /// No running operator has that uid.
    #[error("no running operator has uid `{uid}`")]
    NoSuchOperator {
        /// The uid asked for.
        uid: String,
    },
}

/// Support for generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::*;
    use std::collections::BTreeMap;
    use std::str::FromStr;

    pub use ciborium::Value;

    /// The state fields being written: name -> CBOR value.
    pub type Fields = Vec<(Value, Value)>;

    /// Serializes one state field.
    pub fn put_field<T: Serialize>(
        fields: &mut Fields,
        operator: &str,
        field: &str,
        value: &T,
    ) -> Result<(), StateError> {
        let v = Value::serialized(value).map_err(|e| StateError::Encode {
            operator: operator.to_owned(),
            field: field.to_owned(),
            message: e.to_string(),
        })?;
        fields.push((Value::Text(field.to_owned()), v));
        Ok(())
    }

    /// Encodes the fields into a snapshot.
    pub fn encode(
        operator: &str,
        version: u32,
        fields: Fields,
    ) -> Result<StateSnapshot, StateError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(&Value::Map(fields), &mut bytes).map_err(|e| StateError::Encode {
            operator: operator.to_owned(),
            field: "<envelope>".to_owned(),
            message: e.to_string(),
        })?;
        Ok(StateSnapshot {
            operator: operator.to_owned(),
            version,
            bytes,
        })
    }

    /// Checks the envelope and decodes the fields of a snapshot.
    pub fn decode(
        operator: &str,
        version: u32,
        snapshot: &StateSnapshot,
    ) -> Result<BTreeMap<String, Value>, StateError> {
        if snapshot.operator != operator {
            return Err(StateError::WrongOperator {
                expected: operator.to_owned(),
                found: snapshot.operator.clone(),
            });
        }
        if snapshot.version != version {
            return Err(StateError::Version {
                operator: operator.to_owned(),
                expected: version,
                found: snapshot.version,
            });
        }
        let decode_err = |message: String| StateError::Decode {
            operator: operator.to_owned(),
            message,
        };
        let value: Value = ciborium::from_reader(snapshot.bytes.as_slice())
            .map_err(|e| decode_err(e.to_string()))?;
        let Value::Map(entries) = value else {
            return Err(decode_err("the state is not a map of fields".into()));
        };
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Value::Text(name) = k else {
                return Err(decode_err("a state field name is not text".into()));
            };
            out.insert(name, v);
        }
        Ok(out)
    }

    /// Takes one field out of decoded fields.
    pub fn take_field<T: DeserializeOwned>(
        fields: &mut BTreeMap<String, Value>,
        operator: &str,
        field: &str,
    ) -> Result<T, StateError> {
        let v = fields
            .remove(field)
            .ok_or_else(|| StateError::MissingField {
                operator: operator.to_owned(),
                field: field.to_owned(),
            })?;
        v.deserialized().map_err(|e| StateError::Decode {
            operator: operator.to_owned(),
            message: format!("field `{field}`: {e}"),
        })
    }

    /// Parses a config value into the field's type.
    pub fn parse_config<T>(
        operator: &str,
        key: &str,
        type_name: &str,
        value: &str,
    ) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        value.parse::<T>().map_err(|e| ConfigError::BadValue {
            operator: operator.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            expected: type_name.to_owned(),
            message: e.to_string(),
        })
    }

    /// The error for a key the operator does not have.
    pub fn unknown_key(operator: &str, key: &str, known: &[ConfigKey]) -> ConfigError {
        ConfigError::UnknownKey {
            operator: operator.to_owned(),
            key: key.to_owned(),
            known: known.iter().map(|k| k.name.to_owned()).collect(),
        }
    }

    /// Compile-time check that a `#[weir(state)]` field can be snapshotted.
    pub fn assert_state_field<T: Serialize + DeserializeOwned>() {}

    /// Compile-time check that a `#[weir(config)]` field can be parsed from text.
    pub fn assert_config_field<T>()
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
    }
}
