//! Keyed state: what a keyed operator keeps per key.
//!
//! A keyed operator declares a per-key state type (any `Default + Data`: a [`ValueState`], a
//! [`MapState`], a tuple or a struct of them) and receives `&mut` to the current key's state
//! with every record. The runtime keeps one entry per key in a [`KeyedState`] table; entries are
//! grouped by key group only when snapshotted, so the hot path is one hash lookup per record.
//! This module owns the state containers, not their snapshots.

use std::collections::HashMap;
use std::hash::Hash;

use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};

/// One optional value per key (Flink's `ValueState`).
///
/// ```
/// let mut s = weir::ValueState::<u64>::default();
/// assert_eq!(s.value(), None);
/// s.update(3);
/// *s.get_or_insert_with(|| 0) += 1;
/// assert_eq!(s.value(), Some(&4));
/// s.clear();
/// assert!(s.value().is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueState<T>(Option<T>);

impl<T> Default for ValueState<T> {
    fn default() -> Self {
        ValueState(None)
    }
}

impl<T> ValueState<T> {
    /// The value, if set.
    pub fn value(&self) -> Option<&T> {
        self.0.as_ref()
    }
    /// Sets the value.
    pub fn update(&mut self, v: T) {
        self.0 = Some(v);
    }
    /// Removes the value and returns it.
    pub fn take(&mut self) -> Option<T> {
        self.0.take()
    }
    /// Clears the value.
    pub fn clear(&mut self) {
        self.0 = None;
    }
    /// The value, set by `f` first if empty.
    pub fn get_or_insert_with(&mut self, f: impl FnOnce() -> T) -> &mut T {
        self.0.get_or_insert_with(f)
    }
}

/// A map per key (Flink's `MapState`).
///
/// ```
/// let mut s = weir::MapState::<String, u32>::default();
/// s.put("a".into(), 1);
/// assert_eq!(s.get("a"), Some(&1));
/// assert_eq!(s.remove("a"), Some(1));
/// assert!(s.is_empty());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize + Hash + Eq, V: Serialize",
    deserialize = "K: Deserialize<'de> + Hash + Eq, V: Deserialize<'de>"
))]
pub struct MapState<K, V>(HashMap<K, V>);

impl<K: Hash + Eq, V: PartialEq> PartialEq for MapState<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K, V> Default for MapState<K, V> {
    fn default() -> Self {
        MapState(HashMap::new())
    }
}

impl<K: Hash + Eq, V> MapState<K, V> {
    /// The value under `k`.
    pub fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get(k)
    }
    /// Mutable value under `k`.
    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get_mut(k)
    }
    /// Sets `k` to `v`, returning the old value.
    pub fn put(&mut self, k: K, v: V) -> Option<V> {
        self.0.insert(k, v)
    }
    /// Removes `k`.
    pub fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.remove(k)
    }
    /// Whether `k` is present.
    pub fn contains<Q>(&self, k: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.contains_key(k)
    }
    /// The entry for `k`.
    pub fn entry(&mut self, k: K) -> std::collections::hash_map::Entry<'_, K, V> {
        self.0.entry(k)
    }
    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The states of every key a keyed subtask has seen.
#[derive(Debug)]
pub struct KeyedState<K, S> {
    pub(crate) map: HashMap<K, S, FxBuildHasher>,
}

impl<K, S> Default for KeyedState<K, S> {
    fn default() -> Self {
        KeyedState {
            map: HashMap::default(),
        }
    }
}

impl<K: Hash + Eq, S> KeyedState<K, S> {
    /// The state of one key.
    pub fn get(&self, key: &K) -> Option<&S> {
        self.map.get(key)
    }
    /// Every key and its state, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &S)> {
        self.map.iter()
    }
    /// Every key and its mutable state.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        self.map.iter_mut()
    }
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
