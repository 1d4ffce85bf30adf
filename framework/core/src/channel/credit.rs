//! A channel's credit: how it sizes its window ([`Credit`], fixed or adaptive), and the
//! receiver's measure of its own pace that adapts the window and the batch limit (`Window`).
//! See the parent module's doc on adaptive credit and batch size. Not the queue the window
//! bounds, nor who is woken when credit returns (the parent module).

use std::time::{Duration, Instant};

/// How a channel sizes its window, in events: fixed, or adapted to a queueing-delay target
/// (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Credit {
    /// The window, or its floor when adaptive (at least 1).
    pub(crate) min: usize,
    /// The window's ceiling when adaptive (at least `min`).
    pub(crate) max: usize,
    /// The queueing delay the window is sized for; `None`: fixed at `min`.
    pub(crate) target: Option<Duration>,
}

impl Credit {
    /// A fixed window of `n` events.
    pub(crate) fn fixed(n: usize) -> Self {
        let n = n.max(1);
        Credit {
            min: n,
            max: n,
            target: None,
        }
    }

    /// The job's channel credit.
    pub(crate) fn of(cfg: &crate::EnvConfig) -> Self {
        match cfg.latency_target {
            Some(target) => Credit {
                min: cfg.channel_capacity.max(1),
                max: cfg.max_channel_capacity.max(cfg.channel_capacity).max(1),
                target: Some(target),
            },
            None => Credit::fixed(cfg.channel_capacity),
        }
    }

    /// This credit with a floor and ceiling of at least `n` (a channel that starts with `n`
    /// events in it).
    pub(super) fn at_least(self, n: usize) -> Self {
        Credit {
            min: self.min.max(n),
            max: self.max.max(n),
            target: self.target,
        }
    }
}

impl From<usize> for Credit {
    fn from(n: usize) -> Self {
        Credit::fixed(n)
    }
}

/// The adaptive part of a channel's window, kept by the receiver under the queue's lock.
pub(super) struct Window {
    /// Events the channel takes now.
    pub(super) now: usize,
    credit: Credit,
    /// When the receiver last took an event and left others behind it (it had work waiting):
    /// the next take's interval is one service time.
    busy_since: Option<Instant>,
    /// Moving average of the service time per batch, ns (0: no measure yet).
    service_ns: u64,
    /// Records in the batch taken at `busy_since`.
    busy_records: usize,
    /// Moving average of the service time per record, ns (0: no measure yet).
    record_ns: u64,
}

impl Window {
    pub(super) fn new(credit: Credit) -> Self {
        Window {
            now: credit.min,
            credit,
            busy_since: None,
            service_ns: 0,
            busy_records: 0,
            record_ns: 0,
        }
    }

    /// The receiver took a batch of `records` and `left` events wait behind it. Returns the
    /// batch limit the senders should keep to (records; `NO_BATCH_LIMIT` while every batch
    /// fits), when it was measured anew.
    #[inline]
    pub(super) fn took_batch(&mut self, records: usize, left: usize) -> Option<u64> {
        let target = self.credit.target?;
        let now = Instant::now();
        let mut limit = None;
        if let Some(since) = self.busy_since {
            let dt = now.saturating_duration_since(since).as_nanos() as u64;
            // An average over about eight batches: quick to follow a change of rate, steady
            // over one slow batch.
            self.service_ns = ewma(self.service_ns, dt);
            let fits = target.as_nanos() as u64 / self.service_ns.max(1);
            self.now = (fits as usize).clamp(self.credit.min, self.credit.max);
            if self.busy_records > 0 {
                self.record_ns = ewma(self.record_ns, dt / self.busy_records as u64);
                limit = Some(batch_limit(target, self.credit.min, self.record_ns));
            }
        }
        self.busy_since = (left > 0).then_some(now);
        self.busy_records = records;
        limit
    }
}

/// A moving average over about eight samples (`avg` 0: none yet).
#[inline]
pub(crate) fn ewma(avg: u64, sample: u64) -> u64 {
    if avg == 0 {
        sample
    } else {
        (avg * 7 + sample) / 8
    }
}

/// No limit on the records of a batch beyond the job's batch size.
pub(crate) const NO_BATCH_LIMIT: u64 = u64::MAX;

/// The records per batch that keep the smallest window (`floor` batches) within `target` at
/// `record_ns` per record: a receiver so slow that even the floor's batches of the job's batch
/// size would wait longer than the target gets smaller batches (at least one record).
#[inline]
fn batch_limit(target: Duration, floor: usize, record_ns: u64) -> u64 {
    let per_batch = target.as_nanos() as u64 / floor.max(1) as u64;
    (per_batch / record_ns.max(1)).max(1)
}
