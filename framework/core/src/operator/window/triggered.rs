//! Windows run by a trigger: processing-time windows, global windows, and any window given a
//! [`Trigger`] or an [`Evictor`]. (Event-time windows with neither run in `op`, whose
//! slices and panes are faster.)
//!
//! The operator is a keyed process function: a key's windows, their contents, their
//! triggers' states and the timers each trigger registered are one keyed state entry, so
//! they go through the job's state backend (memory or disk), incremental checkpoints,
//! rescale by key group, savepoints and the buffer-queue backup like any keyed state. Timers
//! are the keyed operator's: event-time ones fire as the watermark passes them (in a canonical
//! order under a backup, so a promoted backup fires them as its primary did); under a backup,
//! the wall clock a window or trigger reads (records' processing times, processing-time
//! timers) is the time the subtask's gate logged in the buffer queue, so a promoted backup's
//! replay puts records in the same windows and fires them at the same places.
//!
//! A trigger is called for the timers it registered for its window only. A time window is
//! dropped when its end (event time: plus the allowed lateness) has passed; a global window
//! lives as long as its key. When the input ends, event-time timers fire (the watermark is at
//! its end), and the windows still open on the wall clock fire once, so no record is left
//! unfired.

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use super::trigger::{Domain, Evictor, TimerRequest, Trigger, TriggerContext, TriggerResult};
use super::{Fired, TimeWindow, WindowFn, Windowing};
use crate::operator::keyed::KeyedProcessFunction;
use crate::operator::side::{ProcessContext, SideOutputs};
use crate::operator::timers::KeyedContext;
use crate::time::{EventTime, Timestamps};
use crate::{Collector, TimeDomain};

/// Where records go: which clock, and how windows are laid over it (`None`: one global
/// window per key).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Assign {
    pub(crate) domain: Domain,
    pub(crate) windowing: Option<Windowing>,
}

/// The window of all time, for global windows.
const GLOBAL: TimeWindow = TimeWindow {
    start: EventTime::MIN,
    end: EventTime::MAX,
};

impl Assign {
    /// The windows a record at `ts` belongs to, ascending.
    fn windows(&self, ts: EventTime, out: &mut Vec<TimeWindow>) {
        out.clear();
        match self.windowing {
            None => out.push(GLOBAL),
            Some(Windowing::Sliding { size, slide, .. }) => {
                // Windows [s, s + size) with s a multiple of the slide and s <= ts < s +
                // size (a size that is not a multiple of the slide too).
                let last = super::floor_to(ts, slide, 0);
                let mut start =
                    super::floor_to(ts.saturating_sub(size).saturating_add(slide), slide, 0);
                while start <= last {
                    out.push(TimeWindow {
                        start,
                        end: start.saturating_add(size),
                    });
                    start += slide;
                }
            }
            Some(w) => {
                let (start, end) = w.slice_of(ts);
                out.push(TimeWindow { start, end });
            }
        }
    }

    fn merging(&self) -> bool {
        matches!(self.windowing, Some(Windowing::Session { .. }))
    }
}

/// A key's windows, in the order of their starts, and the timers their triggers registered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize, I: Serialize, S: Serialize",
    deserialize = "A: Deserialize<'de>, I: Deserialize<'de>, S: Deserialize<'de>"
))]
pub(crate) struct KeyWindows<A, I, S> {
    windows: Vec<Window<A, I, S>>,
    /// (time, clock, window, whether it is the window's clean-up).
    timers: Vec<(EventTime, TimeDomain, TimeWindow, bool)>,
}

impl<A, I, S> Default for KeyWindows<A, I, S> {
    fn default() -> Self {
        KeyWindows {
            windows: Vec::new(),
            timers: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize, I: Serialize, S: Serialize",
    deserialize = "A: Deserialize<'de>, I: Deserialize<'de>, S: Deserialize<'de>"
))]
struct Window<A, I, S> {
    window: TimeWindow,
    /// The accumulator (without an evictor).
    acc: A,
    /// The records, with their timestamps (with an evictor).
    records: Vec<(EventTime, I)>,
    /// Records in it since it was last purged.
    n: u64,
    trigger: S,
    firings: u32,
}

/// The windows of a keyed stream, run by a trigger (and an evictor), as a keyed process
/// function.
pub(crate) struct Triggered<K, I, R, G, Tr, Ev> {
    pub(crate) assign: Assign,
    pub(crate) g: G,
    pub(crate) trigger: Tr,
    pub(crate) evictor: Option<Ev>,
    pub(crate) ts: Option<Timestamps<I>>,
    pub(crate) lateness: i64,
    /// Where records late for every window they would go to go (`side_output_late_data`);
    /// dropped without it.
    pub(crate) late: Option<crate::OutputTag<I>>,
    pub(crate) _p: PhantomData<fn(K) -> R>,
}

