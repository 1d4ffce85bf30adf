//! Event-time windows: what they are ([`TimeWindow`]), how records are assigned to them
//! ([`TumblingEventTimeWindows`], [`SlidingEventTimeWindows`], [`EventTimeSessionWindows`]),
//! and what is computed per window ([`AggregateFunction`], [`ProcessWindowFunction`]).
//!
//! A window fires when the watermark passes its end: `window.max_timestamp() <= watermark`.
//! A record is late when every window it belongs to has `max_timestamp() + allowed_lateness
//! <= watermark`; late records go to the late-data side output if one is attached, or are
//! dropped and counted. A record within the allowed lateness of a window that has fired fires
//! it again at once, with the updated result and the next firing number
//! ([`Fired::is_update`]).
//!
//! State is kept per key in slices: a tumbling window is one slice, a sliding window of
//! `size`/`slide` is made of panes of `gcd(size, slide)` (so a record is added once, not once
//! per window), a session is one slice merged on insert. Slices, the windows still to fire and
//! the firings so far are keyed state, checkpointed and dealt by key group on rescale; the
//! operator's watermark is checkpointed too, so a restored job neither fires a window twice
//! nor takes a late record for an on-time one.
//!
//! This module owns the public window vocabulary; `op` owns the operator. The stream API is
//! `KeyedStream::window` (`windowed`).

pub(crate) mod op;
mod trigger;
pub(crate) mod triggered;

pub(crate) use trigger::Domain;
pub use trigger::{
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountEvictor, CountTrigger,
    DefaultTrigger, EventTimeTrigger, Evictor, NoEvictor, ProcessingTimeTrigger, PurgingTrigger,
    TimeEvictor, Trigger, TriggerContext, TriggerResult,
};

use std::time::Duration;

use crate::time::EventTime;
use crate::Collector;

/// A window of event time: `[start, end)` in ms.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct TimeWindow {
    /// First ms in the window.
    pub start: EventTime,
    /// First ms after the window.
    pub end: EventTime,
}

impl TimeWindow {
    /// The latest timestamp in the window (`end - 1`), when it fires.
    ///
    /// ```
    /// let w = weir::window::TimeWindow { start: 0, end: 10_000 };
    /// assert_eq!(w.max_timestamp(), 9_999);
    /// ```
    pub fn max_timestamp(&self) -> EventTime {
        self.end - 1
    }
}

/// Which firing of a window a result comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// The window.
    pub window: TimeWindow,
    /// 0 for the firing when the watermark passed the window, then 1, 2, ... for late
    /// records within the allowed lateness.
    pub firing: u32,
}

impl Fired {
    /// The result replaces an earlier one of the same window (a late record came).
    pub fn is_update(&self) -> bool {
        self.firing > 0
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// How windows are laid over event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Windowing {
    Tumbling { size: i64, offset: i64 },
    Sliding { size: i64, slide: i64, pane: i64 },
    Session { gap: i64 },
}

/// Something [`KeyedStream::window`](crate::KeyedStream::window) takes: the window kinds
/// below.
pub trait WindowAssigner: Clone + Send + 'static {
    #[doc(hidden)]
    fn windowing(&self) -> Result<Windowing_, String>;
}

/// How windows are laid over time (opaque: built by the assigners).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Windowing_(pub(crate) triggered::Assign);

impl Windowing_ {
    fn event(w: Windowing) -> Self {
        Windowing_(triggered::Assign {
            domain: Domain::Event,
            windowing: Some(w),
        })
    }
    fn processing(w: Result<Windowing_, String>) -> Result<Windowing_, String> {
        w.map(|w| {
            Windowing_(triggered::Assign {
                domain: Domain::Processing,
                ..w.0
            })
        })
    }
}

/// Fixed-size windows that do not overlap, `[k * size + offset, (k + 1) * size + offset)`.
///
/// ```
/// use std::time::Duration;
/// let w = weir::window::TumblingEventTimeWindows::of(Duration::from_secs(10));
/// # let _ = w;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TumblingEventTimeWindows {
    size: Duration,
    offset: Duration,
}

