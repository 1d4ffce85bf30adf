//! The cache in front of a lookup: none, all (every key loaded at open), or least recently
//! used with a size and an optional time to live. A plain synchronous structure with the time
//! passed in, so its rules are tested without a clock or a runtime. It owns the entries and
//! their eviction; it does not know where values come from (`op`) or what is counted
//! (`LookupMetrics`).
//!
//! A hit costs a hash look-up and, for the LRU, relinking one node: no allocation. The LRU
//! keeps its nodes in a slab (a `Vec` with a free list) linked by index, so an insert reuses
//! the slot of the entry it evicts.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use rustc_hash::FxBuildHasher;

use super::CacheKind;

const NIL: usize = usize::MAX;

/// The cache of one lookup subtask.
pub(crate) enum Cache<K, V> {
    None,
    All(HashMap<K, V, FxBuildHasher>),
    Lru(Lru<K, V>),
}

impl<K: Hash + Eq + Clone, V> Cache<K, V> {
    /// An empty cache of `kind` (`size` and `ttl` are the LRU's).
    pub(crate) fn new(kind: CacheKind, size: usize, ttl: Option<Duration>) -> Self {
        match kind {
            CacheKind::None => Cache::None,
            CacheKind::All => Cache::All(HashMap::default()),
            CacheKind::Lru => Cache::Lru(Lru::new(size, ttl)),
        }
    }

    /// The value of `key`, if cached and not expired at `now`.
    #[inline]
    pub(crate) fn get(&mut self, key: &K, now: Instant) -> Option<&V> {
        match self {
            Cache::None => None,
            Cache::All(map) => map.get(key),
            Cache::Lru(lru) => lru.get(key, now),
        }
    }

    /// Whether values are kept at all (with `none`, the caller need not clone the key).
    pub(crate) fn keeps(&self) -> bool {
        !matches!(self, Cache::None)
    }

    pub(crate) fn insert(&mut self, key: K, value: V, now: Instant) {
        match self {
            Cache::None => {}
            Cache::All(map) => {
                map.insert(key, value);
            }
            Cache::Lru(lru) => lru.insert(key, value, now),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Cache::None => 0,
            Cache::All(map) => map.len(),
            Cache::Lru(lru) => lru.len(),
        }
    }

    /// A new LRU size: the least recently used entries beyond it are evicted now.
    pub(crate) fn set_size(&mut self, size: usize) {
        if let Cache::Lru(lru) = self {
            lru.set_size(size)
        }
    }

    /// A new LRU time to live, for the entries already cached too.
    pub(crate) fn set_ttl(&mut self, ttl: Option<Duration>) {
        if let Cache::Lru(lru) = self {
            lru.ttl = ttl
        }
    }
}

/// A least-recently-used map of at most `size` entries, each valid for `ttl` after it was
/// inserted.
pub(crate) struct Lru<K, V> {
    index: HashMap<K, usize, FxBuildHasher>,
    nodes: Vec<Option<Node<K, V>>>,
    free: Vec<usize>,
    /// Most recently used.
    head: usize,
    /// Least recently used: evicted first.
    tail: usize,
    size: usize,
    ttl: Option<Duration>,
}