impl<K, I, R, G: Clone, Tr: Clone, Ev: Clone> Clone for Triggered<K, I, R, G, Tr, Ev> {
    fn clone(&self) -> Self {
        Triggered {
            assign: self.assign,
            g: self.g.clone(),
            trigger: self.trigger.clone(),
            evictor: self.evictor.clone(),
            ts: self.ts.clone(),
            lateness: self.lateness,
            late: self.late.clone(),
            _p: PhantomData,
        }
    }
}

type State<G, K, I, R, Tr> =
    KeyWindows<<G as WindowFn<K, I, R>>::Acc, I, <Tr as Trigger<I>>::State>;

impl<K, I, R, G, Tr, Ev> Triggered<K, I, R, G, Tr, Ev>
where
    K: crate::Key,
    I: crate::Data,
    R: Send + 'static,
    G: WindowFn<K, I, R>,
    Tr: Trigger<I>,
    Ev: Evictor<I>,
{
    /// When window `w` is dropped, on the operator's clock.
    fn cleanup_at(&self, w: &TimeWindow) -> Option<(EventTime, TimeDomain)> {
        if w.end == EventTime::MAX {
            return None;
        }
        Some(match self.assign.domain {
            Domain::Processing => (w.max_timestamp(), TimeDomain::ProcessingTime),
            _ => (
                w.max_timestamp().saturating_add(self.lateness),
                TimeDomain::EventTime,
            ),
        })
    }

    /// Applies the timer changes `window`'s trigger asked for.
    fn apply_timers(
        state: &mut State<G, K, I, R, Tr>,
        window: TimeWindow,
        requests: &mut Vec<TimerRequest>,
        ctx: &mut KeyedContext<'_, K>,
    ) {
        for r in requests.drain(..) {
            match r {
                TimerRequest::Register(t, d) => {
                    if !state
                        .timers
                        .iter()
                        .any(|x| (x.0, x.1, x.2, x.3) == (t, d, window, false))
                    {
                        state.timers.push((t, d, window, false));
                    }
                    ctx.register_timer(t, d);
                }
                TimerRequest::Delete(t, d) => {
                    state
                        .timers
                        .retain(|x| (x.0, x.1, x.2, x.3) != (t, d, window, false));
                    delete_unless_used(state, t, d, ctx);
                }
            }
        }
    }

    /// Acts on what window `i`'s trigger decided.
    fn act(
        &mut self,
        key: &K,
        state: &mut State<G, K, I, R, Tr>,
        i: usize,
        result: TriggerResult,
        out: &mut Collector<R>,
        sides: &mut SideOutputs,
    ) {
        let w = &mut state.windows[i];
        if result.fires() && w.n > 0 {
            let fired = Fired {
                window: w.window,
                firing: w.firings,
            };
            w.firings += 1;
            match self.evictor.as_mut() {
                None => self.g.emit(key, &fired, &w.acc, out, sides),
                Some(ev) => {
                    ev.evict_before(&mut w.records, &w.window);
                    if !w.records.is_empty() {
                        let mut acc = G::Acc::default();
                        for (_, r) in &w.records {
                            self.g.add(&mut acc, r.clone());
                        }
                        self.g.emit(key, &fired, &acc, out, sides);
                    }
                    ev.evict_after(&mut w.records, &w.window);
                    w.n = w.records.len() as u64;
                }
            }
        }
        if result.purges() {
            w.acc = G::Acc::default();
            w.records.clear();
            w.n = 0;
        }
    }

    /// A new, empty window at index `at`, dropped at its clean-up time.
    fn open_window(
        &self,
        state: &mut State<G, K, I, R, Tr>,
        at: usize,
        window: TimeWindow,
        ctx: &mut KeyedContext<'_, K>,
    ) {
        state.windows.insert(
            at,
            Window {
                window,
                acc: G::Acc::default(),
                records: Vec::new(),
                n: 0,
                trigger: Tr::State::default(),
                firings: 0,
            },
        );
        if let Some((t, d)) = self.cleanup_at(&window) {
            state.timers.push((t, d, window, true));
            ctx.register_timer(t, d);
        }
    }

    /// Merges the session windows that overlap `new` into one; its index.
    fn merge_into(
        &mut self,
        state: &mut State<G, K, I, R, Tr>,
        new: TimeWindow,
        ctx: &mut KeyedContext<'_, K>,
        requests: &mut Vec<TimerRequest>,
    ) -> usize {
        let overlapping: Vec<usize> = (0..state.windows.len())
            .filter(|&i| {
                let w = state.windows[i].window;
                w.start <= new.end && new.start <= w.end
            })
            .collect();
        let Some(&first) = overlapping.first() else {
            let at = state
                .windows
                .partition_point(|w| w.window.start < new.start);
            self.open_window(state, at, new, ctx);
            return at;
        };
        let mut merged = new;
        for &i in &overlapping {
            let w = state.windows[i].window;
            merged = TimeWindow {
                start: merged.start.min(w.start),
                end: merged.end.max(w.end),
            };
        }
        if overlapping.len() == 1 && merged == state.windows[first].window {
            return first;
        }
        // The merged windows' timers are gone; the first's window becomes the union.
        let olds: Vec<TimeWindow> = overlapping
            .iter()
            .map(|&i| state.windows[i].window)
            .collect();
        for old in &olds {
            forget_timers(state, *old, ctx);
        }
        let mut rest: Vec<Window<_, _, _>> = Vec::new();
        for &i in overlapping[1..].iter().rev() {
            rest.push(state.windows.remove(i));
        }
        let (watermark, now) = (ctx.current_watermark(), ctx.current_processing_time());
        let target = &mut state.windows[first];
        target.window = merged;
        for other in rest.into_iter().rev() {
            self.g.merge(&mut target.acc, &other.acc);
            target.records.extend(other.records);
            target.n += other.n;
            target.firings = target.firings.max(other.firings);
            let mut tctx = TriggerContext {
                watermark,
                now,
                requests,
            };
            self.trigger
                .on_merge(&merged, &mut target.trigger, &other.trigger, &mut tctx);
        }
        if olds.len() == 1 {
            // A window that grew: its trigger's timers are registered again for the new end.
            let mut tctx = TriggerContext {
                watermark,
                now,
                requests,
            };
            let empty = Tr::State::default();
            self.trigger
                .on_merge(&merged, &mut target.trigger, &empty, &mut tctx);
        }
        Self::apply_timers(state, merged, requests, ctx);
        if let Some((t, d)) = self.cleanup_at(&merged) {
            state.timers.push((t, d, merged, true));
            ctx.register_timer(t, d);
        }
        first
    }

    /// Fires, purges and drops what the timers at `t` of clock `d` say.
    fn on_time(
        &mut self,
        t: EventTime,
        d: TimeDomain,
        key: &K,
        state: &mut State<G, K, I, R, Tr>,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<R>,
    ) {
        let due: Vec<(TimeWindow, bool)> = state
            .timers
            .iter()
            .filter(|x| (x.0, x.1) == (t, d))
            .map(|x| (x.2, x.3))
            .collect();
        state.timers.retain(|x| (x.0, x.1) != (t, d));
        let mut requests = Vec::new();
        let (watermark, now) = (ctx.current_watermark(), ctx.current_processing_time());
        let mut cleanups = Vec::new();
        for (window, cleanup) in due {
            if cleanup {
                cleanups.push(window);
                continue;
            }
            let Some(i) = state.windows.iter().position(|w| w.window == window) else {
                continue;
            };
            let mut tctx = TriggerContext {
                watermark,
                now,
                requests: &mut requests,
            };
            let w = &mut state.windows[i];
            let result = match d {
                TimeDomain::EventTime => {
                    self.trigger
                        .on_event_time(t, &window, &mut w.trigger, &mut tctx)
                }
                TimeDomain::ProcessingTime => {
                    self.trigger
                        .on_processing_time(t, &window, &mut w.trigger, &mut tctx)
                }
            };
            Self::apply_timers(state, window, &mut requests, ctx);
            self.act(key, state, i, result, out, ctx.sides());
        }
        for window in cleanups {
            state.windows.retain(|w| w.window != window);
            forget_timers(state, window, ctx);
        }
    }
}