impl TumblingEventTimeWindows {
    /// Windows of `size`.
    pub fn of(size: Duration) -> Self {
        TumblingEventTimeWindows {
            size,
            offset: Duration::ZERO,
        }
    }
    /// Windows shifted by `offset` (less than the size), e.g. for time zones.
    pub fn with_offset(mut self, offset: Duration) -> Self {
        self.offset = offset;
        self
    }
}

impl WindowAssigner for TumblingEventTimeWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        let (size, offset) = (millis(self.size), millis(self.offset));
        if size <= 0 {
            return Err("tumbling windows need a size of at least 1 ms".into());
        }
        if offset >= size {
            return Err(format!(
                "the offset ({offset} ms) must be below the size ({size} ms)"
            ));
        }
        Ok(Windowing_::event(Windowing::Tumbling { size, offset }))
    }
}

/// Windows of `size` starting every `slide` (they overlap when the slide is shorter).
#[derive(Debug, Clone, Copy)]
pub struct SlidingEventTimeWindows {
    size: Duration,
    slide: Duration,
}

impl SlidingEventTimeWindows {
    /// Windows of `size`, one starting every `slide`.
    pub fn of(size: Duration, slide: Duration) -> Self {
        SlidingEventTimeWindows { size, slide }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl WindowAssigner for SlidingEventTimeWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        let (size, slide) = (millis(self.size), millis(self.slide));
        if size <= 0 || slide <= 0 {
            return Err("sliding windows need a size and a slide of at least 1 ms".into());
        }
        if slide > size {
            return Err(format!(
                "the slide ({slide} ms) must not be longer than the size ({size} ms)"
            ));
        }
        Ok(Windowing_::event(Windowing::Sliding {
            size,
            slide,
            pane: gcd(size, slide),
        }))
    }
}

/// Windows of activity per key: a record opens `[ts, ts + gap)`, and windows that overlap
/// or touch merge (as in Flink: records exactly `gap` apart are one session).
#[derive(Debug, Clone, Copy)]
pub struct EventTimeSessionWindows {
    gap: Duration,
}

impl EventTimeSessionWindows {
    /// Sessions that end after `gap` without a record.
    pub fn with_gap(gap: Duration) -> Self {
        EventTimeSessionWindows { gap }
    }
}

impl WindowAssigner for EventTimeSessionWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        let gap = millis(self.gap);
        if gap <= 0 {
            return Err("session windows need a gap of at least 1 ms".into());
        }
        Ok(Windowing_::event(Windowing::Session { gap }))
    }
}

/// Fixed-size windows of the wall clock (Flink's `TumblingProcessingTimeWindows`): a record
/// goes to the window of the time it reaches the window operator, which fires when the wall
/// clock passes the window's end (and, for the windows still open, when the input ends).
///
/// ```
/// use std::time::Duration;
/// let w = weir::window::TumblingProcessingTimeWindows::of(Duration::from_secs(10));
/// # let _ = w;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TumblingProcessingTimeWindows(TumblingEventTimeWindows);

impl TumblingProcessingTimeWindows {
    /// Windows of `size`.
    pub fn of(size: Duration) -> Self {
        TumblingProcessingTimeWindows(TumblingEventTimeWindows::of(size))
    }
    /// Windows shifted by `offset` (less than the size).
    pub fn with_offset(self, offset: Duration) -> Self {
        TumblingProcessingTimeWindows(self.0.with_offset(offset))
    }
}

impl WindowAssigner for TumblingProcessingTimeWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        Windowing_::processing(self.0.windowing())
    }
}

/// Windows of the wall clock of `size` starting every `slide` (Flink's
/// `SlidingProcessingTimeWindows`).
#[derive(Debug, Clone, Copy)]
pub struct SlidingProcessingTimeWindows(SlidingEventTimeWindows);

