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

pub(crate) mod alignment;

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
    alignment: Option<alignment::Alignment>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            bound: self.bound,
            assigner: self.assigner.clone(),
            idleness: self.idleness,
            interval: self.interval,
            alignment: self.alignment.clone(),
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
            .field("alignment", &self.alignment)
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
            alignment: None,
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

    /// Keeps the sources of alignment group `group` together (Flink's
    /// `withWatermarkAlignment`): a source subtask whose watermark is more than `max_drift`
    /// ahead of the lowest in its group stops reading, and looks again every
    /// `update_interval`, until the others have caught up. Every source given the same group
    /// name (with the same drift) is in the group; an idle source (see
    /// [`with_idleness`](Self::with_idleness)) holds no one back. For a strategy given to
    /// [`Env::add_source_with_watermarks`](crate::Env::add_source_with_watermarks) (a
    /// strategy inside a stream cannot pause its source).
    ///
    /// Inside a subtask, a split (a Kafka partition) whose own watermark is more than
    /// `max_drift` ahead of the group's lowest is paused while the subtask's other splits
    /// read on, if the source can pause splits
    /// ([`Source::pause_splits`](crate::source::Source::pause_splits); the Kafka source can).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::time::WatermarkStrategy;
    /// let wm = WatermarkStrategy::<(u64, i64)>::for_bounded_out_of_orderness(Duration::from_secs(5))
    ///     .with_timestamp_assigner(|r: &(u64, i64)| r.1)
    ///     .with_watermark_alignment("clicks", Duration::from_secs(60), Duration::from_millis(100));
    /// # let _ = wm;
    /// ```
    pub fn with_watermark_alignment(
        mut self,
        group: &str,
        max_drift: Duration,
        update_interval: Duration,
    ) -> Self {
        self.alignment = Some(alignment::Alignment {
            group: group.to_owned(),
            max_drift,
            update_interval,
        });
        self
    }

    pub(crate) fn alignment(&self) -> Option<&alignment::Alignment> {
        self.alignment.as_ref()
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
            whole: SplitMark::new(Instant::now()),
            splits: None,
            emitted: EventTime::MIN,
            last_emit: None,
            idle: false,
        })
    }
}

/// What one split (or the whole subtask) has shown: its highest timestamp, when it last
/// had a record.
#[derive(Debug, Clone, Copy)]
struct SplitMark {
    max_seen: EventTime,
    last_record: Instant,
}

impl SplitMark {
    fn new(now: Instant) -> Self {
        SplitMark {
            max_seen: EventTime::MIN,
            last_record: now,
        }
    }
}

/// Where a generator stands: its watermark, or every split is idle, or it has no split open
/// (idle at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    At(EventTime),
    AllIdle,
    NoSplit,
}

/// Watermark generation in one subtask: the highest timestamp seen (per split, once the
/// source names its splits: [`Source::splits`](crate::source::Source::splits)), what was
/// emitted, when.
///
/// Per split, the subtask's watermark is the minimum over its splits that are not idle (a
/// split with no record yet holds it at its start until it is idle, as in Flink); every split
/// idle makes the subtask idle.
pub(crate) struct WatermarkGenerator<T> {
    assigner: Timestamps<T>,
    bound: i64,
    idleness: Option<Duration>,
    interval: Duration,
    /// The subtask as one split (no splits named).
    whole: SplitMark,
    /// The open splits, sorted by id, once the source names them.
    splits: Option<Vec<(u64, SplitMark)>>,
    emitted: EventTime,
    last_emit: Option<Instant>,
    /// `Idle` was said and no record came since.
    idle: bool,
}

impl<T> WatermarkGenerator<T> {
    /// Sees a batch (before it is pushed on); what to emit after it, if anything: the
    /// watermark if it advanced and the interval has passed, or the end of idleness.
    pub(crate) fn on_batch(&mut self, batch: &[T], now: Instant) -> Option<Watermark> {
        self.on_source_batch(batch, None, now)
    }

