//! When a window fires, and what is left in it (Flink's `Trigger` and `Evictor`).
//!
//! A [`Trigger`] is asked about every record added to a window and about every timer it
//! registered, and answers with a [`TriggerResult`]: go on, fire (run the window function
//! over what the window holds), purge (drop it), or both. An [`Evictor`] removes records from
//! a window before and after its function runs. The built-in triggers are Flink's:
//! [`CountTrigger`], [`EventTimeTrigger`], [`ProcessingTimeTrigger`],
//! [`ContinuousEventTimeTrigger`], [`ContinuousProcessingTimeTrigger`] and
//! [`PurgingTrigger`]; the evictors [`CountEvictor`] and [`TimeEvictor`].
//!
//! This module owns the vocabulary; `triggered` owns the operator that runs them.

use std::time::Duration;

use super::TimeWindow;
use crate::time::EventTime;

/// What a trigger decides (Flink's `TriggerResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerResult {
    /// Nothing happens.
    Continue,
    /// The window function runs over the window's contents, which are kept.
    Fire,
    /// The window's contents are dropped, without firing.
    Purge,
    /// The window function runs, then the contents are dropped.
    FireAndPurge,
}

impl TriggerResult {
    /// Whether the window fires.
    pub fn fires(self) -> bool {
        matches!(self, TriggerResult::Fire | TriggerResult::FireAndPurge)
    }
    /// Whether the window's contents are dropped.
    pub fn purges(self) -> bool {
        matches!(self, TriggerResult::Purge | TriggerResult::FireAndPurge)
    }
}

/// What a trigger may do besides deciding: register and delete timers for its window, and
/// read the clocks.
pub struct TriggerContext<'a> {
    pub(crate) watermark: EventTime,
    pub(crate) now: EventTime,
    pub(crate) requests: &'a mut Vec<TimerRequest>,
}

/// A timer change a trigger asked for, applied by the operator after the trigger returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerRequest {
    Register(EventTime, crate::TimeDomain),
    Delete(EventTime, crate::TimeDomain),
}

impl TriggerContext<'_> {
    /// Calls [`Trigger::on_event_time`] for this window once the watermark reaches `t`.
    pub fn register_event_time_timer(&mut self, t: EventTime) {
        self.requests
            .push(TimerRequest::Register(t, crate::TimeDomain::EventTime));
    }
    /// Calls [`Trigger::on_processing_time`] for this window once the wall clock reaches
    /// `t` (ms since the epoch).
    pub fn register_processing_time_timer(&mut self, t: EventTime) {
        self.requests
            .push(TimerRequest::Register(t, crate::TimeDomain::ProcessingTime));
    }
    /// Removes this window's event-time timer at `t`.
    pub fn delete_event_time_timer(&mut self, t: EventTime) {
        self.requests
            .push(TimerRequest::Delete(t, crate::TimeDomain::EventTime));
    }
    /// Removes this window's processing-time timer at `t`.
    pub fn delete_processing_time_timer(&mut self, t: EventTime) {
        self.requests
            .push(TimerRequest::Delete(t, crate::TimeDomain::ProcessingTime));
    }
    /// The operator's input watermark.
    pub fn current_watermark(&self) -> EventTime {
        self.watermark
    }
    /// The wall clock, in ms since the epoch.
    pub fn current_processing_time(&self) -> EventTime {
        self.now
    }
}