impl SlidingProcessingTimeWindows {
    /// Windows of `size`, one starting every `slide`.
    pub fn of(size: Duration, slide: Duration) -> Self {
        SlidingProcessingTimeWindows(SlidingEventTimeWindows::of(size, slide))
    }
}

impl WindowAssigner for SlidingProcessingTimeWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        Windowing_::processing(self.0.windowing())
    }
}

/// Sessions of the wall clock per key (Flink's `ProcessingTimeSessionWindows`): a session
/// ends `gap` after its last record reached the operator.
#[derive(Debug, Clone, Copy)]
pub struct ProcessingTimeSessionWindows(EventTimeSessionWindows);

impl ProcessingTimeSessionWindows {
    /// Sessions that end after `gap` without a record.
    pub fn with_gap(gap: Duration) -> Self {
        ProcessingTimeSessionWindows(EventTimeSessionWindows::with_gap(gap))
    }
}

impl WindowAssigner for ProcessingTimeSessionWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        Windowing_::processing(self.0.windowing())
    }
}

/// One window per key over all time (Flink's `GlobalWindows`): it fires only as its trigger
/// says ([`WindowedStream::trigger`](crate::WindowedStream::trigger); without one, never).
/// Its [`TimeWindow`] is `[i64::MIN, i64::MAX)`.
///
/// ```
/// use weir::window::{CountTrigger, GlobalWindows, PurgingTrigger};
/// use weir::{Collector, Env};
///
/// // The sum of every three records of a key (Flink's `countWindow(3)`).
/// let env = Env::new();
/// let sums = env
///     .from_collection((1..=7u64).collect::<Vec<_>>())
///     .key_by(|_: &u64| 0u8)
///     .window(GlobalWindows::create())
///     .trigger(PurgingTrigger::of(CountTrigger::of(3)))
///     .reduce(|a, b| a + b)
///     .collect();
/// env.execute("count-windows").unwrap();
/// assert_eq!(sums.take(), vec![6, 15]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalWindows;

impl GlobalWindows {
    /// The global window assigner.
    pub fn create() -> Self {
        GlobalWindows
    }
}

impl WindowAssigner for GlobalWindows {
    fn windowing(&self) -> Result<Windowing_, String> {
        Ok(Windowing_(triggered::Assign {
            domain: Domain::Global,
            windowing: None,
        }))
    }
}

fn floor_to(t: i64, step: i64, offset: i64) -> i64 {
    t - (t - offset).rem_euclid(step)
}

impl Windowing {
    /// The slice (tumbling window, pane, new session) a record at `ts` goes into.
    pub(crate) fn slice_of(&self, ts: EventTime) -> (i64, i64) {
        match *self {
            Windowing::Tumbling { size, offset } => {
                let s = floor_to(ts, size, offset);
                (s, s.saturating_add(size))
            }
            Windowing::Sliding { pane, .. } => {
                let s = floor_to(ts, pane, 0);
                (s, s.saturating_add(pane))
            }
            Windowing::Session { gap } => (ts, ts.saturating_add(gap)),
        }
    }

    /// The ends of the windows slice `[start, end)` belongs to, ascending.
    pub(crate) fn ends_of(&self, start: i64, end: i64, out: &mut Vec<i64>) {
        out.clear();
        match *self {
            Windowing::Tumbling { .. } | Windowing::Session { .. } => out.push(end),
            Windowing::Sliding { size, slide, .. } => {
                // Windows [s, s + size) with s a multiple of the slide, s <= start and
                // s + size >= end.
                let first = floor_to(end - size + slide - 1, slide, 0);
                let last = floor_to(start, slide, 0);
                let mut s = first;
                while s <= last {
                    out.push(s + size);
                    s += slide;
                }
            }
        }
    }

    /// The end of the last window slice `[start, end)` belongs to.
    pub(crate) fn last_end(&self, start: i64, end: i64) -> i64 {
        match *self {
            Windowing::Tumbling { .. } | Windowing::Session { .. } => end,
            Windowing::Sliding { size, slide, .. } => floor_to(start, slide, 0) + size,
        }
    }

