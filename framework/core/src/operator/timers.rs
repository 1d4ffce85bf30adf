//! Timers of keyed process functions: one per (key, time, domain), fired in time order,
//! kept with the key's state in checkpoints.
//!
//! An event-time timer fires once the operator's input watermark reaches its time; a
//! processing-time timer once the wall clock (ms since the epoch) does. A large run of due
//! timers (a "timer storm") is fired a budget at a time: between two runs the subtask serves
//! its system lane and takes one unit of input, so a checkpoint barrier waits for one run, not
//! for the storm; the output watermark advances as the timers before it have fired, and the
//! input watermark is forwarded whole once none at or below it is left.
//!
//! This module owns the timer queues, [`KeyedContext`] and the checkpointed form of one key's
//! entry; the keyed operator that calls them is `operator::keyed`.

use std::collections::{BTreeMap, HashSet};
use std::pin::Pin;
use std::task::Context;

use rustc_hash::FxBuildHasher;

use crate::time::EventTime;

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimeDomain {
    /// The input watermark: fires when the watermark reaches the timer's time.
    EventTime,
    /// The wall clock, in ms since the Unix epoch.
    ProcessingTime,
}

/// The wall clock in ms since the Unix epoch (processing time).
pub(crate) fn now_ms() -> EventTime {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as EventTime)
        .unwrap_or(0)
}

/// The watermark an operator can send on: its input's `watermark`, held below `earliest` (the
/// first time with work still to fire) if that is at or before it; `None` if it would not
/// pass `forwarded`, which it advances.
pub(crate) fn advance_forwarded(
    earliest: Option<EventTime>,
    watermark: EventTime,
    forwarded: &mut EventTime,
) -> Option<EventTime> {
    let held = match earliest {
        Some(t) if t <= watermark => t.saturating_sub(1),
        _ => watermark,
    };
    (held > *forwarded).then(|| {
        *forwarded = held;
        held
    })
}

/// The order in which the keys listed at one time come out of a time index.
///
/// By default the order they were listed in. A backed-up operator's is canonical (by the
/// key's hash, then its encoded form): a promoted backup rebuilds its index from a snapshot,
/// in another order than the primary's, and must emit the same results in the same order
/// for the downstream to drop the ones it has by position.
#[derive(Debug, Default)]
pub(crate) struct DueOrder {
    canonical: bool,
    /// The time whose list is sorted, and its length then (a key listed since changes it).
    sorted: Option<(EventTime, usize)>,
}

impl DueOrder {
    /// A canonical order if `canonical`, else the listing order.
    pub(crate) fn new(canonical: bool) -> Self {
        DueOrder {
            canonical,
            sorted: None,
        }
    }

    /// Whether the order is canonical.
    pub(crate) fn is_canonical(&self) -> bool {
        self.canonical
    }
}

/// Sorts `keys` canonically, the first to take last (the list is popped from its end): by
/// key hash, keys of one hash (rare) by their encoded form.
fn sort_canonical<K: crate::Key>(keys: &mut Vec<K>) {
    let mut tagged: Vec<(u64, K)> = keys
        .drain(..)
        .map(|k| (crate::key_group::key_hash(&k), k))
        .collect();
    let encoded = |k: &K| crate::checkpoint::encode(k).unwrap_or_default();
    tagged.sort_by(|(ha, a), (hb, b)| hb.cmp(ha).then_with(|| encoded(b).cmp(&encoded(a))));
    keys.extend(tagged.into_iter().map(|(_, k)| k));
}

/// Takes one key listed at the earliest time at or before `up_to` from a time index (keys by
/// time: timers, windows to fire or to purge), dropping the time once its list is empty.
pub(crate) fn pop_first_due<K: crate::Key>(
    index: &mut BTreeMap<EventTime, Vec<K>>,
    up_to: EventTime,
    order: &mut DueOrder,
) -> Option<(EventTime, K)> {
    loop {
        let mut first = index.first_entry()?;
        let t = *first.key();
        if t > up_to {
            return None;
        }
        if order.canonical && order.sorted != Some((t, first.get().len())) {
            sort_canonical(first.get_mut());
        }
        let Some(key) = first.get_mut().pop() else {
            first.remove();
            continue;
        };
        if first.get().is_empty() {
            first.remove();
            order.sorted = None;
        } else if order.canonical {
            order.sorted = Some((t, first.get().len()));
        }
        return Some((t, key));
    }
}