/// Decides when a window fires (Flink's `Trigger`). Its `State` is kept per key and window,
/// checkpointed with the window, and reset when the window is purged.
///
/// A trigger is called only for the timers it registered for its window.
///
/// ```
/// use weir::window::{TimeWindow, Trigger, TriggerContext, TriggerResult};
/// /// Fires when a record above 100 comes, and keeps the window.
/// #[derive(Clone)]
/// struct OnLarge;
/// impl Trigger<u64> for OnLarge {
///     type State = ();
///     fn on_element(&mut self, x: &u64, _ts: i64, _w: &TimeWindow, _s: &mut (),
///                   _ctx: &mut TriggerContext<'_>) -> TriggerResult {
///         if *x > 100 { TriggerResult::Fire } else { TriggerResult::Continue }
///     }
/// }
/// # let _ = OnLarge;
/// ```
pub trait Trigger<T>: Clone + Send + 'static {
    /// What it keeps per key and window.
    type State: Default + crate::Data;
    /// A record (with its timestamp) was added to `window`.
    fn on_element(
        &mut self,
        record: &T,
        timestamp: EventTime,
        window: &TimeWindow,
        state: &mut Self::State,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult;
    /// An event-time timer it registered for `window` fired at `time`.
    fn on_event_time(
        &mut self,
        _time: EventTime,
        _window: &TimeWindow,
        _state: &mut Self::State,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    /// A processing-time timer it registered for `window` fired at `time`.
    fn on_processing_time(
        &mut self,
        _time: EventTime,
        _window: &TimeWindow,
        _state: &mut Self::State,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    /// Session windows merged into `window`: `state` is the first's, `other` each other's in
    /// turn. By default the first's is kept; the timers of the merged windows are gone, so
    /// a trigger that needs one registers it again here.
    fn on_merge(
        &mut self,
        _window: &TimeWindow,
        _state: &mut Self::State,
        _other: &Self::State,
        _ctx: &mut TriggerContext<'_>,
    ) {
    }
}

/// Fires every `n` records of a window (Flink's `CountTrigger`), keeping its contents.
#[derive(Debug, Clone, Copy)]
pub struct CountTrigger {
    n: u64,
}

impl CountTrigger {
    /// Fires at every `n`-th record (`n` at least 1).
    pub fn of(n: u64) -> Self {
        CountTrigger { n: n.max(1) }
    }
}

impl<T> Trigger<T> for CountTrigger {
    type State = u64;
    fn on_element(
        &mut self,
        _x: &T,
        _ts: EventTime,
        _w: &TimeWindow,
        count: &mut u64,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        *count += 1;
        if *count >= self.n {
            *count = 0;
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
    fn on_merge(
        &mut self,
        _w: &TimeWindow,
        c: &mut u64,
        other: &u64,
        _ctx: &mut TriggerContext<'_>,
    ) {
        *c += other;
    }
}

/// Fires once the watermark passes the window's end (Flink's `EventTimeTrigger`, the
/// default of event-time windows). A global window's end is the end of event time: it fires
/// at the end of the input.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventTimeTrigger;

impl EventTimeTrigger {
    /// The trigger.
    pub fn create() -> Self {
        EventTimeTrigger
    }
}

impl<T> Trigger<T> for EventTimeTrigger {
    type State = ();
    fn on_element(
        &mut self,
        _x: &T,
        _ts: EventTime,
        w: &TimeWindow,
        _s: &mut (),
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.max_timestamp() <= ctx.current_watermark() {
            return TriggerResult::Fire;
        }
        ctx.register_event_time_timer(w.max_timestamp());
        TriggerResult::Continue
    }
    fn on_event_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        _s: &mut (),
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if t == w.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
    fn on_merge(&mut self, w: &TimeWindow, _s: &mut (), _o: &(), ctx: &mut TriggerContext<'_>) {
        if w.max_timestamp() > ctx.current_watermark() {
            ctx.register_event_time_timer(w.max_timestamp());
        }
    }
}

/// Fires once the wall clock passes the window's end (Flink's `ProcessingTimeTrigger`, the
/// default of processing-time windows). A global window never ends: it never fires.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessingTimeTrigger;

impl ProcessingTimeTrigger {
    /// The trigger.
    pub fn create() -> Self {
        ProcessingTimeTrigger
    }
}

impl<T> Trigger<T> for ProcessingTimeTrigger {
    type State = ();
    fn on_element(
        &mut self,
        _x: &T,
        _ts: EventTime,
        w: &TimeWindow,
        _s: &mut (),
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.end != EventTime::MAX {
            ctx.register_processing_time_timer(w.max_timestamp());
        }
        TriggerResult::Continue
    }
    fn on_processing_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        _s: &mut (),
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if t == w.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
    fn on_merge(&mut self, w: &TimeWindow, _s: &mut (), _o: &(), ctx: &mut TriggerContext<'_>) {
        ctx.register_processing_time_timer(w.max_timestamp());
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// Fires every `interval` of event time while the window has records (Flink's
/// `ContinuousEventTimeTrigger`): at the ends of the intervals the watermark passes, and at
/// the window's end. At the end of the input (the watermark at its end) it fires once more,
/// rather than at every interval to the end of time.
#[derive(Debug, Clone, Copy)]
pub struct ContinuousEventTimeTrigger {
    interval: i64,
}

impl ContinuousEventTimeTrigger {
    /// Fires every `interval` (at least 1 ms) of event time.
    pub fn of(interval: Duration) -> Self {
        ContinuousEventTimeTrigger {
            interval: millis(interval),
        }
    }
}

impl<T> Trigger<T> for ContinuousEventTimeTrigger {
    /// The next time it fires, once a record came.
    type State = Option<EventTime>;
    fn on_element(
        &mut self,
        _x: &T,
        ts: EventTime,
        w: &TimeWindow,
        next: &mut Option<EventTime>,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.end != EventTime::MAX && w.max_timestamp() <= ctx.current_watermark() {
            return TriggerResult::Fire;
        }
        if w.end != EventTime::MAX {
            ctx.register_event_time_timer(w.max_timestamp());
        }
        if next.is_none() {
            let at = ts - ts.rem_euclid(self.interval) + self.interval - 1;
            *next = Some(at);
            ctx.register_event_time_timer(at);
        }
        TriggerResult::Continue
    }
    fn on_event_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        next: &mut Option<EventTime>,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.end != EventTime::MAX && t == w.max_timestamp() {
            return TriggerResult::Fire;
        }
        if *next == Some(t) {
            if ctx.current_watermark() == EventTime::MAX {
                // The end of the input: it fires once more, not at every interval to come.
                *next = None;
            } else {
                let at = t.saturating_add(self.interval);
                *next = Some(at);
                ctx.register_event_time_timer(at);
            }
            return TriggerResult::Fire;
        }
        TriggerResult::Continue
    }
    fn on_merge(
        &mut self,
        w: &TimeWindow,
        next: &mut Option<EventTime>,
        other: &Option<EventTime>,
        ctx: &mut TriggerContext<'_>,
    ) {
        *next = earlier(*next, *other);
        if let Some(at) = *next {
            ctx.register_event_time_timer(at);
        }
        if w.end != EventTime::MAX {
            ctx.register_event_time_timer(w.max_timestamp());
        }
    }
}

/// Fires every `interval` of wall-clock time while the window has records, and at a time
/// window's end at the latest (Flink's `ContinuousProcessingTimeTrigger`: what came since the
/// last firing is not dropped unfired with the window).
#[derive(Debug, Clone, Copy)]
pub struct ContinuousProcessingTimeTrigger {
    interval: i64,
}

impl ContinuousProcessingTimeTrigger {
    /// Fires every `interval` (at least 1 ms) of wall-clock time.
    pub fn of(interval: Duration) -> Self {
        ContinuousProcessingTimeTrigger {
            interval: millis(interval),
        }
    }
}

impl<T> Trigger<T> for ContinuousProcessingTimeTrigger {
    /// The next time it fires, once a record came.
    type State = Option<EventTime>;
    fn on_element(
        &mut self,
        _x: &T,
        _ts: EventTime,
        w: &TimeWindow,
        next: &mut Option<EventTime>,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if next.is_none() {
            let now = ctx.current_processing_time();
            // At a window's end at the latest, where it ends on the wall clock (as Flink's):
            // a processing-time window is dropped there, and what came since the last firing
            // would go unfired. (An event-time window whose end the wall clock has passed is
            // not capped: it would fire at every record.)
            let aligned = now - now.rem_euclid(self.interval) + self.interval;
            let end = w.max_timestamp();
            let at = if end >= now {
                aligned.min(end)
            } else {
                aligned
            };
            *next = Some(at);
            ctx.register_processing_time_timer(at);
        }
        TriggerResult::Continue
    }
    fn on_processing_time(
        &mut self,
        t: EventTime,
        _w: &TimeWindow,
        next: &mut Option<EventTime>,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if *next == Some(t) {
            // The next firing is armed by the next record, as in Flink.
            *next = None;
            return TriggerResult::Fire;
        }
        TriggerResult::Continue
    }
    fn on_merge(
        &mut self,
        _w: &TimeWindow,
        next: &mut Option<EventTime>,
        other: &Option<EventTime>,
        ctx: &mut TriggerContext<'_>,
    ) {
        *next = earlier(*next, *other);
        if let Some(at) = *next {
            ctx.register_processing_time_timer(at);
        }
    }
}

/// Another trigger whose every firing also purges the window (Flink's `PurgingTrigger`).
#[derive(Debug, Clone, Copy)]
pub struct PurgingTrigger<Tr>(Tr);

impl<Tr> PurgingTrigger<Tr> {
    /// `trigger`, purging when it fires.
    pub fn of(trigger: Tr) -> Self {
        PurgingTrigger(trigger)
    }
}

impl<T, Tr: Trigger<T>> Trigger<T> for PurgingTrigger<Tr> {
    type State = Tr::State;
    fn on_element(
        &mut self,
        x: &T,
        ts: EventTime,
        w: &TimeWindow,
        s: &mut Tr::State,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_element(x, ts, w, s, ctx))
    }
    fn on_event_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        s: &mut Tr::State,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_event_time(t, w, s, ctx))
    }
    fn on_processing_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        s: &mut Tr::State,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_processing_time(t, w, s, ctx))
    }
    fn on_merge(
        &mut self,
        w: &TimeWindow,
        s: &mut Tr::State,
        other: &Tr::State,
        ctx: &mut TriggerContext<'_>,
    ) {
        self.0.on_merge(w, s, other, ctx)
    }
}