    /// The start of the (tumbling or sliding) window that ends at `end`.
    pub(crate) fn start_of(&self, end: i64) -> i64 {
        match *self {
            Windowing::Tumbling { size, .. } | Windowing::Sliding { size, .. } => end - size,
            Windowing::Session { .. } => end,
        }
    }
}

/// An incremental aggregation per window (Flink's `AggregateFunction`): records are added to
/// an accumulator as they come, accumulators of slices are merged (sliding panes, merged
/// sessions), and the result is read when the window fires.
///
/// ```
/// use weir::window::AggregateFunction;
/// /// The average of the values.
/// #[derive(Clone)]
/// struct Average;
/// impl AggregateFunction<u64, f64> for Average {
///     type Acc = (u64, u64);
///     fn add(&self, acc: &mut (u64, u64), x: u64) {
///         acc.0 += x;
///         acc.1 += 1;
///     }
///     fn merge(&self, acc: &mut (u64, u64), other: &(u64, u64)) {
///         acc.0 += other.0;
///         acc.1 += other.1;
///     }
///     fn result(&self, acc: &(u64, u64)) -> f64 {
///         acc.0 as f64 / acc.1.max(1) as f64
///     }
/// }
/// let mut acc = (0, 0);
/// Average.add(&mut acc, 4);
/// Average.add(&mut acc, 6);
/// assert_eq!(Average.result(&acc), 5.0);
/// ```
pub trait AggregateFunction<I, O>: Clone + Send + 'static {
    /// The accumulator (`Default` is the empty one).
    type Acc: Default + crate::Data;
    /// Adds a record.
    fn add(&self, acc: &mut Self::Acc, input: I);
    /// Adds what `other` accumulated.
    fn merge(&self, acc: &mut Self::Acc, other: &Self::Acc);
    /// The result of what was accumulated.
    fn result(&self, acc: &Self::Acc) -> O;
}

/// A function over all the records of a window (Flink's `ProcessWindowFunction`): the
/// records are kept (each once, in its slice) until the window fires.
///
/// ```
/// use weir::window::{Fired, ProcessWindowFunction};
/// use weir::Collector;
/// /// The records of each window, counted.
/// #[derive(Clone)]
/// struct CountIn;
/// impl ProcessWindowFunction<u64, u64, (u64, i64, usize)> for CountIn {
///     fn process(&mut self, key: &u64, fired: &Fired, items: &mut dyn Iterator<Item = &u64>, out: &mut Collector<(u64, i64, usize)>) {
///         out.collect((*key, fired.window.start, items.count()));
///     }
/// }
/// # let _ = CountIn;
/// ```
pub trait ProcessWindowFunction<K, I, O>: Clone + Send + 'static {
    /// Called when window `fired.window` of `key` fires, with its records. Implement this,
    /// or [`process_with_ctx`](Self::process_with_ctx) to emit to side outputs.
    ///
    /// # Panics
    /// The provided body panics (failing the subtask, naming the operator): a function must
    /// implement one of the two.
    fn process(
        &mut self,
        _key: &K,
        _fired: &Fired,
        _items: &mut dyn Iterator<Item = &I>,
        _out: &mut Collector<O>,
    ) {
        panic!(
            "{} implements neither `process` nor `process_with_ctx` of ProcessWindowFunction",
            std::any::type_name::<Self>()
        )
    }
    /// Called when a window of `key` fires, with its records and its context: which window
    /// fired ([`WindowContext::fired`]), and side outputs ([`WindowContext::output`]). By
    /// default, [`process`](Self::process).
    fn process_with_ctx(
        &mut self,
        key: &K,
        ctx: &mut WindowContext<'_>,
        items: &mut dyn Iterator<Item = &I>,
        out: &mut Collector<O>,
    ) {
        self.process(key, ctx.fired, items, out)
    }
}