    /// [`on_batch`](Self::on_batch) for a source batch, with where its records came from if
    /// the source names its splits.
    pub(crate) fn on_source_batch(
        &mut self,
        batch: &[T],
        splits: Option<&Splits>,
        now: Instant,
    ) -> Option<Watermark> {
        match splits {
            Some(splits) => self.see_splits(batch, splits, now),
            None if batch.is_empty() => return None,
            None => {
                let max = batch.iter().map(|r| (self.assigner)(r)).max();
                let mark = &mut self.whole;
                mark.max_seen = mark.max_seen.max(max.unwrap_or(EventTime::MIN));
                mark.last_record = now;
            }
        }
        let Standing::At(wm) = self.standing(now) else {
            return None;
        };
        let was_idle = !batch.is_empty() && std::mem::replace(&mut self.idle, false);
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

    /// Follows the source's open splits and credits each run of the batch to its split.
    fn see_splits(&mut self, batch: &[T], named: &Splits, now: Instant) {
        let splits = self.splits.get_or_insert_with(Vec::new);
        let open = named.open();
        splits.retain(|(id, _)| open.binary_search(id).is_ok());
        for &id in open {
            if let Err(at) = splits.binary_search_by_key(&id, |(s, _)| *s) {
                splits.insert(at, (id, SplitMark::new(now)));
            }
        }
        let mut from = 0;
        for &(id, n) in named.runs() {
            let to = (from + n).min(batch.len());
            let run = &batch[from..to];
            from = to;
            // A run from a split that has ended since counts for nothing.
            let Ok(at) = splits.binary_search_by_key(&id, |(s, _)| *s) else {
                continue;
            };
            let mark = &mut splits[at].1;
            if let Some(max) = run.iter().map(|r| (self.assigner)(r)).max() {
                mark.max_seen = mark.max_seen.max(max);
                mark.last_record = now;
            }
        }
    }

    fn is_idle(&self, mark: &SplitMark, now: Instant) -> bool {
        self.idleness
            .is_some_and(|d| now.saturating_duration_since(mark.last_record) >= d)
    }

    /// The watermark now: the minimum over the splits that are not idle.
    fn standing(&self, now: Instant) -> Standing {
        match &self.splits {
            None if self.is_idle(&self.whole, now) => Standing::AllIdle,
            None => Standing::At(self.whole.max_seen.saturating_sub(self.bound)),
            Some(splits) if splits.is_empty() => Standing::NoSplit,
            Some(splits) => splits
                .iter()
                .filter(|(_, m)| !self.is_idle(m, now))
                .map(|(_, m)| m.max_seen.saturating_sub(self.bound))
                .min()
                .map_or(Standing::AllIdle, Standing::At),
        }
    }

    /// The subtask's watermark now (`None`: idle, or no split open): what it publishes to
    /// its watermark alignment group.
    pub(crate) fn current(&self, now: Instant) -> Option<EventTime> {
        match self.standing(now) {
            Standing::At(w) => Some(w),
            Standing::AllIdle | Standing::NoSplit => None,
        }
    }

    /// The source was paused (watermark alignment), not silent: none of its splits counts
    /// the pause towards its idleness.
    pub(crate) fn paused_at(&mut self, now: Instant) {
        let busy = |m: &mut SplitMark| {
            if now.saturating_duration_since(m.last_record) < self.idleness.unwrap_or(Duration::MAX)
            {
                m.last_record = now;
            }
        };
        busy(&mut self.whole);
        self.splits.iter_mut().flatten().for_each(|(_, m)| busy(m));
    }

    /// The open splits whose own watermark is beyond `limit` (watermark alignment pauses
    /// them), into `out` (cleared first), in increasing order. None while the source names no
    /// splits.
    pub(crate) fn splits_beyond(&self, limit: EventTime, out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            self.splits
                .iter()
                .flatten()
                .filter(|(_, m)| m.max_seen.saturating_sub(self.bound) > limit)
                .map(|(id, _)| *id),
        );
    }

    /// The splits `paused` (sorted) were paused by watermark alignment, not silent: their
    /// pause does not count towards their idleness.
    pub(crate) fn splits_paused_at(&mut self, now: Instant, paused: &[u64]) {
        let idleness = self.idleness.unwrap_or(Duration::MAX);
        for (id, m) in self.splits.iter_mut().flatten() {
            if paused.binary_search(id).is_ok()
                && now.saturating_duration_since(m.last_record) < idleness
            {
                m.last_record = now;
            }
        }
    }

