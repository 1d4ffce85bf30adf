//! Counters of operators and subtasks, readable while a job runs and summed into its result.
//!
//! Counters are updated once per batch (never per record) with relaxed atomics, so reading
//! them costs the hot path nothing measurable. This module owns the counters, not their
//! export (REST and Prometheus come with the control plane).

use crate::sync::atomic::{AtomicU64, Ordering};

/// Counters of one operator in one subtask.
#[derive(Debug, Default)]
pub(crate) struct OperatorCounters {
    pub(crate) records_in: AtomicU64,
    pub(crate) records_out: AtomicU64,
    /// Records refused as malformed (skipped by a source's policy).
    pub(crate) records_rejected: AtomicU64,
}

impl OperatorCounters {
    #[inline]
    pub(crate) fn add_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn add_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }
    #[inline]
    pub(crate) fn add_rejected(&self, n: u64) {
        self.records_rejected.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.records_in.load(Ordering::Relaxed),
            self.records_out.load(Ordering::Relaxed),
            self.records_rejected.load(Ordering::Relaxed),
        )
    }
}

/// Counters of one subtask (one actor).
#[derive(Debug, Default)]
pub(crate) struct SubtaskCounters {
    /// Input batches taken from the data lane (or produced by a source step).
    pub(crate) batches_in: AtomicU64,
    /// System mails handled.
    pub(crate) mails_handled: AtomicU64,
}

impl SubtaskCounters {
    pub(crate) fn batches(&self) -> u64 {
        self.batches_in.load(Ordering::Relaxed)
    }
}