/// The timers of one domain: in time order, each (time, key) once.
pub(crate) struct Queue<K> {
    by_time: BTreeMap<EventTime, Vec<K>>,
    /// The order of the keys due at one time.
    pub(crate) order: DueOrder,
    /// The registered timers; `by_time` may still list deleted ones (skipped when met).
    live: HashSet<(EventTime, K), FxBuildHasher>,
}

impl<K> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            by_time: BTreeMap::new(),
            order: DueOrder::default(),
            live: HashSet::default(),
        }
    }
}

impl<K: crate::Key> Queue<K> {
    fn register(&mut self, t: EventTime, key: &K) {
        if self.live.insert((t, key.clone())) {
            self.by_time.entry(t).or_default().push(key.clone());
        }
    }

    fn delete(&mut self, t: EventTime, key: &K) {
        self.live.remove(&(t, key.clone()));
    }

    /// Takes the earliest timer at or before `up_to`.
    fn pop_due(&mut self, up_to: EventTime) -> Option<(EventTime, K)> {
        loop {
            let timer = pop_first_due(&mut self.by_time, up_to, &mut self.order)?;
            if self.live.remove(&timer) {
                return Some(timer);
            }
        }
    }

    /// The earliest time listed (perhaps of a deleted timer: a lower bound).
    pub(crate) fn earliest(&self) -> Option<EventTime> {
        self.by_time.keys().next().copied()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }
}

impl<K> Timers<K> {
    /// Whether no timer is registered.
    pub(crate) fn is_empty(&self) -> bool {
        self.event.live.is_empty() && self.processing.live.is_empty()
    }
}

/// The timers of a keyed subtask, and the watermarks it has seen and sent on.
pub(crate) struct Timers<K> {
    pub(crate) event: Queue<K>,
    pub(crate) processing: Queue<K>,
    /// The input watermark (what functions see as the current watermark).
    pub(crate) watermark: EventTime,
    /// The last watermark sent on.
    pub(crate) forwarded: EventTime,
    /// The subtask has a buffer-queue backup: event-time timers fire in a canonical order
    /// (its replay repeats them), and processing-time ones at the times its gate logs.
    pub(crate) backed_up: bool,
    /// With a backup: the processing time the gate told last (logged, so a promoted
    /// backup's replay tells the same); what functions see as the current processing time.
    pub(crate) told: Option<EventTime>,
    /// Wakes the subtask for the earliest processing-time timer.
    wake: Option<(EventTime, Pin<Box<actix_rt::time::Sleep>>)>,
    /// Records a window function run as a keyed process function dropped as late since the
    /// operator last counted them (`numLateRecordsDropped`).
    pub(crate) late_dropped: u64,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            event: Queue::default(),
            processing: Queue::default(),
            watermark: EventTime::MIN,
            forwarded: EventTime::MIN,
            backed_up: false,
            told: None,
            wake: None,
            late_dropped: 0,
        }
    }
}

impl<K: crate::Key> Timers<K> {
    /// The timers of a subtask with a buffer-queue backup (`backed_up`) or without.
    pub(crate) fn new(backed_up: bool) -> Self {
        let mut t = Timers {
            backed_up,
            ..Timers::default()
        };
        t.event.order = DueOrder::new(backed_up);
        t
    }

    /// The next timer due: event-time ones up to the watermark first, then processing-time
    /// ones up to `now` (if given).
    pub(crate) fn pop_due(&mut self, now: Option<EventTime>) -> Option<(EventTime, TimeDomain, K)> {
        if let Some((t, k)) = self.event.pop_due(self.watermark) {
            return Some((t, TimeDomain::EventTime, k));
        }
        let now = now?;
        self.processing
            .pop_due(now)
            .map(|(t, k)| (t, TimeDomain::ProcessingTime, k))
    }