/// What a [`ProcessWindowFunction`] sees of the window that fired, and where it may emit
/// besides its main output (Flink's `ProcessWindowFunction.Context`).
///
/// ```
/// use weir::window::{Fired, ProcessWindowFunction, WindowContext};
/// use weir::{Collector, OutputTag};
/// /// Each window's count; windows of more than 100 records also to a side output.
/// #[derive(Clone)]
/// struct Count { big: OutputTag<(u64, i64)> }
/// impl ProcessWindowFunction<u64, u64, usize> for Count {
///     fn process_with_ctx(&mut self, key: &u64, ctx: &mut WindowContext<'_>,
///                         items: &mut dyn Iterator<Item = &u64>, out: &mut Collector<usize>) {
///         let n = items.count();
///         if n > 100 {
///             let start = ctx.fired().window.start;
///             ctx.output(&self.big, (*key, start));
///         }
///         out.collect(n);
///     }
/// }
/// # let _ = Count { big: OutputTag::new("big") };
/// ```
pub struct WindowContext<'a> {
    fired: &'a Fired,
    sides: &'a mut crate::operator::side::SideOutputs,
}

impl<'a> WindowContext<'a> {
    pub(crate) fn new(fired: &'a Fired, sides: &'a mut crate::operator::side::SideOutputs) -> Self {
        WindowContext { fired, sides }
    }

    /// The window that fired, and which firing of it this is.
    pub fn fired(&self) -> &Fired {
        self.fired
    }

    /// Emits `value` to the side output `tag`, read with
    /// [`DataStream::get_side_output`](crate::DataStream::get_side_output) on the window's
    /// result stream; dropped if its stream was not taken.
    #[inline]
    pub fn output<T: 'static>(&mut self, tag: &crate::OutputTag<T>, value: T) {
        self.sides.output(tag, value)
    }
}

/// What a window operator computes, whatever the user gave: accumulate, merge, emit.
pub(crate) trait WindowFn<K, I, R>: Clone + Send + 'static {
    type Acc: Default + crate::Data;
    /// Whether an accumulator summarizes its records in constant space (aggregate, reduce),
    /// so a sliding window may keep running partial merges of its panes; a process
    /// function's keeps every record, and is merged afresh for each window.
    const SUMMARY: bool = true;
    fn add(&mut self, acc: &mut Self::Acc, input: I);
    fn merge(&mut self, acc: &mut Self::Acc, other: &Self::Acc);
    fn emit(
        &mut self,
        key: &K,
        fired: &Fired,
        acc: &Self::Acc,
        out: &mut Collector<R>,
        sides: &mut crate::operator::side::SideOutputs,
    );
}

/// An [`AggregateFunction`] and what its result becomes, given key and window.
pub(crate) struct Aggregated<A, F, O> {
    pub(crate) agg: A,
    pub(crate) then: F,
    pub(crate) _o: std::marker::PhantomData<fn() -> O>,
}

impl<A: Clone, F: Clone, O> Clone for Aggregated<A, F, O> {
    fn clone(&self) -> Self {
        Aggregated {
            agg: self.agg.clone(),
            then: self.then.clone(),
            _o: std::marker::PhantomData,
        }
    }
}

impl<K, I, O, R, A, F> WindowFn<K, I, R> for Aggregated<A, F, O>
where
    A: AggregateFunction<I, O>,
    F: FnMut(&K, &Fired, O) -> R + Clone + Send + 'static,
    O: 'static,
{
    type Acc = A::Acc;
    #[inline]
    fn add(&mut self, acc: &mut A::Acc, input: I) {
        self.agg.add(acc, input)
    }
    fn merge(&mut self, acc: &mut A::Acc, other: &A::Acc) {
        self.agg.merge(acc, other)
    }
    fn emit(
        &mut self,
        key: &K,
        fired: &Fired,
        acc: &A::Acc,
        out: &mut Collector<R>,
        _sides: &mut crate::operator::side::SideOutputs,
    ) {
        let o = self.agg.result(acc);
        out.collect((self.then)(key, fired, o));
    }
}