/// Drops every timer window `w` registered (the key's timer too, where no other window of the
/// key registered the same time).
fn forget_timers<A, I, S, K: crate::Key>(
    state: &mut KeyWindows<A, I, S>,
    w: TimeWindow,
    ctx: &mut KeyedContext<'_, K>,
) {
    let ours: Vec<(EventTime, TimeDomain)> = state
        .timers
        .iter()
        .filter(|x| x.2 == w)
        .map(|x| (x.0, x.1))
        .collect();
    state.timers.retain(|x| x.2 != w);
    for (t, d) in ours {
        delete_unless_used(state, t, d, ctx);
    }
}

/// Deletes the key's timer at `t` of clock `d` unless a window of the key still registered it.
fn delete_unless_used<A, I, S, K: crate::Key>(
    state: &KeyWindows<A, I, S>,
    t: EventTime,
    d: TimeDomain,
    ctx: &mut KeyedContext<'_, K>,
) {
    if !state.timers.iter().any(|x| (x.0, x.1) == (t, d)) {
        ctx.delete_timer(t, d);
    }
}

impl<K, I, R, G, Tr, Ev> KeyedProcessFunction<K, I, R> for Triggered<K, I, R, G, Tr, Ev>
where
    K: crate::Key,
    I: crate::Data,
    R: Send + 'static,
    G: WindowFn<K, I, R>,
    Tr: Trigger<I>,
    Ev: Evictor<I>,
{
    type State = State<G, K, I, R, Tr>;

    fn process_with_ctx(
        &mut self,
        key: &K,
        state: &mut Self::State,
        x: I,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<R>,
    ) {
        let now = ctx.current_processing_time();
        let ts = match self.assign.domain {
            Domain::Processing => now,
            // The plan made sure an event-time stream has timestamps.
            Domain::Event => ctx.timestamp().unwrap_or(EventTime::MIN),
            Domain::Global => ctx.timestamp().unwrap_or(now),
        };
        let watermark = ctx.current_watermark();
        let mut windows = Vec::new();
        self.assign.windows(ts, &mut windows);
        if self.assign.domain == Domain::Event {
            // Late for every window it would go to: to the late-data output if there is
            // one, else dropped, as in Flink (late for some of its windows only: dropped
            // from those).
            windows.retain(|w| w.max_timestamp().saturating_add(self.lateness) > watermark);
            if windows.is_empty() {
                match &self.late {
                    Some(tag) => ctx.output(tag, x),
                    None => ctx.count_late_dropped(),
                }
                return;
            }
        }
        let mut requests = Vec::new();
        for window in windows {
            let i = if self.assign.merging() {
                self.merge_into(state, window, ctx, &mut requests)
            } else {
                match state
                    .windows
                    .binary_search_by_key(&window.start, |w| w.window.start)
                {
                    Ok(i) => i,
                    Err(i) => {
                        self.open_window(state, i, window, ctx);
                        i
                    }
                }
            };
            let w = &mut state.windows[i];
            let window = w.window;
            let mut tctx = TriggerContext {
                watermark,
                now,
                requests: &mut requests,
            };
            let result = self
                .trigger
                .on_element(&x, ts, &window, &mut w.trigger, &mut tctx);
            match self.evictor {
                Some(_) => w.records.push((ts, x.clone())),
                None => self.g.add(&mut w.acc, x.clone()),
            }
            w.n += 1;
            Self::apply_timers(state, window, &mut requests, ctx);
            self.act(key, state, i, result, out, ctx.sides());
        }
    }

    fn on_timer(
        &mut self,
        t: EventTime,
        d: TimeDomain,
        key: &K,
        state: &mut Self::State,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<R>,
    ) {
        self.on_time(t, d, key, state, ctx, out)
    }

    fn end_of_input_with_ctx(
        &mut self,
        state: &mut crate::KeyedState<K, Self::State>,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<R>,
    ) {
        if self.assign.domain != Domain::Processing {
            return;
        }
        // What the wall clock has not fired yet fires once now.
        for (key, windows) in state.iter_mut() {
            for i in 0..windows.windows.len() {
                self.act(
                    key,
                    windows,
                    i,
                    TriggerResult::FireAndPurge,
                    out,
                    ctx.sides(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(a: &Assign, ts: EventTime) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        a.windows(ts, &mut out);
        out.iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn sliding_windows_start_at_multiples_of_the_slide_whatever_the_size() {
        let sliding = |size, slide| Assign {
            domain: Domain::Event,
            windowing: Some(Windowing::Sliding {
                size,
                slide,
                pane: 1,
            }),
        };
        // A size that is not a multiple of the slide (Flink's: starts at multiples of the
        // slide, each window holding what is in [start, start + size)).
        let a = sliding(900, 600);
        assert_eq!(windows(&a, 700), [(0, 900), (600, 1_500)]);
        assert_eq!(windows(&a, 1_000), [(600, 1_500)]);
        assert_eq!(windows(&a, -1), [(-600, 300)]);
        let a = sliding(1_000, 250);
        assert_eq!(
            windows(&a, 1_000),
            [(250, 1_250), (500, 1_500), (750, 1_750), (1_000, 2_000)]
        );
    }
}