/// The earlier of two next firings, either of which may be unset.
fn earlier(a: Option<EventTime>, b: Option<EventTime>) -> Option<EventTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn purging(r: TriggerResult) -> TriggerResult {
    if r.fires() {
        TriggerResult::FireAndPurge
    } else {
        r
    }
}

/// Removes records from a window before and after its function runs (Flink's `Evictor`).
/// The records are in the order they came, each with its timestamp.
pub trait Evictor<T>: Clone + Send + 'static {
    /// Before the window function runs.
    fn evict_before(&mut self, _records: &mut Vec<(EventTime, T)>, _window: &TimeWindow) {}
    /// After it ran.
    fn evict_after(&mut self, _records: &mut Vec<(EventTime, T)>, _window: &TimeWindow) {}
}

/// Keeps the last `n` records of a window (Flink's `CountEvictor`), before the function runs
/// or, with [`after`](Self::after), after.
#[derive(Debug, Clone, Copy)]
pub struct CountEvictor {
    n: usize,
    after: bool,
}

impl CountEvictor {
    /// Keeps the last `n` records.
    pub fn of(n: usize) -> Self {
        CountEvictor { n, after: false }
    }
    /// Evicts after the window function ran instead of before.
    pub fn after(mut self) -> Self {
        self.after = true;
        self
    }
    fn evict<T>(&self, records: &mut Vec<(EventTime, T)>) {
        if records.len() > self.n {
            records.drain(..records.len() - self.n);
        }
    }
}