/// A [`ProcessWindowFunction`] over the window's records.
#[derive(Clone)]
pub(crate) struct Processed<P>(pub(crate) P);

impl<K, I, R, P> WindowFn<K, I, R> for Processed<P>
where
    P: ProcessWindowFunction<K, I, R>,
    I: crate::Data,
{
    type Acc = Vec<I>;
    const SUMMARY: bool = false;
    #[inline]
    fn add(&mut self, acc: &mut Vec<I>, input: I) {
        acc.push(input)
    }
    fn merge(&mut self, acc: &mut Vec<I>, other: &Vec<I>) {
        acc.extend_from_slice(other)
    }
    fn emit(
        &mut self,
        key: &K,
        fired: &Fired,
        acc: &Vec<I>,
        out: &mut Collector<R>,
        sides: &mut crate::operator::side::SideOutputs,
    ) {
        let ctx = &mut WindowContext::new(fired, sides);
        self.0.process_with_ctx(key, ctx, &mut acc.iter(), out)
    }
}

/// A reduce function as an aggregation (`WindowedStream::reduce`).
#[derive(Clone)]
pub(crate) struct Reducing<F>(pub(crate) F);

impl<T, F> AggregateFunction<T, T> for Reducing<F>
where
    T: crate::Data,
    F: Fn(T, T) -> T + Clone + Send + 'static,
{
    type Acc = Option<T>;
    fn add(&self, acc: &mut Option<T>, input: T) {
        *acc = Some(match acc.take() {
            None => input,
            Some(a) => (self.0)(a, input),
        });
    }
    fn merge(&self, acc: &mut Option<T>, other: &Option<T>) {
        if let Some(o) = other {
            self.add(acc, o.clone());
        }
    }
    fn result(&self, acc: &Option<T>) -> T {
        match acc {
            Some(a) => a.clone(),
            // A window fires only with a record in it.
            None => unreachable!("internal error: an empty window fired"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sliding(size: i64, slide: i64) -> Windowing {
        SlidingEventTimeWindows::of(
            Duration::from_millis(size as u64),
            Duration::from_millis(slide as u64),
        )
        .windowing()
        .unwrap()
        .0
        .windowing
        .expect("a time window")
    }

    #[test]
    fn a_pane_belongs_to_every_sliding_window_that_covers_it() {
        let w = sliding(10, 4); // panes of 2
        let (s, e) = w.slice_of(9);
        assert_eq!((s, e), (8, 10));
        let mut ends = Vec::new();
        w.ends_of(s, e, &mut ends);
        // Windows [0,10), [4,14), [8,18) contain [8,10).
        assert_eq!(ends, vec![10, 14, 18]);
        assert_eq!(w.last_end(s, e), 18);
        let (s, e) = w.slice_of(-1);
        assert_eq!((s, e), (-2, 0));
        w.ends_of(s, e, &mut ends);
        // [-8, 2) and [-4, 6).
        assert_eq!(ends, vec![2, 6]);
    }

    #[test]
    fn tumbling_windows_follow_their_offset() {
        let w = TumblingEventTimeWindows::of(Duration::from_millis(10))
            .with_offset(Duration::from_millis(3))
            .windowing()
            .unwrap()
            .0
            .windowing
            .expect("a time window");
        assert_eq!(w.slice_of(12), (3, 13));
        assert_eq!(w.slice_of(13), (13, 23));
        assert_eq!(w.slice_of(-1), (-7, 3));
    }

    #[test]
    fn bad_windows_are_refused() {
        assert!(
            SlidingEventTimeWindows::of(Duration::from_secs(1), Duration::from_secs(2))
                .windowing()
                .is_err()
        );
        assert!(TumblingEventTimeWindows::of(Duration::ZERO)
            .windowing()
            .is_err());
        assert!(EventTimeSessionWindows::with_gap(Duration::ZERO)
            .windowing()
            .is_err());
    }
}
