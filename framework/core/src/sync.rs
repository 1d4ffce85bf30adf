//! The synchronization shim: every concurrency core of Weir imports its `Arc`, `Mutex` and
//! atomics from here, never from `std::sync` directly.
//!
//! Normally these are the std types. Under `--cfg weir_loom` they are loom's, so the loom models
//! in `tests/` explore every interleaving of the same code that runs in production (the pattern
//! of tokio's `src/loom/`). Weir uses its own cfg name because `--cfg loom` reaches every
//! dependency and breaks tokio under actix-rt.
//!
//! This module owns no logic: it only chooses the implementation.

#[cfg(not(weir_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(weir_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

/// Atomics, std or loom.
pub(crate) mod atomic {
    #[cfg(not(weir_loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

    #[cfg(weir_loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
}

/// Locks a mutex, recovering the data if another thread panicked while holding it.
///
/// Weir's locks guard plain queues and counters whose invariants hold between statements, so
/// a poisoned lock carries no broken state; a panicking operator is reported as a job failure
/// through its own path.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Locks a mutex if no one holds it now (recovering a poisoned one, as [`lock`]).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A cell holding the waker of the task to wake: futures' `AtomicWaker`, or loom's so that
/// loom sees the register/wake race (it cannot see inside futures).
#[derive(Debug, Default)]
pub(crate) struct AtomicWaker {
    #[cfg(not(weir_loom))]
    inner: futures::task::AtomicWaker,
    #[cfg(weir_loom)]
    inner: loom::future::AtomicWaker,
}

impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Stores `waker` to be woken by the next [`wake`](Self::wake).
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        #[cfg(not(weir_loom))]
        self.inner.register(waker);
        #[cfg(weir_loom)]
        self.inner.register_by_ref(waker);
    }

    /// Wakes the stored waker, if any.
    pub(crate) fn wake(&self) {
        self.inner.wake();
    }
}

/// A concurrent map with per-entry atomic updates: dashmap (sharded locks), or under loom a
/// mutex around a `HashMap`, so loom sees every interleaving of the code that uses it.
pub(crate) struct ConcurrentMap<K, V> {
    #[cfg(not(weir_loom))]
    inner: dashmap::DashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>,
    #[cfg(weir_loom)]
    inner: Mutex<std::collections::HashMap<K, V>>,
}

impl<K: std::hash::Hash + Eq + Clone, V> ConcurrentMap<K, V> {
    pub(crate) fn new() -> Self {
        ConcurrentMap {
            #[cfg(not(weir_loom))]
            inner: dashmap::DashMap::default(),
            #[cfg(weir_loom)]
            inner: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Runs `occupied` on the entry of `key`, or `vacant` (which may insert a value) when there
    /// is none, with the entry locked against every other update of `key` meanwhile.
    pub(crate) fn upsert<R>(
        &self,
        key: K,
        occupied: impl FnOnce(&mut V) -> R,
        vacant: impl FnOnce() -> (R, Option<V>),
    ) -> R {
        #[cfg(not(weir_loom))]
        {
            match self.inner.entry(key) {
                dashmap::Entry::Occupied(mut o) => occupied(o.get_mut()),
                dashmap::Entry::Vacant(v) => {
                    let (r, value) = vacant();
                    if let Some(value) = value {
                        v.insert(value);
                    }
                    r
                }
            }
        }
        #[cfg(weir_loom)]
        {
            let mut map = lock(&self.inner);
            match map.get_mut(&key) {
                Some(v) => occupied(v),
                None => {
                    let (r, value) = vacant();
                    if let Some(value) = value {
                        map.insert(key, value);
                    }
                    r
                }
            }
        }
    }

    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        #[cfg(not(weir_loom))]
        {
            self.inner.remove(key).map(|(_, v)| v)
        }
        #[cfg(weir_loom)]
        {
            lock(&self.inner).remove(key)
        }
    }

    /// Keeps only the entries for which `keep` is true.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        #[cfg(not(weir_loom))]
        self.inner.retain(|k, v| keep(k, v));
        #[cfg(weir_loom)]
        lock(&self.inner).retain(|k, v| keep(k, v));
    }

    /// Calls `f` on every entry (not a snapshot: concurrent updates may or may not be seen).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        #[cfg(not(weir_loom))]
        for r in self.inner.iter() {
            f(r.key(), r.value());
        }
        #[cfg(weir_loom)]
        for (k, v) in lock(&self.inner).iter() {
            f(k, v);
        }
    }
}
