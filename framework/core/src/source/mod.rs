//! Sources: where records enter a job.
//!
//! A [`Source`] fills a batch per call; the subtask's actor calls it once per step, so a
//! source never blocks control mail for more than one batch. Built-in bounded sources:
//! [`generator`] (n records from a closure of the index), [`collection`] (a `Vec`),
//! [`jsonl`] (JSON Lines files, with a policy for malformed lines). Each subtask of a source
//! reads its own share (a range of indices, or a byte range of each file).
//!
//! A source with nothing to read now says so with [`SourceStatus::Idle`]: it is not polled
//! again until its [`SourceWaker`] is woken (push-style sources: another thread received
//! data) or the delay it gave has passed (polling sources). An idle source costs no CPU and
//! does not hold its arbiter: the subtask keeps serving its control mail (checkpoint
//! triggers, cancel) meanwhile. [`channel()`] is a ready-made push source.
//!
//! This module owns reading and waiting; positions are stored by the checkpoint subsystem.

pub mod channel;
pub mod collection;
pub mod generator;
pub mod jsonl;
pub mod text;
mod waker;

/// Kept with the watermarks it feeds (`time`), named here with the trait that hands it out.
pub use crate::time::Splits;
pub use channel::{channel, ChannelSource, Pusher};
pub use waker::SourceWaker;

use std::time::Duration;

use crate::error::SourceError;

/// Whether a source has more to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStatus {
    /// More records may follow: poll again at once.
    More,
    /// Nothing to read now: do not poll again until the source's [`SourceWaker`] is woken
    /// or, with `until: Some(d)`, until `d` has passed, whichever comes first. Records put in
    /// `out` by the same call are sent on at once (a partial batch is flushed).
    ///
    /// `Idle { until: None }` suits push-style sources (something another thread fills calls
    /// [`SourceWaker::wake`]); `Idle { until: Some(d) }` suits polling ones (look again in
    /// `d`). A source that is never woken and gave no delay waits until the job is cancelled.
    Idle {
        /// Poll again after this long at the latest (`None`: only when woken).
        until: Option<Duration>,
    },
    /// The source has ended; no record follows.
    End,
}

/// Which share of the input a source subtask reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceContext {
    /// This subtask's index.
    pub subtask: usize,
    /// The source's parallelism.
    pub parallelism: usize,
}

impl SourceContext {
    /// The half-open range of `0..n` this subtask owns (contiguous, sizes differ by one at most).
    ///
    /// ```
    /// let cx = weir::source::SourceContext { subtask: 1, parallelism: 3 };
    /// assert_eq!(cx.share_of(10), 3..6);
    /// ```
    pub fn share_of(&self, n: u64) -> std::ops::Range<u64> {
        // In u128: `n * (i + 1)` overflows u64 for large n (an effectively endless source).
        let (n, p, i) = (n as u128, self.parallelism as u128, self.subtask as u128);
        ((n * i / p) as u64)..((n * (i + 1) / p) as u64)
    }
}