    /// Whether an event-time timer at or below the watermark has not fired yet.
    pub(crate) fn event_due(&self) -> bool {
        self.event.earliest().is_some_and(|t| t <= self.watermark)
    }

    /// Whether a processing-time timer is due at `now`.
    pub(crate) fn processing_due(&self, now: EventTime) -> bool {
        self.processing.earliest().is_some_and(|t| t <= now)
    }

    pub(crate) fn has_processing(&self) -> bool {
        !self.processing.by_time.is_empty()
    }

    /// The watermark that can be sent on now: the input's, held below the earliest event-time
    /// timer still to fire at or before it. `None` if it would not advance.
    pub(crate) fn watermark_to_forward(&mut self) -> Option<EventTime> {
        advance_forwarded(self.event.earliest(), self.watermark, &mut self.forwarded)
    }

    /// Arms the wake-up for the earliest processing-time timer (polled with `cx`).
    pub(crate) fn poll_wake(&mut self, cx: &mut Context<'_>, now: EventTime) {
        let Some(next) = self.processing.earliest() else {
            self.wake = None;
            return;
        };
        if self.wake.as_ref().is_none_or(|(at, _)| *at != next) {
            let wait = std::time::Duration::from_millis(next.saturating_sub(now).max(0) as u64);
            self.wake = Some((next, Box::pin(actix_rt::time::sleep(wait))));
        }
        if let Some((_, sleep)) = self.wake.as_mut() {
            if sleep.as_mut().poll(cx).is_ready() {
                // Due now: poll again at once, which fires it.
                self.wake = None;
                cx.waker().wake_by_ref();
            }
        }
    }

    /// Every key's timers, for a snapshot.
    pub(crate) fn by_key(&self) -> std::collections::HashMap<&K, Vec<(EventTime, TimeDomain)>> {
        let mut out: std::collections::HashMap<&K, Vec<(EventTime, TimeDomain)>> =
            Default::default();
        for (t, k) in &self.event.live {
            out.entry(k).or_default().push((*t, TimeDomain::EventTime));
        }
        for (t, k) in &self.processing.live {
            out.entry(k)
                .or_default()
                .push((*t, TimeDomain::ProcessingTime));
        }
        for v in out.values_mut() {
            v.sort_unstable_by_key(|(t, d)| (*t, *d == TimeDomain::ProcessingTime));
        }
        out
    }

    /// Registers restored timers of `key`.
    pub(crate) fn restore(&mut self, key: &K, timers: &[(EventTime, TimeDomain)]) {
        for &(t, d) in timers {
            match d {
                TimeDomain::EventTime => self.event.register(t, key),
                TimeDomain::ProcessingTime => self.processing.register(t, key),
            }
        }
    }
}

use std::future::Future;

/// What a keyed process function can see and do besides its state: the record's timestamp,
/// the current watermark and processing time, and its key's timers (Flink's `Context` and
/// `TimerService`).
///
/// ```
/// use weir::{Collector, Env, KeyedContext, KeyedProcessFunction, TimeDomain, ValueState};
/// use weir::time::EventTime;
///
/// /// Emits each key's count 10 ms (event time) after the key's first record.
/// #[derive(Clone)]
/// struct CountLater;
/// impl KeyedProcessFunction<u64, (u64, i64), (u64, u64)> for CountLater {
///     type State = ValueState<u64>;
///     fn process_with_ctx(&mut self, _k: &u64, n: &mut ValueState<u64>, x: (u64, i64),
///                         ctx: &mut KeyedContext<'_, u64>, _out: &mut Collector<(u64, u64)>) {
///         let c = n.get_or_insert_with(|| 0);
///         if *c == 0 {
///             ctx.register_event_time_timer(x.1 + 10);
///         }
///         *c += 1;
///     }
///     fn on_timer(&mut self, _t: EventTime, _d: TimeDomain, k: &u64, n: &mut ValueState<u64>,
///                 _ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<(u64, u64)>) {
///         out.collect((*k, n.value().copied().unwrap_or(0)));
///     }
/// }
///
/// let env = Env::new();
/// let out = env
///     .from_collection((0..6u64).map(|i| (i % 2, i as i64)).collect::<Vec<_>>())
///     .with_timestamps(|r: &(u64, i64)| r.1)
///     .key_by(|r: &(u64, i64)| r.0)
///     .process_with(CountLater)
///     .collect();
/// env.execute("timers-doc").unwrap();
/// let mut got = out.take();
/// got.sort();
/// assert_eq!(got, vec![(0, 3), (1, 3)]);
/// ```
pub struct KeyedContext<'a, K> {
    key: &'a K,
    timestamp: Option<EventTime>,
    timers: &'a mut Timers<K>,
    sides: &'a mut crate::operator::side::SideOutputs,
}

