//! Bringing a group of states into the cache before they are encoded one after another.
//!
//! Encoding a key's state reads what it holds on the heap (a `String`'s bytes, a `Vec`'s
//! items): in a large state each is a cache miss, and an encoder waits for each in turn (at a
//! million keys, a fifth of a backed-up operator's time went into the copy of strings it
//! waited for). [`touch`] reads a state as serde walks it, every number and the first byte of
//! every string, and nothing else: a few hundred states touched one after another have their
//! misses under way together, and the encoding that follows finds them in the cache (what the
//! lookups of a checkpoint's copy already do for the map's buckets, `LOOKAHEAD`).
//!
//! A state walks [`LIMIT`] numbers and strings at most: a large one (a long list) would not
//! stay in the cache until it is encoded anyway, and walking all of it would read it twice.
//!
//! This module owns the walk, not when it is worth it (the copies and hand-offs that call it).

use std::cell::Cell;

use serde::ser::{self, Serialize};

/// Numbers and strings read of one state at most.
pub(crate) const LIMIT: usize = 64;

/// Reads `value` as serde walks it, so that its heap parts are in the cache (see the module);
/// the numbers, strings and byte strings it read ([`LIMIT`] at most).
#[inline]
pub(crate) fn touch<T: Serialize + ?Sized>(value: &T) -> usize {
    let left = Cell::new(LIMIT);
    // `Err`: the walk stopped at its limit.
    let _ = value.serialize(Touch(&left));
    LIMIT - left.get()
}

/// The walk: a serializer that writes nothing, with what is left of its limit.
#[derive(Clone, Copy)]
struct Touch<'a>(&'a Cell<usize>);

impl Touch<'_> {
    /// Counts one value read; `Err` once the limit is reached (the walk stops).
    #[inline]
    fn one(self) -> Result<(), Stop> {
        match self.0.get() {
            0 => Err(Stop),
            n => {
                self.0.set(n - 1);
                Ok(())
            }
        }
    }
}

/// The walk reached its limit.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the walk reached its limit")
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Stop
    }
}

macro_rules! read {
    ($($name:ident: $ty:ty),* $(,)?) => {
        $(
            #[inline]
            fn $name(self, v: $ty) -> Result<(), Stop> {
                self.one()?;
                std::hint::black_box(v);
                Ok(())
            }
        )*
    };
}

impl<'a> ser::Serializer for Touch<'a> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    read!(
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
        serialize_f32: f32,
        serialize_f64: f64,
        serialize_char: char,
    );

    #[inline]
    fn serialize_str(self, v: &str) -> Result<(), Stop> {
        self.serialize_bytes(v.as_bytes())
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Stop> {
        self.one()?;
        // The first byte: the line it is on is the miss; the rest are read in order.
        std::hint::black_box(v.first().copied());
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Stop> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Stop> {
        v.serialize(self)
    }
    #[inline]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), Stop> {
        v.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
}

/// The items of a compound value, each walked as a value.
macro_rules! compound {
    ($($trait:ident :: $method:ident),* $(,)?) => {
        $(
            impl ser::$trait for Touch<'_> {
                type Ok = ();
                type Error = Stop;
                #[inline]
                fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Stop> {
                    v.serialize(*self)
                }
                fn end(self) -> Result<(), Stop> {
                    Ok(())
                }
            }
        )*
    };
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for Touch<'_> {
    type Ok = ();
    type Error = Stop;
    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Stop> {
        k.serialize(*self)
    }
    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Stop> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

/// The fields of a struct (or struct variant), each walked as a value.
macro_rules! fields {
    ($($trait:ident),* $(,)?) => {
        $(
            impl ser::$trait for Touch<'_> {
                type Ok = ();
                type Error = Stop;
                #[inline]
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    _: &'static str,
                    v: &T,
                ) -> Result<(), Stop> {
                    v.serialize(*self)
                }
                fn end(self) -> Result<(), Stop> {
                    Ok(())
                }
            }
        )*
    };
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    enum Shape {
        Dot,
        Line(u32, String),
        Named { label: String, at: Option<f64> },
    }

    #[test]
    fn every_number_and_string_of_a_state_is_read() {
        // Every serde form a state can take, nested.
        let mut map = BTreeMap::new();
        // 1 key + (Dot: 0) + (Line: 2) = 3.
        map.insert(
            "k".to_string(),
            vec![Shape::Dot, Shape::Line(3, "x".into())],
        );
        // 1 key + label + at = 3.
        let named = Shape::Named {
            label: "y".into(),
            at: Some(1.5),
        };
        map.insert(String::new(), vec![named]);
        // 1 + 1 + 1 + 0 + 3 + 6 + 2 + 1 = 15.
        let state = (
            1u64,
            -2i8,
            'c',
            (),
            Some(vec![0u8; 3]),
            map,
            [true; 2],
            7u128,
        );
        assert_eq!(touch(&state), 15);
        assert_eq!(touch(&String::new()), 1);
        assert_eq!(touch(&Vec::<String>::new()), 0);
        assert_eq!(touch(&None::<u64>), 0);
    }

    #[test]
    fn a_large_state_is_walked_up_to_the_limit() {
        let long: Vec<(u64, String)> = (0..1000).map(|i| (i, format!("{i}"))).collect();
        assert_eq!(touch(&long), LIMIT);
        assert_eq!(touch(&(1u8, long)), LIMIT);
    }
}