    /// How long until the next split (or the subtask) that is not idle becomes idle.
    fn until_next_idle(&self, now: Instant) -> Option<Duration> {
        let d = self.idleness?;
        let left = |m: &SplitMark| d.saturating_sub(now.saturating_duration_since(m.last_record));
        let left = match &self.splits {
            None => Some(left(&self.whole)),
            Some(splits) => splits
                .iter()
                .filter(|(_, m)| !self.is_idle(m, now))
                .map(|(_, m)| left(m))
                .min(),
        };
        left.map(|l| l.max(Duration::from_millis(1)))
    }

    /// The watermark held back by the interval, if any (an operator inside a stream emits it
    /// when its subtask goes idle, so a pause in the input does not hold it back).
    pub(crate) fn owed(&mut self, now: Instant) -> Option<Watermark> {
        let owed = self.whole.max_seen.saturating_sub(self.bound);
        (owed > self.emitted).then(|| {
            self.emitted = owed;
            self.last_emit = Some(now);
            Watermark::At(owed)
        })
    }

    /// The source has nothing now: the watermark it owes (one held back by the interval, or
    /// one a split's idleness let advance), or `Idle` once every split (the subtask, without
    /// splits) has had no record for the idleness timeout; and how long until the next
    /// timeout, if one is still ahead (the source must look again by then).
    pub(crate) fn on_idle(&mut self, now: Instant) -> (Option<Watermark>, Option<Duration>) {
        match self.standing(now) {
            Standing::At(owed) if owed > self.emitted => {
                self.emitted = owed;
                self.last_emit = Some(now);
                (Some(Watermark::At(owed)), self.until_next_idle(now))
            }
            Standing::At(_) => (None, self.until_next_idle(now)),
            // A subtask with no split to read is idle at once (as Flink's source readers
            // without splits are), whatever the timeout: nothing will come from it.
            Standing::AllIdle | Standing::NoSplit if !self.idle => {
                self.idle = true;
                (Some(Watermark::Idle), None)
            }
            Standing::AllIdle | Standing::NoSplit => (None, None),
        }
    }
}

/// Where a source subtask's records come from, split by split (a Kafka partition, a file),
/// for watermarks generated per split: with a [`WatermarkStrategy`],
/// the subtask's watermark is then the minimum over its open splits that are not idle (Flink's
/// per-split watermarks), so a split that lags behind the others does not see its records
/// dropped as late, and a silent split holds the watermark back only until its idleness
/// timeout.
///
/// A source keeps one and hands it out in [`Source::splits`](crate::source::Source::splits): it names its splits when it
/// opens, starts each batch with [`start_batch`](Self::start_batch), says where each record
/// it appends came from with [`record_from`](Self::record_from), and [`end`](Self::end)s a
/// split it has read to its end.
///
/// ```
/// use weir::source::Splits;
///
/// let mut splits = Splits::new([0, 2]);
/// splits.start_batch();
/// for p in [0, 0, 2, 0] {
///     splits.record_from(p);
/// }
/// assert_eq!(splits.runs(), &[(0, 2), (2, 1), (0, 1)]);
/// splits.end(2);
/// assert_eq!(splits.open(), &[0]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Splits {
    open: Vec<u64>,
    runs: Vec<(u64, usize)>,
}

impl Splits {
    /// The splits a subtask reads: each holds its watermark back until it has records or is
    /// idle.
    pub fn new(splits: impl IntoIterator<Item = u64>) -> Self {
        let mut open: Vec<u64> = splits.into_iter().collect();
        open.sort_unstable();
        open.dedup();
        Splits {
            open,
            runs: Vec::new(),
        }
    }

    /// A new batch begins: forgets where the last one's records came from.
    pub fn start_batch(&mut self) {
        self.runs.clear();
    }

    /// The next record appended to the batch came from `split`.
    pub fn record_from(&mut self, split: u64) {
        match self.runs.last_mut() {
            Some((s, n)) if *s == split => *n += 1,
            _ => self.runs.push((split, 1)),
        }
    }