struct Node<K, V> {
    key: K,
    value: V,
    inserted: Instant,
    prev: usize,
    next: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    pub(crate) fn new(size: usize, ttl: Option<Duration>) -> Self {
        Lru {
            index: HashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            size: size.max(1),
            ttl,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    fn node(&mut self, i: usize) -> &mut Node<K, V> {
        match self.nodes[i].as_mut() {
            Some(n) => n,
            None => unreachable!("internal error: a linked LRU slot is empty"),
        }
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = {
            let n = self.node(i);
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.node(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node(next).prev = prev;
        }
    }

    fn link_front(&mut self, i: usize) {
        let old = self.head;
        {
            let n = self.node(i);
            n.prev = NIL;
            n.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.node(old).prev = i;
        }
        self.head = i;
    }

    fn remove(&mut self, i: usize) {
        self.unlink(i);
        if let Some(n) = self.nodes[i].take() {
            self.index.remove(&n.key);
        }
        self.free.push(i);
    }

    pub(crate) fn get(&mut self, key: &K, now: Instant) -> Option<&V> {
        let i = *self.index.get(key)?;
        let ttl = self.ttl;
        if ttl.is_some_and(|t| now.saturating_duration_since(self.node(i).inserted) >= t) {
            self.remove(i);
            return None;
        }
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
        self.nodes[i].as_ref().map(|n| &n.value)
    }

    pub(crate) fn insert(&mut self, key: K, value: V, now: Instant) {
        if let Some(&i) = self.index.get(&key) {
            let n = self.node(i);
            n.value = value;
            n.inserted = now;
            if self.head != i {
                self.unlink(i);
                self.link_front(i);
            }
            return;
        }
        while self.index.len() >= self.size && self.tail != NIL {
            self.remove(self.tail);
        }
        let node = Node {
            key: key.clone(),
            value,
            inserted: now,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        self.index.insert(key, i);
        self.link_front(i);
    }

    pub(crate) fn set_size(&mut self, size: usize) {
        self.size = size.max(1);
        while self.index.len() > self.size && self.tail != NIL {
            self.remove(self.tail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_is_evicted_first() {
        let t = Instant::now();
        let mut c = Lru::new(2, None);
        c.insert(1, "a", t);
        c.insert(2, "b", t);
        assert_eq!(c.get(&1, t), Some(&"a"));
        c.insert(3, "c", t);
        assert_eq!(c.get(&2, t), None, "2 was used least recently");
        assert_eq!(c.get(&1, t), Some(&"a"));
        assert_eq!(c.get(&3, t), Some(&"c"));
        c.insert(1, "a2", t);
        assert_eq!(c.len(), 2);
        c.set_size(1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&1, t), Some(&"a2"));
        assert_eq!(c.get(&3, t), None);
        // Slots are reused: inserting and evicting keeps the slab at its high-water mark.
        for k in 10..1000 {
            c.insert(k, "x", t);
        }
        assert_eq!(c.len(), 1);
        assert!(c.nodes.len() <= 3, "{}", c.nodes.len());
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let t = Instant::now();
        let mut c = Lru::new(10, Some(Duration::from_secs(30)));
        c.insert("k", 1, t);
        assert_eq!(c.get(&"k", t + Duration::from_secs(29)), Some(&1));
        assert_eq!(c.get(&"k", t + Duration::from_secs(30)), None);
        assert_eq!(c.len(), 0);
        c.insert("k", 2, t);
        c.insert("k", 3, t + Duration::from_secs(20));
        assert_eq!(
            c.get(&"k", t + Duration::from_secs(40)),
            Some(&3),
            "re-inserted"
        );
    }

    #[test]
    fn every_strategy_answers_from_what_it_holds() {
        let t = Instant::now();
        let mut none: Cache<u64, u64> = Cache::new(CacheKind::None, 4, None);
        none.insert(1, 1, t);
        assert_eq!(none.get(&1, t), None);
        assert_eq!((none.len(), none.keeps()), (0, false));
        let mut all: Cache<u64, u64> = Cache::new(CacheKind::All, 1, None);
        for k in 0..100 {
            all.insert(k, k * 2, t);
        }
        assert_eq!(all.get(&99, t), Some(&198));
        assert_eq!(all.len(), 100);
        let mut lru: Cache<u64, u64> = Cache::new(CacheKind::Lru, 3, None);
        for k in 0..100 {
            lru.insert(k, k, t);
        }
        assert_eq!(lru.get(&99, t), Some(&99));
        assert_eq!(lru.get(&0, t), None);
        assert_eq!(lru.len(), 3);
    }
}