impl<T: Clone + Send + 'static> Evictor<T> for CountEvictor {
    fn evict_before(&mut self, records: &mut Vec<(EventTime, T)>, _w: &TimeWindow) {
        if !self.after {
            self.evict(records)
        }
    }
    fn evict_after(&mut self, records: &mut Vec<(EventTime, T)>, _w: &TimeWindow) {
        if self.after {
            self.evict(records)
        }
    }
}

/// Keeps the records of a window whose timestamp is within `keep` of its newest record's
/// (Flink's `TimeEvictor`): a record at `t` stays if `t > newest - keep`.
#[derive(Debug, Clone, Copy)]
pub struct TimeEvictor {
    keep: i64,
    after: bool,
}

impl TimeEvictor {
    /// Keeps the records within `keep` of the newest.
    pub fn of(keep: Duration) -> Self {
        TimeEvictor {
            keep: i64::try_from(keep.as_millis()).unwrap_or(i64::MAX),
            after: false,
        }
    }
    /// Evicts after the window function ran instead of before.
    pub fn after(mut self) -> Self {
        self.after = true;
        self
    }
    fn evict<T>(&self, records: &mut Vec<(EventTime, T)>) {
        let Some(newest) = records.iter().map(|(t, _)| *t).max() else {
            return;
        };
        let cut = newest.saturating_sub(self.keep);
        records.retain(|(t, _)| *t > cut);
    }
}

impl<T: Clone + Send + 'static> Evictor<T> for TimeEvictor {
    fn evict_before(&mut self, records: &mut Vec<(EventTime, T)>, _w: &TimeWindow) {
        if !self.after {
            self.evict(records)
        }
    }
    fn evict_after(&mut self, records: &mut Vec<(EventTime, T)>, _w: &TimeWindow) {
        if self.after {
            self.evict(records)
        }
    }
}

/// No evictor: a window keeps an accumulator, not its records (unless its function needs
/// them).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvictor;

impl<T> Evictor<T> for NoEvictor {}

/// The trigger of windows given none: the window kind's own (event time: the watermark
/// passes the window's end; processing time: the wall clock does; global windows: never).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultTrigger(pub(crate) Domain);

/// Which clock a window kind is laid over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Domain {
    #[default]
    Event,
    Processing,
    /// One window per key over all time.
    Global,
}

