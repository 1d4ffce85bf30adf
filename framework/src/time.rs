//! Event time: timestamps, watermarks and how sources generate them ([`WatermarkStrategy`]).
//!
//! A record's event time is a function of the record ([`WatermarkStrategy::with_timestamp_assigner`]),
//! in milliseconds since the Unix epoch ([`EventTime`]), so records carry no extra field and
//! a batch stays a plain `Vec<T>`. A watermark `w` says that no record with a timestamp at or
//! below `w` is expected any more; it travels in band, in order with the records and the
//! checkpoint barriers, on every channel. A subtask's input watermark is the minimum over its
//! input channels that are not idle (an ended channel no longer holds it back); output
//! watermarks never go back. An idle source (no record for the idleness timeout) says so
//! downstream, and its channels stop holding the watermark back until their next record.
//!
//! This module owns the vocabulary and the generator a source subtask runs; the channels carry
//! watermarks (`channel`), gates merge them (`gate`), operators react (`operator::window`).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Event time: milliseconds since the Unix epoch (like `ts_ms` fields).
pub type EventTime = i64;

/// A subtask input's watermark, as its metrics show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InputWatermark {
    /// The watermark passed on (`None`: none yet).
    pub(crate) at: Option<EventTime>,
    /// Every open channel is idle.
    pub(crate) idle: bool,
    /// The channel (upstream subtask) with the lowest watermark among the active ones.
    pub(crate) held_by: Option<usize>,
    /// Channels not ended.
    pub(crate) open: usize,
}

/// What an in-band watermark element says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Watermark {
    /// No record at or below this time is expected any more.
    At(EventTime),
    /// The sender is idle: do not wait for it until its next record or watermark.
    Idle,
}

/// The timestamp of a record.
pub(crate) type Timestamps<T> = Arc<dyn Fn(&T) -> EventTime + Send + Sync>;

/// How a stream's records get their event time and how watermarks follow them (Flink's
/// `WatermarkStrategy`): bounded out-of-orderness (the watermark is the highest timestamp
/// seen minus the bound), the interval at which watermarks are emitted, and the idleness
/// timeout after which a silent source stops holding the watermark back.
///
/// ```
/// use std::time::Duration;
/// use weir::time::WatermarkStrategy;
///
/// #[derive(Clone)]
/// struct Bid { ts_ms: i64, price: u64 }
///
/// let wm = WatermarkStrategy::<Bid>::for_bounded_out_of_orderness(Duration::from_secs(4))
///     .with_timestamp_assigner(|b: &Bid| b.ts_ms)
///     .with_idleness(Duration::from_millis(500))
///     .with_watermark_interval(Duration::from_millis(200));
/// assert_eq!(wm.out_of_orderness(), Duration::from_secs(4));
/// assert_eq!(wm.timestamp_of(&Bid { ts_ms: 7, price: 1 }), Some(7));
/// ```
pub struct WatermarkStrategy<T> {
    bound: Duration,
    assigner: Option<Timestamps<T>>,
    idleness: Option<Duration>,
    interval: Duration,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            bound: self.bound,
            assigner: self.assigner.clone(),
            idleness: self.idleness,
            interval: self.interval,
        }
    }
}

impl<T> std::fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("out_of_orderness", &self.bound)
            .field("has_timestamp_assigner", &self.assigner.is_some())
            .field("idleness", &self.idleness)
            .field("watermark_interval", &self.interval)
            .finish()
    }
}

/// Flink's `pipeline.auto-watermark-interval` default.
pub const DEFAULT_WATERMARK_INTERVAL: Duration = Duration::from_millis(200);

impl<T> WatermarkStrategy<T> {
    /// Watermarks trail the highest timestamp seen by `bound`: a record up to `bound` older
    /// than the newest one is still on time.
    pub fn for_bounded_out_of_orderness(bound: Duration) -> Self {
        WatermarkStrategy {
            bound,
            assigner: None,
            idleness: None,
            interval: DEFAULT_WATERMARK_INTERVAL,
        }
    }

    /// Timestamps never go back: the watermark is the highest timestamp seen.
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO)
    }

    /// How each record's event time is read.
    pub fn with_timestamp_assigner(
        mut self,
        f: impl Fn(&T) -> EventTime + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(f));
        self
    }

    /// A source subtask that has read nothing for this long is idle until its next record.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// Watermarks are emitted at most this often (`Duration::ZERO`: after every batch).
    pub fn with_watermark_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The out-of-orderness bound.
    pub fn out_of_orderness(&self) -> Duration {
        self.bound
    }

    /// The timestamp `record` gets, if a timestamp assigner is set.
    pub fn timestamp_of(&self, record: &T) -> Option<EventTime> {
        self.assigner.as_ref().map(|f| f(record))
    }

    pub(crate) fn assigner(&self) -> Option<&Timestamps<T>> {
        self.assigner.as_ref()
    }

    /// The generator one subtask runs (`None` without a timestamp assigner).
    pub(crate) fn generator(&self) -> Option<WatermarkGenerator<T>> {
        Some(WatermarkGenerator {
            assigner: self.assigner.clone()?,
            bound: i64::try_from(self.bound.as_millis()).unwrap_or(i64::MAX),
            idleness: self.idleness,
            interval: self.interval,
            max_seen: EventTime::MIN,
            emitted: EventTime::MIN,
            last_emit: None,
            last_record: Instant::now(),
            idle: false,
        })
    }
}

