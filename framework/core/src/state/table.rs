//! The in-memory map of a keyed subtask whose changes are logged: every key's state beside the
//! change log's generation, walkable a slice of buckets at a time.
//!
//! An incremental checkpoint copies the entries changed since the previous one. Looked up one
//! by one, at a tenth of ten million keys, each lookup misses every cache (the map is far
//! larger than them): half the operator's time went to those misses. Walked in the table's
//! own order, a slice between units of work, the same entries cost a sequential read. A walk
//! must see every entry that was in the map when it began: a [`Cursor`] remembers how many
//! times entries may have moved (an insert into a full table rehashes it, in place or into a
//! larger one) and the walk starts again from the first bucket when they may have, which
//! only re-reads entries (the copied ones no longer carry the generation being copied). Each
//! time a walk starts again it goes over twice as many buckets per call: a walk that started
//! again at every growth of a map being filled fast might otherwise never end.
//!
//! It owns the map and the walk, not what is copied (`checkpoint::copy`) nor the generations'
//! meaning (`state::changes`).

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::Tracked;

/// Every key's state and the generation it was last logged in.
pub(crate) struct LoggedMap<K, S> {
    table: HashTable<(K, Tracked<S>)>,
    hasher: FxBuildHasher,
    /// How many times entries may have moved between buckets.
    moves: u64,
}

/// Where a walk over a [`LoggedMap`]'s buckets is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor {
    next: usize,
    moves: u64,
    /// Times the walk started again: it goes over `2^restarts` times the buckets asked for.
    restarts: u32,
}

impl<K, S> Default for LoggedMap<K, S> {
    fn default() -> Self {
        LoggedMap {
            table: HashTable::new(),
            hasher: FxBuildHasher,
            moves: 0,
        }
    }
}

impl<K: std::fmt::Debug, S: std::fmt::Debug> std::fmt::Debug for LoggedMap<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.table.iter().map(|(k, t)| (k, t)))
            .finish()
    }
}

impl<K: Hash + Eq, S> LoggedMap<K, S> {
    #[inline(always)]
    fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// `key`'s entry.
    #[inline]
    pub(crate) fn get(&self, key: &K) -> Option<&Tracked<S>> {
        self.table
            .find(self.hash(key), |(k, _)| k == key)
            .map(|(_, t)| t)
    }

    /// `key`'s entry, to write.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut Tracked<S>> {
        let hash = self.hash(key);
        self.table.find_mut(hash, |(k, _)| k == key).map(|(_, t)| t)
    }

    /// Whether `key` has an entry.
    #[inline]
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`'s entry, replacing the one it had.
    pub(crate) fn insert(&mut self, key: K, t: Tracked<S>) {
        match self.get_mut(&key) {
            Some(old) => *old = t,
            None => self.insert_new(key, t),
        }
    }

    /// Sets `key`'s entry unless it has one.
    pub(crate) fn insert_if_absent(&mut self, key: K, t: Tracked<S>) {
        if !self.contains_key(&key) {
            self.insert_new(key, t);
        }
    }

    /// Inserts the entry of `key`, which has none.
    fn insert_new(&mut self, key: K, t: Tracked<S>) {
        if self.table.len() == self.table.capacity() {
            // No room left: this insert rehashes the table, and entries move.
            self.moves += 1;
        }
        let hash = self.hash(&key);
        let hasher = self.hasher;
        self.table
            .insert_unique(hash, (key, t), move |(k, _)| hasher.hash_one(k));
    }

    /// The number of keys.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The number of buckets a walk goes over (the cost of a walk, against lookups).
    pub(crate) fn buckets(&self) -> usize {
        self.table.num_buckets()
    }
}

impl<K, S> LoggedMap<K, S> {
    /// Every entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &Tracked<S>)> {
        self.table.iter().map(|(k, t)| (k, t))
    }

    /// Every entry, to write.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut Tracked<S>)> {
        self.table.iter_mut().map(|(k, t)| (&*k, t))
    }

    /// A walk from the first bucket.
    pub(crate) fn cursor(&self) -> Cursor {
        Cursor {
            next: 0,
            moves: self.moves,
            restarts: 0,
        }
    }

    /// Gives `f` the entries of the next `buckets` buckets of `cursor`'s walk (twice as many
    /// for each time it started again), until `f` says this is enough for now; returns
    /// whether the walk is over. If entries may have moved since the walk was last here, it
    /// starts again from the first bucket.
    pub(crate) fn walk(
        &mut self,
        cursor: &mut Cursor,
        buckets: usize,
        mut f: impl FnMut(&K, &mut Tracked<S>) -> std::ops::ControlFlow<()>,
    ) -> bool {
        if cursor.moves != self.moves {
            *cursor = Cursor {
                restarts: cursor.restarts.saturating_add(1),
                ..self.cursor()
            };
        }
        let buckets = buckets.saturating_mul(1usize << cursor.restarts.min(32));
        let end = cursor
            .next
            .saturating_add(buckets)
            .min(self.table.num_buckets());
        while cursor.next < end {
            let i = cursor.next;
            cursor.next += 1;
            if let Some((k, t)) = self.table.get_bucket_mut(i) {
                if f(k, t).is_break() {
                    break;
                }
            }
        }
        cursor.next >= self.table.num_buckets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::ControlFlow;

    fn tracked(state: u64, logged: u64) -> Tracked<u64> {
        Tracked { state, logged }
    }

    /// A walk that meets inserts which rehash the table still sees every entry that was in
    /// it when the walk began.
    #[test]
    fn a_walk_sees_every_entry_whatever_is_inserted_meanwhile() {
        for step in [1, 7, 64, 1000] {
            let mut map = LoggedMap::<u64, u64>::default();
            for k in 0..1000 {
                map.insert(k, tracked(k, 1));
            }
            let mut cursor = map.cursor();
            let mut seen = std::collections::BTreeSet::new();
            let mut next_new = 1000;
            loop {
                let done = map.walk(&mut cursor, step, |k, t| {
                    if t.logged == 1 {
                        // Taken: not taken again after a restart.
                        t.logged = 0;
                        assert!(seen.insert(*k), "{k} taken twice");
                    }
                    ControlFlow::Continue(())
                });
                if done {
                    break;
                }
                // Enough inserts between steps that the table grows, more than once.
                for _ in 0..50 {
                    map.insert(next_new, tracked(next_new, 2));
                    next_new += 1;
                }
            }
            assert_eq!(seen.len(), 1000, "step {step}");
            assert!(seen.iter().copied().eq(0..1000));
            assert_eq!(map.len() as u64, next_new);
        }
    }

    #[test]
    fn a_walk_stops_where_it_is_told_and_goes_on_from_there() {
        let mut map = LoggedMap::<u64, u64>::default();
        for k in 0..100 {
            map.insert(k, tracked(k, 1));
        }
        map.insert(5, tracked(50, 1));
        assert_eq!(map.len(), 100);
        assert_eq!(map.get(&5).map(|t| t.state), Some(50));
        map.insert_if_absent(5, tracked(500, 1));
        assert_eq!(map.get(&5).map(|t| t.state), Some(50));
        let mut cursor = map.cursor();
        let mut n = 0;
        let mut walks = 0;
        loop {
            walks += 1;
            let done = map.walk(&mut cursor, usize::MAX, |_, _| {
                n += 1;
                if n % 10 == 0 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            if done {
                break;
            }
        }
        assert_eq!(n, 100);
        assert!(walks >= 10);
    }
}