impl<T> Trigger<T> for DefaultTrigger {
    type State = ();
    fn on_element(
        &mut self,
        x: &T,
        ts: EventTime,
        w: &TimeWindow,
        s: &mut (),
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        match self.0 {
            Domain::Event => EventTimeTrigger.on_element(x, ts, w, s, ctx),
            Domain::Processing => ProcessingTimeTrigger.on_element(x, ts, w, s, ctx),
            Domain::Global => TriggerResult::Continue,
        }
    }
    fn on_event_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        s: &mut (),
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        match self.0 {
            Domain::Event => {
                <EventTimeTrigger as Trigger<T>>::on_event_time(&mut EventTimeTrigger, t, w, s, ctx)
            }
            _ => TriggerResult::Continue,
        }
    }
    fn on_processing_time(
        &mut self,
        t: EventTime,
        w: &TimeWindow,
        s: &mut (),
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        match self.0 {
            Domain::Processing => <ProcessingTimeTrigger as Trigger<T>>::on_processing_time(
                &mut ProcessingTimeTrigger,
                t,
                w,
                s,
                ctx,
            ),
            _ => TriggerResult::Continue,
        }
    }
    fn on_merge(&mut self, w: &TimeWindow, s: &mut (), o: &(), ctx: &mut TriggerContext<'_>) {
        match self.0 {
            Domain::Event => {
                <EventTimeTrigger as Trigger<T>>::on_merge(&mut EventTimeTrigger, w, s, o, ctx)
            }
            Domain::Processing => <ProcessingTimeTrigger as Trigger<T>>::on_merge(
                &mut ProcessingTimeTrigger,
                w,
                s,
                o,
                ctx,
            ),
            Domain::Global => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(requests: &mut Vec<TimerRequest>, watermark: EventTime) -> TriggerContext<'_> {
        TriggerContext {
            watermark,
            now: 0,
            requests,
        }
    }

    #[test]
    fn a_count_trigger_fires_every_nth_record() {
        let w = TimeWindow { start: 0, end: 10 };
        let mut t = CountTrigger::of(3);
        let mut s = 0;
        let mut r = Vec::new();
        let got: Vec<bool> = (0..7)
            .map(|i| t.on_element(&i, 0, &w, &mut s, &mut ctx(&mut r, 0)).fires())
            .collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
        let mut p = PurgingTrigger::of(CountTrigger::of(1));
        let mut s = 0;
        assert_eq!(
            p.on_element(&0, 0, &w, &mut s, &mut ctx(&mut r, 0)),
            TriggerResult::FireAndPurge
        );
    }

    #[test]
    fn a_continuous_event_time_trigger_fires_at_each_interval_the_watermark_passes() {
        let w = TimeWindow {
            start: EventTime::MIN,
            end: EventTime::MAX,
        };
        let mut t = ContinuousEventTimeTrigger::of(Duration::from_millis(10));
        let mut s = None;
        let mut r = Vec::new();
        let res = <ContinuousEventTimeTrigger as Trigger<u8>>::on_element(
            &mut t,
            &0,
            13,
            &w,
            &mut s,
            &mut ctx(&mut r, 0),
        );
        assert_eq!(res, TriggerResult::Continue);
        assert_eq!(
            r,
            [TimerRequest::Register(19, crate::TimeDomain::EventTime)]
        );
        r.clear();
        let res = <ContinuousEventTimeTrigger as Trigger<u8>>::on_event_time(
            &mut t,
            19,
            &w,
            &mut s,
            &mut ctx(&mut r, 19),
        );
        assert_eq!(res, TriggerResult::Fire);
        assert_eq!(
            r,
            [TimerRequest::Register(29, crate::TimeDomain::EventTime)]
        );
    }

    #[test]
    fn evictors_keep_the_last_records_or_the_recent_ones() {
        let w = TimeWindow { start: 0, end: 100 };
        let mut v: Vec<(EventTime, u8)> = (0..6).map(|i| (i * 10, i as u8)).collect();
        CountEvictor::of(4).evict_before(&mut v, &w);
        assert_eq!(v.iter().map(|r| r.1).collect::<Vec<_>>(), [2, 3, 4, 5]);
        TimeEvictor::of(Duration::from_millis(20)).evict_before(&mut v, &w);
        assert_eq!(v.iter().map(|r| r.1).collect::<Vec<_>>(), [4, 5]);
        let mut after = CountEvictor::of(1).after();
        after.evict_before(&mut v, &w);
        assert_eq!(v.len(), 2);
        after.evict_after(&mut v, &w);
        assert_eq!(v.len(), 1);
    }
}