/// Watermark generation in one subtask: the highest timestamp seen, what was emitted, when.
pub(crate) struct WatermarkGenerator<T> {
    assigner: Timestamps<T>,
    bound: i64,
    idleness: Option<Duration>,
    interval: Duration,
    max_seen: EventTime,
    emitted: EventTime,
    last_emit: Option<Instant>,
    last_record: Instant,
    idle: bool,
}

impl<T> WatermarkGenerator<T> {
    /// Sees a batch (before it is pushed on); what to emit after it, if anything: the
    /// watermark if it advanced and the interval has passed, or the end of idleness.
    pub(crate) fn on_batch(&mut self, batch: &[T], now: Instant) -> Option<Watermark> {
        if batch.is_empty() {
            return None;
        }
        for r in batch {
            let ts = (self.assigner)(r);
            if ts > self.max_seen {
                self.max_seen = ts;
            }
        }
        self.last_record = now;
        let was_idle = std::mem::replace(&mut self.idle, false);
        let wm = self.max_seen.saturating_sub(self.bound);
        let due = self
            .last_emit
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if wm > self.emitted && (due || was_idle) {
            self.emitted = wm;
            self.last_emit = Some(now);
            return Some(Watermark::At(wm));
        }
        None
    }

    /// The watermark held back by the interval, if any (an operator inside a stream emits it
    /// when its subtask goes idle, so a pause in the input does not hold it back).
    pub(crate) fn owed(&mut self, now: Instant) -> Option<Watermark> {
        let owed = self.max_seen.saturating_sub(self.bound);
        (owed > self.emitted).then(|| {
            self.emitted = owed;
            self.last_emit = Some(now);
            Watermark::At(owed)
        })
    }

    /// The source has nothing now: the watermark it owes (one held back by the interval),
    /// or `Idle` once the idleness timeout has passed since the last record; and how long
    /// until the timeout, if it is still ahead (the source must look again by then).
    pub(crate) fn on_idle(&mut self, now: Instant) -> (Option<Watermark>, Option<Duration>) {
        let owed = self.max_seen.saturating_sub(self.bound);
        if owed > self.emitted {
            self.emitted = owed;
            self.last_emit = Some(now);
            let left = self.idleness.map(|d| {
                d.saturating_sub(now.saturating_duration_since(self.last_record))
                    .max(Duration::from_millis(1))
            });
            return (Some(Watermark::At(owed)), left);
        }
        match self.idleness {
            Some(d) if !self.idle => {
                let since = now.saturating_duration_since(self.last_record);
                if since >= d {
                    self.idle = true;
                    (Some(Watermark::Idle), None)
                } else {
                    (None, Some(d - since))
                }
            }
            _ => (None, None),
        }
    }
}

/// The watermark of several inputs (the channels of a gate, the two sides of a two-input
/// operator): the minimum over the inputs that are neither idle nor ended; `MAX` once all
/// ended; `Idle` while every input left is idle. What it says never goes back.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct WatermarkMerge {
    inputs: Vec<InputMark>,
    /// The last watermark said (`MIN`: none yet).
    emitted: EventTime,
    /// `Idle` was said and nothing since.
    said_idle: bool,
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct InputMark {
    at: EventTime,
    idle: bool,
    ended: bool,
}

impl WatermarkMerge {
    pub(crate) fn new(inputs: usize) -> Self {
        WatermarkMerge {
            inputs: vec![
                InputMark {
                    at: EventTime::MIN,
                    idle: false,
                    ended: false,
                };
                inputs
            ],
            emitted: EventTime::MIN,
            said_idle: false,
        }
    }

    /// How many inputs it merges.
    pub(crate) fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Input `i` delivered a record: it is active again.
    #[inline]
    pub(crate) fn activate(&mut self, i: usize) {
        if self.inputs[i].idle {
            self.inputs[i].idle = false;
            self.said_idle = false;
        }
    }

    /// Input `i` said `w`; what to pass on, if anything.
    pub(crate) fn update(&mut self, i: usize, w: Watermark) -> Option<Watermark> {
        let m = &mut self.inputs[i];
        match w {
            Watermark::At(t) => {
                m.idle = false;
                if t > m.at {
                    m.at = t;
                }
            }
            Watermark::Idle => m.idle = true,
        }
        self.combined()
    }

