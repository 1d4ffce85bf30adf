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
