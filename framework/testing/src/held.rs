//! A source whose input comes in two parts, the second only once the test says so
//! ([`HeldIds`], [`Hold`]): a test lets an event happen first (a checkpoint completes, a
//! backup catches up) and then lets the rest of the input come, however fast or slow the
//! machine is. Holding, the source is idle (`SourceStatus::Idle`): it costs no CPU and
//! checkpoints go on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::source::{Source, SourceContext, SourceStatus, SourceWaker};
use weir::SourceError;

/// Lets a [`HeldIds`] source go on past its hold; clones release the same sources.
#[derive(Debug, Clone, Default)]
pub struct Hold {
    released: Arc<AtomicBool>,
    wakers: Arc<std::sync::Mutex<Vec<SourceWaker>>>,
}

impl Hold {
    /// A hold not released yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Lets every source of this hold emit the rest of its input.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
        let wakers = self
            .wakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for w in wakers.iter() {
            w.wake();
        }
    }
    /// Whether [`release`](Self::release) was called.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }
}

/// The ids `0..n`, split over the source's subtasks (contiguous shares, as
/// `Env::generate`); each subtask emits the first `before_hold` share (a fraction, 0 to 1) of
/// its ids, then holds until the [`Hold`] is released. Replayable: its checkpointed position
/// is the next id.
///
/// ```
/// use std::time::Duration;
/// use weir_testing::{wait_for_checkpoint, Hold, HeldIds};
/// let mut cfg = weir::EnvConfig::default();
/// cfg.checkpoint.interval = Some(Duration::from_millis(10));
/// let env = weir::Env::with_config(cfg);
/// let hold = Hold::new();
/// let h = hold.clone();
/// let out = env
///     .add_source("ids", move |cx| Ok(HeldIds::new(cx, 1_000, 0.5, h.clone())))
///     .collect();
/// let job = env.start("held-doc").unwrap();
/// // Half the ids are in; nothing more comes until a checkpoint has completed.
/// wait_for_checkpoint(&job, 1, Duration::from_secs(30)).unwrap();
/// hold.release();
/// job.wait().unwrap();
/// assert_eq!(out.take().len(), 1_000);
/// ```
#[derive(Debug)]
pub struct HeldIds {
    next: u64,
    end: u64,
    hold_at: u64,
    hold: Hold,
}

impl HeldIds {
    /// Subtask `cx`'s share of `0..n`, holding after `before_hold` of it.
    pub fn new(cx: SourceContext, n: u64, before_hold: f64, hold: Hold) -> Self {
        let share = cx.share_of(n);
        let len = share.end - share.start;
        let before = ((len as f64) * before_hold.clamp(0.0, 1.0)) as u64;
        HeldIds {
            next: share.start,
            end: share.end,
            hold_at: share.start + before,
            hold,
        }
    }
}

/// Polled again this long after an idle answer even without a wake (a safety net: the
/// release wakes the source).
const HELD_RECHECK: Duration = Duration::from_millis(50);

impl Source<u64> for HeldIds {
    fn set_waker(&mut self, waker: SourceWaker) {
        self.hold
            .wakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(waker);
    }

    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        if self.next >= self.end {
            return Ok(SourceStatus::End);
        }
        let bound = if self.hold.is_released() {
            self.end
        } else {
            self.hold_at
        };
        if self.next >= bound {
            return Ok(SourceStatus::Idle {
                until: Some(HELD_RECHECK),
            });
        }
        let stop = bound.min(self.next + max as u64);
        out.extend(self.next..stop);
        self.next = stop;
        Ok(SourceStatus::More)
    }

    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let bytes: [u8; 8] = position.try_into().map_err(|_| SourceError::BadPosition {
            message: format!("a held-ids position is 8 bytes, got {}", position.len()),
        })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}