/// A reader of records. One required method.
///
/// A source that may have nothing to read for a while returns [`SourceStatus::Idle`] rather
/// than sleeping in [`poll_batch`](Self::poll_batch) (which would hold the arbiter thread and
/// every subtask on it) or returning `More` with no records (which spins a core). A polling
/// source gives a delay:
///
/// ```
/// use std::time::Duration;
/// use weir::source::{Source, SourceStatus};
/// use weir::SourceError;
///
/// /// Looks for new lines in a log every 100 ms (here: a counter that grows slowly).
/// struct Tail { seen: u64, available: std::sync::Arc<std::sync::atomic::AtomicU64> }
///
/// impl Source<u64> for Tail {
///     fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
///         let now = self.available.load(std::sync::atomic::Ordering::Acquire);
///         let stop = now.min(self.seen + max as u64);
///         out.extend(self.seen..stop);
///         self.seen = stop;
///         Ok(if stop < now {
///             SourceStatus::More
///         } else {
///             SourceStatus::Idle { until: Some(Duration::from_millis(100)) }
///         })
///     }
/// }
/// ```
///
/// A push-style source (a network client's callback thread) keeps the [`SourceWaker`] it is
/// given in [`set_waker`](Self::set_waker), returns `Idle { until: None }` when it has nothing,
/// and has the other thread call [`SourceWaker::wake`] after it queued data; see
/// [`channel()`] for one ready made.
pub trait Source<T>: Send + 'static {
    /// Appends at most `max` records to `out` and says whether more may follow.
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError>;

    /// Called once on every start of the subtask, before the first
    /// [`poll_batch`](Self::poll_batch), with the waker that ends an
    /// [`Idle`](SourceStatus::Idle) wait. Keep it (it is `Send + Sync + Clone`) and hand it
    /// to whatever receives data for the source. The default drops it: a source that never
    /// returns `Idle { until: None }` needs none.
    fn set_waker(&mut self, _waker: SourceWaker) {}

    /// The position to resume from after the records emitted so far (for checkpoints), in
    /// the source's own encoding; `None` if the source cannot be replayed (then checkpoints
    /// of its job fail, naming it).
    fn position(&self) -> Option<Vec<u8>> {
        None
    }

    /// Resumes from a position [`position`](Self::position) returned.
    fn seek(&mut self, _position: &[u8]) -> Result<(), SourceError> {
        Err(SourceError::NotReplayable)
    }

    /// The position that checkpoint `checkpoint` stores: by default
    /// [`position`](Self::position). A source that acts when a checkpoint completes (a Kafka
    /// source commits its offsets to the broker for monitoring) remembers it here.
    fn checkpoint_position(&mut self, _checkpoint: u64) -> Option<Vec<u8>> {
        self.position()
    }

    /// Checkpoint `checkpoint` is complete: every operator has stored its state, so what the
    /// source read up to its position there will never be read again. Runs on the subtask's
    /// thread between batches; an error fails the subtask.
    fn notify_complete(&mut self, _checkpoint: u64) -> Result<(), SourceError> {
        Ok(())
    }

    /// Where the records of the last [`poll_batch`](Self::poll_batch) came from, for
    /// watermarks per split (see [`Splits`]); read after every call. `None` (the default):
    /// the subtask is one split.
    fn splits(&self) -> Option<&Splits> {
        None
    }
}

/// A source instance and the chain it feeds: one step reads one batch.
pub(crate) struct SourceDriver<T> {
    pub(crate) source: Box<dyn Source<T>>,
    pub(crate) buf: Vec<T>,
    pub(crate) out: crate::operator::BoxOutput<T>,
    pub(crate) batch_size: usize,
    pub(crate) info: crate::sync::Arc<crate::operator::OperatorInfo>,
    pub(crate) counters: crate::sync::Arc<crate::metrics::OperatorCounters>,
    /// The rate limit, if one is set.
    pub(crate) limiter: Option<crate::rate::TokenBucket>,
    /// End of input was sent downstream.
    pub(crate) ended: bool,
    /// Injected faults of this instance (testing): at the K-th record it reads.
    pub(crate) fault: Option<crate::fault::FaultProbe>,
    /// The waker the source was given ([`Source::set_waker`]).
    pub(crate) waker: SourceWaker,
    /// Event-time watermarks, for a source added with a watermark strategy.
    pub(crate) watermarks: Option<crate::time::WatermarkGenerator<T>>,
    /// Its place in a watermark alignment group, and how often to look again while paused.
    pub(crate) align: Option<(crate::time::alignment::Member, std::time::Duration)>,
}

impl<T> SourceDriver<T> {
    /// Whether watermark alignment lets the source read now (publishing its watermark).
    fn may_read(&mut self, now: std::time::Instant) -> bool {
        let (Some((member, _)), Some(g)) = (self.align.as_mut(), self.watermarks.as_mut()) else {
            return true;
        };
        if member.may_read(g.current(now)) {
            return true;
        }
        g.paused_at(now);
        false
    }
}

