//! A hash map split into a fixed number of tables by hash, so that it grows a table at a time.
//!
//! A keyed operator whose changes are logged (a backed-up one's, or one with incremental
//! checkpoints) keeps its states here. One table of millions of entries stops its operator
//! when it grows (every entry moved at once: 190 ms at 1.8M keys, past a backup's heartbeat
//! timeout) and holds the old and the new table at once meanwhile (at 10M keys, 450 MB more
//! than the state); a map that moves its entries a few per insert instead keeps both tables
//! until the move is done, and looks a key up in both meanwhile. Split in [`SHARDS`] tables,
//! a table grows alone: the pause and the memory held twice are a [`SHARDS`]th of the whole.
//!
//! Each key is hashed once: the table is chosen from bits 40..46 of the hash (hashbrown
//! takes a slot from the hash's low bits and a tag from its top 7; a table chosen by either
//! would leave all of its keys the same slot or tag bits, and every lookup compares more
//! keys). A table chosen from the hash remixed instead cost ~10 % of lookup speed on
//! sequential keys, which lost the multiplicative hash's even spread within a table.
//!
//! It owns the tables; not what the entries hold (`Tracked`, the change log's generations).

use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::FxBuildHasher;

/// Tables per map: a power of two.
pub(crate) const SHARDS: usize = 64;

/// See the module doc.
pub(crate) struct ShardedMap<K, V> {
    tables: Box<[HashTable<(K, V)>]>,
    len: usize,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap {
            tables: (0..SHARDS).map(|_| HashTable::new()).collect(),
            len: 0,
        }
    }
}

impl<K, V> std::fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("len", &self.len)
            .finish()
    }
}

fn hash_of<K: Hash>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The table of a key whose hash is `hash`: bits 40..46 (bits that neither the slot nor the
/// tag within the table is taken from).
fn shard_of(hash: u64) -> usize {
    (hash >> 40) as usize & (SHARDS - 1)
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// The value of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        let h = hash_of(key);
        self.tables[shard_of(h)]
            .find(h, |(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The value of `key`, to write.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let h = hash_of(key);
        self.tables[shard_of(h)]
            .find_mut(h, |(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Whether `key` has a value.
    #[inline]
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s value; returns the one it replaced.
    #[inline]
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let h = hash_of(&key);
        let table = &mut self.tables[shard_of(h)];
        match table.entry(h, |(k, _)| *k == key, |(k, _)| hash_of(k)) {
            Entry::Occupied(mut e) => Some(std::mem::replace(&mut e.get_mut().1, value)),
            Entry::Vacant(e) => {
                e.insert((key, value));
                self.len += 1;
                None
            }
        }
    }

    /// `key`'s value, set to `value()` first if it has none.
    pub(crate) fn get_or_insert_with(&mut self, key: K, value: impl FnOnce() -> V) -> &mut V {
        let h = hash_of(&key);
        let table = &mut self.tables[shard_of(h)];
        match table.entry(h, |(k, _)| *k == key, |(k, _)| hash_of(k)) {
            Entry::Occupied(e) => &mut e.into_mut().1,
            Entry::Vacant(e) => {
                self.len += 1;
                &mut e.insert((key, value())).into_mut().1
            }
        }
    }
}

impl<K, V> ShardedMap<K, V> {
    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every key and value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.tables
            .iter()
            .flat_map(|t| t.iter().map(|(k, v)| (k, v)))
    }

    /// Every key and its value to write, in no particular order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> + '_ {
        self.tables
            .iter_mut()
            .flat_map(|t| t.iter_mut().map(|(k, v)| (&*k, v)))
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn it_holds_what_a_std_map_holds() {
        let mut m = ShardedMap::default();
        let mut want = std::collections::HashMap::new();
        for i in 0u64..20_000 {
            let k = i.wrapping_mul(7919) % 5_000;
            assert_eq!(m.insert(k, i), want.insert(k, i), "insert {k}");
            if i % 11 == 0 {
                *m.get_or_insert_with(k + 10_000, || 0) += 1;
                *want.entry(k + 10_000).or_insert(0) += 1;
            }
        }
        assert_eq!(m.len(), want.len());
        for (k, v) in &want {
            assert_eq!(m.get(k), Some(v));
        }
        assert!(!m.contains_key(&1_000_000));
        let mut all: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort();
        let mut expected: Vec<_> = want.into_iter().collect();
        expected.sort();
        assert_eq!(all, expected);
        m.iter_mut().for_each(|(_, v)| *v = 0);
        assert!(m.iter().all(|(_, v)| *v == 0));
    }

    #[test]
    fn keys_spread_over_every_table() {
        let mut m = ShardedMap::default();
        for k in 0u64..(SHARDS as u64 * 64) {
            m.insert(k, ());
        }
        let sizes: Vec<usize> = m.tables.iter().map(|t| t.len()).collect();
        assert!(
            sizes.iter().all(|n| (16..=160).contains(n)),
            "sequential keys spread: {sizes:?}"
        );
    }
}