    /// `split` is read from now on (a partition found while the source runs). Its watermark
    /// holds the subtask's back from now, as a new split's does.
    pub fn add(&mut self, split: u64) {
        if let Err(at) = self.open.binary_search(&split) {
            self.open.insert(at, split);
        }
    }

    /// `split` has ended: it no longer holds the watermark back.
    pub fn end(&mut self, split: u64) {
        self.open.retain(|s| *s != split);
    }

    /// The open splits, in increasing order.
    pub fn open(&self) -> &[u64] {
        &self.open
    }

    /// The batch's records, in order, as runs of `(split, count)`.
    pub fn runs(&self) -> &[(u64, usize)] {
        &self.runs
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

    /// The last watermark passed on, if one was (what the operator behind it has seen).
    pub(crate) fn said(&self) -> Option<EventTime> {
        (self.emitted > EventTime::MIN).then_some(self.emitted)
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

    /// A batch whose records came from the given splits, in runs.
    fn from_splits(splits: &mut Splits, of: &[(u64, i64)]) -> Vec<i64> {
        splits.start_batch();
        of.iter()
            .map(|&(split, ts)| {
                splits.record_from(split);
                ts
            })
            .collect()
    }

    #[test]
    fn per_split_the_watermark_is_the_minimum_of_the_splits_that_are_not_idle() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut g = generator(0, 0);
        let mut s = Splits::new([0, 1]);
        let b = from_splits(&mut s, &[(0, 10), (0, 20)]);
        assert_eq!(
            g.on_source_batch(&b, Some(&s), t0),
            None,
            "split 1 holds it"
        );
        let b = from_splits(&mut s, &[(1, 5)]);
        assert_eq!(
            g.on_source_batch(&b, Some(&s), ms(10)),
            Some(Watermark::At(5))
        );
        let b = from_splits(&mut s, &[(0, 30), (1, 8), (0, 31)]);
        assert_eq!(
            g.on_source_batch(&b, Some(&s), ms(20)),
            Some(Watermark::At(8)),
            "split 1 lags"
        );
        // Split 1 has had no record for the idleness timeout: split 0 alone counts.
        let b = from_splits(&mut s, &[(0, 40)]);
        assert_eq!(
            g.on_source_batch(&b, Some(&s), ms(520)),
            Some(Watermark::At(40))
        );
        // Nothing to read: how long until split 0 is idle too, then the subtask is.
        let empty = from_splits(&mut s, &[]);
        assert_eq!(g.on_source_batch(&empty, Some(&s), ms(600)), None);
        assert_eq!(g.on_idle(ms(600)), (None, Some(Duration::from_millis(420))));
        assert_eq!(g.on_idle(ms(1_020)), (Some(Watermark::Idle), None));
        assert_eq!(g.on_idle(ms(1_100)), (None, None), "said once");
        // Split 1 comes back behind: the watermark never goes back.
        let b = from_splits(&mut s, &[(1, 9)]);
        assert_eq!(g.on_source_batch(&b, Some(&s), ms(1_200)), None);
        let b = from_splits(&mut s, &[(1, 45)]);
        assert_eq!(
            g.on_source_batch(&b, Some(&s), ms(1_210)),
            Some(Watermark::At(45))
        );
    }

    #[test]
    fn an_ended_split_no_longer_holds_the_watermark() {
        let t0 = Instant::now();
        let mut g = generator(0, 0);
        let mut s = Splits::new([0, 1]);
        let b = from_splits(&mut s, &[(0, 50)]);
        assert_eq!(g.on_source_batch(&b, Some(&s), t0), None);
        s.end(1);
        let empty = from_splits(&mut s, &[]);
        assert_eq!(
            g.on_source_batch(&empty, Some(&s), t0),
            Some(Watermark::At(50))
        );
        // Records credited to an ended split move nothing.
        let b = from_splits(&mut s, &[(1, 70)]);
        assert_eq!(g.on_source_batch(&b, Some(&s), t0), None);
        s.end(0);
        let empty = from_splits(&mut s, &[]);
        assert_eq!(g.on_source_batch(&empty, Some(&s), t0), None);
        assert_eq!(
            g.on_idle(t0),
            (Some(Watermark::Idle), None),
            "no split left: idle at once"
        );
        assert_eq!(g.on_idle(t0), (None, None), "said once");
    }
}