impl<T: Send + 'static> crate::operator::step::SourceStep for SourceDriver<T> {
    fn step(
        &mut self,
        now: std::time::Instant,
    ) -> Result<crate::operator::step::SourceProgress, crate::error::TaskError> {
        use crate::error::{panic_message, TaskError};
        use crate::operator::step::SourceProgress;
        if !self.may_read(now) {
            let again = self.align.as_ref().map(|(_, d)| *d);
            return Ok(SourceProgress::Idle(again));
        }
        let max = match self.limiter.as_mut() {
            None => self.batch_size,
            Some(bucket) => match bucket.try_take(now, self.batch_size as u64) {
                0 => return Ok(SourceProgress::Throttled(bucket.time_until(now, 1))),
                n => n as usize,
            },
        };
        // A wake from now on is for this poll or a later one: an `Idle` answer re-checks it.
        self.waker.clear();
        let (source, buf, fault) = (&mut self.source, &mut self.buf, &mut self.fault);
        let status = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let status = source.poll_batch(buf, max);
            if let Some(probe) = fault {
                probe.before_batch(buf.len());
            }
            status
        })) {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(TaskError::Source {
                    uid: self.info.uid.clone(),
                    subtask: self.info.subtask,
                    source,
                })
            }
            Err(payload) => {
                return Err(TaskError::Panic {
                    uid: self.info.uid.clone(),
                    subtask: self.info.subtask,
                    message: panic_message(&*payload),
                })
            }
        };
        let mark = match self.watermarks.as_mut() {
            Some(g) => g.on_source_batch(&self.buf, self.source.splits(), now),
            None => None,
        };
        if !self.buf.is_empty() {
            self.counters.add_out(self.buf.len());
            self.counters.last_read_us.store(
                crate::metrics::poll_clock_us(now),
                crate::sync::atomic::Ordering::Relaxed,
            );
            self.out.push(&mut self.buf)?;
        }
        if let Some(w) = mark {
            self.out.watermark(w)?;
        }
        Ok(match status {
            SourceStatus::More => SourceProgress::More,
            SourceStatus::Idle { until } => {
                // A watermark held back by the interval goes out now; idleness is said
                // once its timeout has passed (the source is looked at again by then).
                let mut until = until;
                if let Some(g) = self.watermarks.as_mut() {
                    let (w, left) = g.on_idle(now);
                    if let Some(w) = w {
                        self.out.watermark(w)?;
                    }
                    if let Some(left) = left {
                        until = Some(until.map_or(left, |u| u.min(left)));
                    }
                }
                SourceProgress::Idle(until)
            }
            SourceStatus::End => {
                // The end of input is the end of event time.
                self.out
                    .watermark(crate::time::Watermark::At(crate::time::EventTime::MAX))?;
                self.out.finish()?;
                self.ended = true;
                // An ended source holds no one in its alignment group back.
                self.align = None;
                SourceProgress::Ended
            }
        })
    }
    fn flush(&mut self) {
        self.out.flush()
    }
    fn woken(&self, waker: &std::task::Waker) -> bool {
        self.waker.register(waker)
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), crate::error::TaskError>> {
        self.out.poll_pending(cx)
    }
    fn set_rate(&mut self, now: std::time::Instant, rate: Option<f64>) {
        self.limiter = match rate {
            None => None,
            Some(r) if !(r.is_finite() && r > 0.0) => {
                tracing::warn!(uid = %self.info.uid, rate = r, "ignoring an invalid source rate");
                return;
            }
            Some(r) => {
                // Up to 100 ms of records at once, within one batch.
                let burst = ((r * 0.1) as u64).clamp(1, self.batch_size as u64);
                match self.limiter.as_mut() {
                    Some(b) if b.burst() == burst => {
                        let _ = b.set_rate(now, r);
                        return;
                    }
                    _ => crate::rate::TokenBucket::new(r, burst, now).ok(),
                }
            }
        };
    }
    fn output_usage(&self, usage: &mut crate::metrics::QueueUsage) {
        self.out.usage(usage)
    }
    fn control(&mut self, c: &mut crate::operator::Control<'_>) {
        let out = &mut self.out;
        c.here_or(&self.info.uid, |c| out.control(c))
    }
    fn checkpoint(
        &mut self,
        id: u64,
        w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), crate::error::TaskError> {
        let Some(position) = self.source.checkpoint_position(id) else {
            return Err(crate::error::TaskError::Checkpoint {
                uid: self.info.uid.clone(),
                subtask: self.info.subtask,
                message: "the source cannot be replayed (Source::position returns None)".into(),
            });
        };
        w.put(&self.info.uid, None, position);
        if self.ended {
            // Its channels have ended: downstream counts them as aligned.
            return Ok(());
        }
        self.out.barrier(id, w)
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), crate::error::TaskError> {
        if let Err(source) = self.source.notify_complete(id) {
            return Err(crate::error::TaskError::Source {
                uid: self.info.uid.clone(),
                subtask: self.info.subtask,
                source,
            });
        }
        self.out.notify_complete(id)
    }
}