    /// Input `i` ended; what to pass on (the end of the last input gives `MAX`).
    pub(crate) fn end(&mut self, i: usize) -> Option<Watermark> {
        self.inputs[i].ended = true;
        self.combined()
    }

    /// What a subtask's metrics show: the watermark passed on (`None`: none yet), whether
    /// every open input is idle, and the active input with the lowest watermark (the one
    /// holding it back), if any.
    pub(crate) fn reading(&self) -> InputWatermark {
        let mut held_by = None::<(usize, EventTime)>;
        let mut open = 0;
        for (i, m) in self.inputs.iter().enumerate() {
            if m.ended {
                continue;
            }
            open += 1;
            if !m.idle && held_by.is_none_or(|(_, at)| m.at < at) {
                held_by = Some((i, m.at));
            }
        }
        InputWatermark {
            at: (self.emitted > EventTime::MIN).then_some(self.emitted),
            idle: open > 0 && held_by.is_none(),
            held_by: held_by.map(|(i, _)| i),
            open,
        }
    }

    fn combined(&mut self) -> Option<Watermark> {
        let mut any_open = false;
        let mut min = None::<EventTime>;
        for m in &self.inputs {
            if m.ended {
                continue;
            }
            any_open = true;
            if !m.idle {
                min = Some(min.map_or(m.at, |x| x.min(m.at)));
            }
        }
        let w = match (any_open, min) {
            (false, _) => EventTime::MAX,
            (true, Some(w)) => w,
            (true, None) => {
                if self.said_idle {
                    return None;
                }
                self.said_idle = true;
                return Some(Watermark::Idle);
            }
        };
        if w > self.emitted {
            self.emitted = w;
            self.said_idle = false;
            return Some(Watermark::At(w));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(bound_ms: u64, interval_ms: u64) -> WatermarkGenerator<i64> {
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(bound_ms))
            .with_timestamp_assigner(|t: &i64| *t)
            .with_watermark_interval(Duration::from_millis(interval_ms))
            .with_idleness(Duration::from_millis(500))
            .generator()
            .expect("an assigner")
    }

    #[test]
    fn merged_inputs_take_the_minimum_of_the_active_ones() {
        let mut m = WatermarkMerge::new(2);
        assert_eq!(
            m.update(0, Watermark::At(10)),
            None,
            "input 1 holds it back"
        );
        assert_eq!(m.update(1, Watermark::At(5)), Some(Watermark::At(5)));
        assert_eq!(m.update(1, Watermark::Idle), Some(Watermark::At(10)));
        assert_eq!(m.update(0, Watermark::Idle), Some(Watermark::Idle));
        assert_eq!(m.update(0, Watermark::Idle), None, "said once");
        m.activate(1);
        assert_eq!(m.update(1, Watermark::At(7)), None, "never back below 10");
        assert_eq!(m.update(1, Watermark::At(12)), Some(Watermark::At(12)));
        assert_eq!(
            m.end(1),
            Some(Watermark::Idle),
            "only an idle input is left"
        );
        assert_eq!(m.end(0), Some(Watermark::At(EventTime::MAX)));
    }

    #[test]
    fn the_watermark_trails_the_highest_timestamp_and_never_goes_back() {
        let t0 = Instant::now();
        let mut g = generator(4_000, 0);
        assert_eq!(g.on_batch(&[10_000, 9_000], t0), Some(Watermark::At(6_000)));
        assert_eq!(
            g.on_batch(&[8_000], t0),
            None,
            "an older record moves nothing"
        );
        assert_eq!(g.on_batch(&[12_000], t0), Some(Watermark::At(8_000)));
    }

    #[test]
    fn the_interval_holds_watermarks_back_and_idleness_owes_them() {
        let t0 = Instant::now();
        let mut g = generator(0, 200);
        assert_eq!(g.on_batch(&[1], t0), Some(Watermark::At(1)));
        assert_eq!(g.on_batch(&[5], t0 + Duration::from_millis(10)), None);
        // Idle: the held-back watermark goes out first.
        let (w, left) = g.on_idle(t0 + Duration::from_millis(20));
        assert_eq!(w, Some(Watermark::At(5)));
        assert!(left.is_some());
        let (w, left) = g.on_idle(t0 + Duration::from_millis(100));
        assert_eq!(w, None);
        assert_eq!(left, Some(Duration::from_millis(410)));
        let (w, _) = g.on_idle(t0 + Duration::from_millis(510));
        assert_eq!(w, Some(Watermark::Idle));
        assert_eq!(g.on_idle(t0 + Duration::from_millis(900)), (None, None));
        // A record ends idleness: the watermark goes out at once.
        assert_eq!(
            g.on_batch(&[9], t0 + Duration::from_millis(901)),
            Some(Watermark::At(9))
        );
    }
}
