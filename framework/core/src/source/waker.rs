//! The waker of an idle source: what ends a [`SourceStatus::Idle`](super::SourceStatus::Idle)
//! wait before its delay. A flag (set by [`SourceWaker::wake`], cleared by the subtask before
//! each poll) and the subtask actor's task waker: a wake between the poll that found nothing
//! and the actor's registration is seen by the flag, one after it by the task waker, so none
//! is lost. This module owns only the handshake; the actor's wait is in `task`.

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, AtomicWaker};

/// Ends a source's [`Idle`](super::SourceStatus::Idle) wait: the subtask polls the source
/// again soon after [`wake`](Self::wake) (within microseconds when its arbiter is free).
///
/// A source receives one in [`Source::set_waker`](super::Source::set_waker); clones wake the
/// same subtask. Waking a subtask that is not idle costs two atomic operations and makes it
/// poll its source once more at most. `Send + Sync`: hand it to the thread that receives data.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use weir::source::{Source, SourceStatus, SourceWaker};
/// use weir::SourceError;
///
/// /// Records another thread puts in `inbox`, which then calls `waker.wake()`.
/// struct Inbox {
///     inbox: Arc<Mutex<Vec<String>>>,
///     waker: Arc<Mutex<Option<SourceWaker>>>,
/// }
///
/// impl Source<String> for Inbox {
///     fn set_waker(&mut self, waker: SourceWaker) {
///         *self.waker.lock().unwrap() = Some(waker);
///     }
///     fn poll_batch(&mut self, out: &mut Vec<String>, _max: usize) -> Result<SourceStatus, SourceError> {
///         out.append(&mut self.inbox.lock().unwrap());
///         Ok(SourceStatus::Idle { until: None })
///     }
/// }
/// ```
#[derive(Clone, Default)]
pub struct SourceWaker(Arc<Cell>);

#[derive(Default)]
struct Cell {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl SourceWaker {
    /// A waker not connected to any subtask yet (for testing a source on its own; a running
    /// source gets its subtask's from [`Source::set_waker`](super::Source::set_waker)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the subtask poll its source again: ends an `Idle` wait now, or, if the source is
    /// being polled, makes an `Idle` answer of that poll be followed by another poll at once.
    pub fn wake(&self) {
        self.0.woken.store(true, Ordering::Release);
        self.0.task.wake();
    }

    /// Clears the flag before a poll of the source. A read-modify-write with acquire: the
    /// poll's reads of the source's input cannot move before it, so a wake that this clears
    /// came before data the poll sees.
    pub(crate) fn clear(&self) {
        self.0.woken.swap(false, Ordering::AcqRel);
    }

    /// Registers the subtask's task waker; whether a wake came since the last
    /// [`clear`](Self::clear).
    pub(crate) fn register(&self, waker: &std::task::Waker) -> bool {
        self.0.task.register(waker);
        self.0.woken.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for SourceWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceWaker")
            .field("woken", &self.0.woken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