impl<'a, K: crate::Key> KeyedContext<'a, K> {
    /// A window run by its trigger dropped a late record: counted in the operator's
    /// `numLateRecordsDropped`.
    pub(crate) fn count_late_dropped(&mut self) {
        self.timers.late_dropped += 1;
    }

    pub(crate) fn new(
        key: &'a K,
        timestamp: Option<EventTime>,
        timers: &'a mut Timers<K>,
        sides: &'a mut crate::operator::side::SideOutputs,
    ) -> Self {
        KeyedContext {
            key,
            timestamp,
            timers,
            sides,
        }
    }

    /// The operator's side outputs (for the window functions a keyed operator runs).
    pub(crate) fn sides(&mut self) -> &mut crate::operator::side::SideOutputs {
        self.sides
    }

    /// Emits `value` to the side output `tag` (Flink's `ctx.output`), read with
    /// [`DataStream::get_side_output`](crate::DataStream::get_side_output); dropped if its
    /// stream was not taken.
    #[inline]
    pub fn output<T: 'static>(&mut self, tag: &crate::OutputTag<T>, value: T) {
        self.sides.output(tag, value)
    }

    /// The record's event time (the stream's timestamps), or the timer's time in `on_timer`;
    /// `None` on a stream without timestamps.
    pub fn timestamp(&self) -> Option<EventTime> {
        self.timestamp
    }

    /// The operator's input watermark (`EventTime::MIN` before the first one).
    pub fn current_watermark(&self) -> EventTime {
        self.timers.watermark
    }

    /// The wall clock, in ms since the Unix epoch. In an operator with a buffer-queue
    /// backup, the time its subtask logged before this batch (in the buffer queue), which a
    /// promoted backup's replay reads too.
    pub fn current_processing_time(&self) -> EventTime {
        match self.timers.told {
            Some(t) if self.timers.backed_up => t,
            _ => now_ms(),
        }
    }

    /// Fires [`on_timer`](crate::KeyedProcessFunction::on_timer) for this key once the
    /// watermark reaches `t` (at once, with the next watermark, if it has). Registering the
    /// same time twice makes one timer.
    ///
    /// In an operator with a buffer-queue backup, timers due at one time fire in a canonical
    /// order (by key hash), so that a promoted backup's replay fires them as its primary did.
    pub fn register_event_time_timer(&mut self, t: EventTime) {
        self.timers.event.register(t, self.key);
    }

    /// Removes this key's event-time timer at `t`, if there is one.
    pub fn delete_event_time_timer(&mut self, t: EventTime) {
        self.timers.event.delete(t, self.key);
    }

    /// Fires [`on_timer`](crate::KeyedProcessFunction::on_timer) for this key once the wall
    /// clock reaches `t` (ms since the epoch).
    ///
    /// In an operator with a buffer-queue backup, the firings happen at times its gate logs
    /// in the buffer queue, so a promoted backup's replay fires them at the same places among
    /// the records.
    pub fn register_processing_time_timer(&mut self, t: EventTime) {
        self.timers.processing.register(t, self.key);
    }

    /// Removes this key's processing-time timer at `t`, if there is one.
    pub fn delete_processing_time_timer(&mut self, t: EventTime) {
        self.timers.processing.delete(t, self.key);
    }

    /// This key's timer at `t` on clock `d`.
    pub(crate) fn register_timer(&mut self, t: EventTime, d: TimeDomain) {
        match d {
            TimeDomain::EventTime => self.register_event_time_timer(t),
            TimeDomain::ProcessingTime => self.register_processing_time_timer(t),
        }
    }

    /// Removes this key's timer at `t` on clock `d`, if there is one.
    pub(crate) fn delete_timer(&mut self, t: EventTime, d: TimeDomain) {
        match d {
            TimeDomain::EventTime => self.delete_event_time_timer(t),
            TimeDomain::ProcessingTime => self.delete_processing_time_timer(t),
        }
    }
}

