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

    /// Watermark alignment by split (Flink's `pauseOrResumeSplits`): stop reading the splits
    /// in `paused` (ids of [`Splits`], sorted) and read every other open split again. Called
    /// between batches when the set changes. A record of a paused split already in hand may
    /// still come in the next batch; none after it until the split is resumed, and a resumed
    /// split goes on from where it stopped.
    ///
    /// Returns whether the source pauses splits: `false` (the default) leaves alignment to
    /// pause the whole subtask only, when its lowest split is ahead; a split ahead of the
    /// group inside a subtask whose other splits lag then reads on (a warning says so once).
    ///
    /// ```
    /// use weir::source::{Source, SourceStatus, Splits};
    /// use weir::SourceError;
    ///
    /// /// Two logs of `(split, timestamp)` records, read in turn unless paused.
    /// struct TwoLogs { logs: [Vec<i64>; 2], at: [usize; 2], splits: Splits, paused: Vec<u64> }
    ///
    /// impl Source<(u64, i64)> for TwoLogs {
    ///     fn poll_batch(&mut self, out: &mut Vec<(u64, i64)>, max: usize) -> Result<SourceStatus, SourceError> {
    ///         self.splits.start_batch();
    ///         for s in 0..2 {
    ///             if self.paused.contains(&(s as u64)) {
    ///                 continue;
    ///             }
    ///             while out.len() < max && self.at[s] < self.logs[s].len() {
    ///                 out.push((s as u64, self.logs[s][self.at[s]]));
    ///                 self.splits.record_from(s as u64);
    ///                 self.at[s] += 1;
    ///             }
    ///         }
    ///         let done = (0..2).all(|s| self.at[s] == self.logs[s].len());
    ///         Ok(if done {
    ///             SourceStatus::End
    ///         } else if out.is_empty() {
    ///             // Only paused splits have records: the driver looks again (and resumes
    ///             // them) every alignment update interval.
    ///             SourceStatus::Idle { until: None }
    ///         } else {
    ///             SourceStatus::More
    ///         })
    ///     }
    ///     fn splits(&self) -> Option<&Splits> {
    ///         Some(&self.splits)
    ///     }
    ///     fn pause_splits(&mut self, paused: &[u64]) -> Result<bool, SourceError> {
    ///         self.paused = paused.to_vec();
    ///         Ok(true)
    ///     }
    /// }
    /// ```
    fn pause_splits(&mut self, _paused: &[u64]) -> Result<bool, SourceError> {
        Ok(false)
    }
}

/// A source subtask's place in a watermark alignment group, and the splits it paused.
pub(crate) struct Aligned {
    member: crate::time::alignment::Member,
    /// How often a paused subtask (or one with paused splits) looks again.
    every: Duration,
    /// The splits the source was told to pause, sorted.
    paused: Vec<u64>,
    scratch: Vec<u64>,
    /// The source pauses splits (until it said it cannot).
    by_split: bool,
}

impl Aligned {
    pub(crate) fn new(member: crate::time::alignment::Member, every: Duration) -> Self {
        Aligned {
            member,
            every,
            paused: Vec::new(),
            scratch: Vec::new(),
            by_split: true,
        }
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
    /// Its place in a watermark alignment group, and the splits it paused.
    pub(crate) align: Option<Aligned>,
}

impl<T: 'static> SourceDriver<T> {
    /// Whether watermark alignment lets the source read now (publishing its watermark); if
    /// it does, the splits beyond the group's limit are paused (those back within it
    /// resumed) where the source can pause splits.
    fn may_read(&mut self, now: std::time::Instant) -> Result<bool, crate::error::TaskError> {
        let (Some(a), Some(g)) = (self.align.as_mut(), self.watermarks.as_mut()) else {
            return Ok(true);
        };
        if !a.member.may_read(g.current(now)) {
            g.paused_at(now);
            return Ok(false);
        }
        if !a.by_split || self.source.splits().is_none() {
            return Ok(true);
        }
        match a.member.limit() {
            Some(limit) => g.splits_beyond(limit, &mut a.scratch),
            None => a.scratch.clear(),
        }
        if a.scratch != a.paused {
            match self.source.pause_splits(&a.scratch) {
                Ok(true) => std::mem::swap(&mut a.paused, &mut a.scratch),
                Ok(false) => {
                    a.by_split = false;
                    a.paused.clear();
                    tracing::warn!(
                        uid = %self.info.uid,
                        subtask = self.info.subtask,
                        "watermark alignment: the source cannot pause splits \
                         (Source::pause_splits); only the whole subtask is paused, when its \
                         lowest split is ahead"
                    );
                }
                Err(source) => {
                    return Err(crate::error::TaskError::Source {
                        uid: self.info.uid.clone(),
                        subtask: self.info.subtask,
                        source,
                    })
                }
            }
        }
        if !a.paused.is_empty() {
            g.splits_paused_at(now, &a.paused);
        }
        Ok(true)
    }

    /// How soon a subtask with paused splits looks again (they may be resumed by then).
    fn split_recheck(&self) -> Option<Duration> {
        self.align
            .as_ref()
            .filter(|a| !a.paused.is_empty())
            .map(|a| a.every)
    }
}

impl<T: Send + 'static> crate::operator::step::SourceStep for SourceDriver<T> {
    fn step(
        &mut self,
        now: std::time::Instant,
    ) -> Result<crate::operator::step::SourceProgress, crate::error::TaskError> {
        use crate::error::{panic_message, TaskError};
        use crate::operator::step::SourceProgress;
        if !self.may_read(now)? {
            let again = self.align.as_ref().map(|a| a.every);
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
                if let Some(again) = self.split_recheck() {
                    until = Some(until.map_or(again, |u| u.min(again)));
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