/// One key's checkpointed entry: `(key, state)`, or `(key, state, timers)` when it has
/// timers (so states written before timers existed read as they are).
pub(crate) struct EntryRef<'a, K, S> {
    pub(crate) key: &'a K,
    pub(crate) state: &'a S,
    pub(crate) timers: Option<&'a [(EventTime, TimeDomain)]>,
}

impl<K: serde::Serialize, S: serde::Serialize> serde::Serialize for EntryRef<'_, K, S> {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(if self.timers.is_some() { 3 } else { 2 })?;
        t.serialize_element(self.key)?;
        t.serialize_element(self.state)?;
        if let Some(timers) = self.timers {
            t.serialize_element(timers)?;
        }
        t.end()
    }
}

/// [`EntryRef`] as read back.
pub(crate) struct Entry<K, S> {
    pub(crate) key: K,
    pub(crate) state: S,
    pub(crate) timers: Vec<(EventTime, TimeDomain)>,
}

impl<'de, K, S> serde::Deserialize<'de> for Entry<K, S>
where
    K: serde::Deserialize<'de>,
    S: serde::Deserialize<'de>,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K, S>(std::marker::PhantomData<(K, S)>);
        impl<'de, K, S> serde::de::Visitor<'de> for V<K, S>
        where
            K: serde::Deserialize<'de>,
            S: serde::Deserialize<'de>,
        {
            type Value = Entry<K, S>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a keyed entry (key, state) or (key, state, timers)")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let key = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let state = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(1, &self))?;
                let timers = seq.next_element()?.unwrap_or_default();
                Ok(Entry { key, state, timers })
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_time_order_once_each_and_deleted_ones_never() {
        let mut q: Queue<u64> = Queue::default();
        for (t, k) in [(5, 1), (3, 2), (5, 1), (3, 1), (9, 2), (4, 3)] {
            q.register(t, &k);
        }
        q.delete(4, &3);
        assert_eq!(q.len(), 4);
        let mut got = Vec::new();
        while let Some(x) = q.pop_due(5) {
            got.push(x);
        }
        got.sort();
        assert_eq!(got, vec![(3, 1), (3, 2), (5, 1)]);
        assert_eq!(q.pop_due(8), None);
        assert_eq!(q.pop_due(9), Some((9, 2)));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn the_forwarded_watermark_waits_for_due_timers_and_never_goes_back() {
        let mut t: Timers<u64> = Timers::default();
        t.event.register(10, &1);
        t.watermark = 20;
        assert_eq!(t.watermark_to_forward(), Some(9));
        assert_eq!(t.watermark_to_forward(), None);
        assert!(t.event_due());
        assert_eq!(t.pop_due(None), Some((10, TimeDomain::EventTime, 1)));
        assert_eq!(t.watermark_to_forward(), Some(20));
        assert!(!t.event_due());
    }

    #[test]
    fn entries_without_timers_read_as_before_and_with_them_round_trip() {
        let old = crate::checkpoint::encode(&vec![(7u64, 3u32)]).unwrap();
        let read: Vec<Entry<u64, u32>> = crate::checkpoint::decode(&old).unwrap();
        assert_eq!((read[0].key, read[0].state), (7, 3));
        assert!(read[0].timers.is_empty());
        let timers = [(5, TimeDomain::EventTime), (6, TimeDomain::ProcessingTime)];
        let new = crate::checkpoint::encode(&vec![EntryRef {
            key: &7u64,
            state: &3u32,
            timers: Some(&timers),
        }])
        .unwrap();
        let read: Vec<Entry<u64, u32>> = crate::checkpoint::decode(&new).unwrap();
        assert_eq!(read[0].timers, timers.to_vec());
    }
}
