//! The keyed event-time window operator: slices per key, the windows still to fire, firing
//! on the watermark, late records, and its checkpointed form.

pub(crate) mod chain;
mod handoff;

use std::collections::{BTreeMap, VecDeque};

use griddle::HashMap;
use rustc_hash::FxBuildHasher;

use super::{Fired, TimeWindow, WindowFn, Windowing};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::metrics::QueueUsage;
use crate::operator::keyed::{put_keyed, KeyedPayload};
use crate::operator::side::SideOutputs;
use crate::operator::timers::{advance_forwarded, pop_first_due, DueOrder};
use crate::operator::{BoxOutput, Collector, Control, OpCore, Output};
use crate::time::{EventTime, Timestamps, Watermark};

/// The name of the operator's own checkpointed field (its watermark, one per subtask).
pub(crate) const WATERMARK_FIELD: &str = "watermark";
const STATE_NAME: &str = "weir::window";
const STATE_VERSION: u32 = 1;

/// One key's windows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "A: serde::Serialize",
    deserialize = "A: serde::de::DeserializeOwned"
))]
pub(crate) struct KeyWindows<A> {
    /// start -> (end, accumulator): tumbling windows, sliding panes, sessions.
    slices: BTreeMap<i64, (i64, A)>,
    /// Ends of the windows that have not fired yet.
    pending: Ends,
    /// Ends of the windows that fired, with their number of firings (kept while late
    /// records may still update them).
    fired: BTreeMap<i64, u32>,
    /// Sliding windows: running merges of the last window's panes (rebuilt when missing).
    #[serde(skip)]
    panes: PaneQueue<A>,
}

impl<A> Default for KeyWindows<A> {
    fn default() -> Self {
        KeyWindows {
            slices: BTreeMap::new(),
            pending: Ends::default(),
            fired: BTreeMap::new(),
            panes: PaneQueue::default(),
        }
    }
}

/// Window ends, ascending, each once: a key's windows still to fire. A sorted deque, as
/// windows come at the back and fire from the front (one allocation per key, not a tree's
/// nodes, and one cache miss to reach the first); it is serialized as the ascending sequence
/// a `BTreeSet` gives, so checkpoints read the same either way.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Ends(VecDeque<i64>);

impl Ends {
    fn first(&self) -> Option<&i64> {
        self.0.front()
    }
    fn pop_first(&mut self) -> Option<i64> {
        self.0.pop_front()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Adds `end`; false if it was there.
    fn insert(&mut self, end: i64) -> bool {
        if self.0.back().is_none_or(|last| *last < end) {
            self.0.push_back(end);
            return true;
        }
        match self.0.binary_search(&end) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, end);
                true
            }
        }
    }
    /// Removes `end`; false if it was not there.
    fn remove(&mut self, end: &i64) -> bool {
        match self.0.binary_search(end) {
            Ok(i) => self.0.remove(i).is_some(),
            Err(_) => false,
        }
    }
    /// Whether an end in `[from, to]` is there.
    fn any_in(&self, from: i64, to: i64) -> bool {
        let i = self.0.partition_point(|e| *e < from);
        self.0.get(i).is_some_and(|e| *e <= to)
    }
}

/// The panes of a key's last sliding window, as a queue of two stacks: each window merges
/// about three accumulators, not `size / slide` (a 60 s window sliding by 1 s: 60 panes).
/// `front` (oldest on top) holds each pane with the merge of it and every pane behind it in
/// `front`; `back` the newer panes, with their merge. Windows fire in order per key, so
/// each pane is pushed and popped once.
#[derive(Debug, Clone)]
struct PaneQueue<A> {
    /// The window it holds is `[start, end)`; `valid` false: none.
    start: i64,
    end: i64,
    valid: bool,
    front: Vec<(i64, A)>,
    back: Vec<i64>,
    back_acc: Option<A>,
}

impl<A> Default for PaneQueue<A> {
    fn default() -> Self {
        PaneQueue {
            start: 0,
            end: 0,
            valid: false,
            front: Vec::new(),
            back: Vec::new(),
            back_acc: None,
        }
    }
}

impl<A: Clone + Default> PaneQueue<A> {
    /// A pane at `start` changed (a late record): drop the running merges if they use it.
    fn touched(&mut self, start: i64) {
        if self.valid && start < self.end {
            self.valid = false;
        }
    }

    /// The merge of the panes in `[start, end)` (`None`: no pane).
    fn window(
        &mut self,
        start: i64,
        end: i64,
        slices: &BTreeMap<i64, (i64, A)>,
        mut merge: impl FnMut(&mut A, &A),
    ) -> Option<A> {
        if !self.valid || start < self.start || end < self.end || start >= self.end {
            self.front.clear();
            self.back.clear();
            self.back_acc = None;
            (self.start, self.end, self.valid) = (start, start, true);
        }
        for (&s, (_, a)) in slices.range(self.end..end) {
            self.back.push(s);
            match self.back_acc.as_mut() {
                Some(acc) => merge(acc, a),
                None => self.back_acc = Some(a.clone()),
            }
        }
        (self.start, self.end) = (start, end);
        loop {
            match self.front.last() {
                Some((s, _)) if *s < start => {
                    self.front.pop();
                }
                Some(_) => break,
                None if self.back.first().is_some_and(|s| *s < start) => {
                    // Flip: the back panes, newest first, become the front's running merges.
                    let mut acc: Option<A> = None;
                    for &s in self.back.iter().rev() {
                        let Some((_, a)) = slices.get(&s) else {
                            continue;
                        };
                        let next = match acc.take() {
                            Some(mut m) => {
                                merge(&mut m, a);
                                m
                            }
                            None => a.clone(),
                        };
                        self.front.push((s, next.clone()));
                        acc = Some(next);
                    }
                    self.back.clear();
                    self.back_acc = None;
                }
                None => break,
            }
        }
        match (self.front.last(), self.back_acc.as_ref()) {
            (None, None) => None,
            (Some((_, f)), None) => Some(f.clone()),
            (None, Some(b)) => Some(b.clone()),
            (Some((_, f)), Some(b)) => {
                let mut m = f.clone();
                merge(&mut m, b);
                Some(m)
            }
        }
    }
}

impl<A> KeyWindows<A> {
    fn is_empty(&self) -> bool {
        self.slices.is_empty() && self.pending.is_empty()
    }
}

/// Everything but the outputs.
struct Inner<K, I, R, G: WindowFn<K, I, R>> {
    ts: Timestamps<I>,
    windowing: Windowing,
    lateness: i64,
    f: G,
    keys: HashMap<K, KeyWindows<G::Acc>, FxBuildHasher>,
    /// Fire time (a window's max timestamp) -> keys with a window ending then.
    fire: BTreeMap<EventTime, Vec<K>>,
    /// Cleanup time (max timestamp + allowed lateness) -> keys to purge then.
    cleanup: BTreeMap<EventTime, Vec<K>>,
    /// The order of the keys whose windows fire at one time (canonical when backed up).
    fire_order: DueOrder,
    cleanup_order: DueOrder,
    watermark: EventTime,
    /// The last watermark sent on: the input's once every window it completes has fired.
    forwarded: EventTime,
    late: Vec<I>,
    late_attached: bool,
    late_dropped: u64,
    ends: Vec<i64>,
    /// With a buffer-queue backup: the keys written since the last hand-off (`handoff`); with
    /// incremental checkpoints, since the last checkpoint.
    changed: Option<crate::operator::handoff::Changed<K>>,
    /// An incremental checkpoint's copy under way (`chain`): a key it has still to copy is
    /// copied before it is written.
    copying: Option<Box<chain::Copying<K>>>,
    _r: std::marker::PhantomData<fn() -> R>,
}

pub(crate) struct WindowOp<KF, K, I, R, G: WindowFn<K, I, R>> {
    key_fn: KF,
    inner: Inner<K, I, R, G>,
    core: OpCore<R>,
    late_next: BoxOutput<I>,
    max_parallelism: usize,
    /// Windows fired in one run before the subtask takes other work (a barrier, control
    /// mail); no record is taken while some are due.
    budget: usize,
    /// Its incremental checkpoints, if on.
    chain: Option<chain::Chain>,
}

/// How the operator is configured (what the stream API hands the builder).
pub(crate) struct WindowSpec<I> {
    pub(crate) ts: Timestamps<I>,
    pub(crate) windowing: Windowing,
    pub(crate) lateness: i64,
    pub(crate) late_attached: bool,
    /// The subtask has a buffer-queue backup: windows ending at one time fire in a
    /// canonical order, the same in a promoted backup's replay.
    pub(crate) backed_up: bool,
}

impl<I> Clone for WindowSpec<I> {
    fn clone(&self) -> Self {
        WindowSpec {
            ts: self.ts.clone(),
            windowing: self.windowing,
            lateness: self.lateness,
            late_attached: self.late_attached,
            backed_up: self.backed_up,
        }
    }
}

impl<K, I, R, G> Inner<K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    /// Emits window `end` of `key` (its `firing`-th firing), from the slices it covers.
    fn emit_window(
        f: &mut G,
        windowing: Windowing,
        key: &K,
        w: &mut KeyWindows<G::Acc>,
        (end, firing): (i64, u32),
        out: &mut Collector<R>,
        sides: &mut SideOutputs,
    ) {
        let fired = |start| Fired {
            window: TimeWindow { start, end },
            firing,
        };
        match windowing {
            Windowing::Tumbling { .. } => {
                let start = windowing.start_of(end);
                if let Some((_, acc)) = w.slices.get(&start) {
                    f.emit(key, &fired(start), acc, out, sides);
                }
            }
            Windowing::Session { .. } => {
                if let Some((&start, (_, acc))) = w.slices.range(..end).next_back() {
                    f.emit(key, &fired(start), acc, out, sides);
                }
            }
            Windowing::Sliding { .. } if G::SUMMARY => {
                let start = windowing.start_of(end);
                let acc = w.panes.window(start, end, &w.slices, |a, b| f.merge(a, b));
                if let Some(acc) = acc {
                    f.emit(key, &fired(start), &acc, out, sides);
                }
            }
            Windowing::Sliding { .. } => {
                let start = windowing.start_of(end);
                let mut acc = G::Acc::default();
                let mut any = false;
                for (_, (_, a)) in w.slices.range(start..end) {
                    f.merge(&mut acc, a);
                    any = true;
                }
                if any {
                    f.emit(key, &fired(start), &acc, out, sides);
                }
            }
        }
    }

    /// Adds one record (`out`: where updates of fired windows go).
    fn add(&mut self, key: K, x: I, out: &mut Collector<R>, sides: &mut SideOutputs) {
        let ts = (self.ts)(&x);
        let wm = self.watermark;
        let lateness = self.lateness;
        if let Windowing::Session { .. } = self.windowing {
            return self.add_to_session(key, ts, x, out, sides);
        }
        let (start, end) = self.windowing.slice_of(ts);
        let last = self.windowing.last_end(start, end);
        if (last - 1).saturating_add(lateness) <= wm {
            return self.on_late(x);
        }
        self.cow(&key);
        crate::operator::handoff::mark(&mut self.changed, &key);
        let entry = self.keys.entry(key.clone()).or_default();
        let first = entry.pending.first().copied();
        let mut created = false;
        let slice = entry.slices.entry(start).or_insert_with(|| {
            created = true;
            if lateness > 0 {
                self.cleanup
                    .entry((last - 1).saturating_add(lateness))
                    .or_default()
                    .push(key.clone());
            }
            (end, G::Acc::default())
        });
        self.f.add(&mut slice.1, x);
        entry.panes.touched(start);
        if !created && end - 1 > wm {
            // None of the slice's windows has fired: they are pending since it was made.
            return;
        }
        self.windowing.ends_of(start, end, &mut self.ends);
        for &e in &self.ends {
            if e - 1 <= wm {
                // Fired already and within the allowed lateness (or gone): an update.
                if (e - 1).saturating_add(lateness) > wm {
                    let n = entry.fired.entry(e).or_insert(1);
                    let firing = *n;
                    *n += 1;
                    Self::emit_window(
                        &mut self.f,
                        self.windowing,
                        &key,
                        entry,
                        (e, firing),
                        out,
                        sides,
                    );
                }
            } else {
                entry.pending.insert(e);
            }
        }
        let new_first = entry.pending.first().copied();
        if new_first != first {
            register(&mut self.fire, new_first, &key);
        }
    }

    fn add_to_session(
        &mut self,
        key: K,
        ts: EventTime,
        x: I,
        out: &mut Collector<R>,
        sides: &mut SideOutputs,
    ) {
        let Windowing::Session { gap } = self.windowing else {
            return;
        };
        let (wm, lateness) = (self.watermark, self.lateness);
        let (mut start, mut end) = (ts, ts.saturating_add(gap));
        self.cow(&key);
        crate::operator::handoff::mark(&mut self.changed, &key);
        let entry = self.keys.entry(key.clone()).or_default();
        let first = entry.pending.first().copied();
        // Sessions overlapping or touching [start, end) merge into it (as in Flink: two
        // records exactly a gap apart are one session).
        let overlapping: Vec<i64> = entry
            .slices
            .range(..=end)
            .rev()
            .take_while(|(_, (e, _))| *e >= start)
            .map(|(s, _)| *s)
            .collect();
        // A session starting before `start` may still reach into it (take_while stops at
        // the first that does not, which is right: sessions never overlap or touch).
        for s in &overlapping {
            let (e, _) = entry.slices[s];
            start = start.min(*s);
            end = end.max(e);
        }
        if (end - 1).saturating_add(lateness) <= wm {
            if entry.is_empty() {
                self.keys.remove(&key);
            }
            return self.on_late(x);
        }
        let mut acc = G::Acc::default();
        let mut firings = 0;
        for s in overlapping {
            if let Some((e, a)) = entry.slices.remove(&s) {
                self.f.merge(&mut acc, &a);
                entry.pending.remove(&e);
                if let Some(n) = entry.fired.remove(&e) {
                    firings = firings.max(n);
                }
            }
        }
        self.f.add(&mut acc, x);
        entry.slices.insert(start, (end, acc));
        if lateness > 0 {
            self.cleanup
                .entry((end - 1).saturating_add(lateness))
                .or_default()
                .push(key.clone());
        }
        if end - 1 <= wm {
            // The merged session's end has passed: it fires now, as an update if a part of
            // it had fired.
            entry.fired.insert(end, firings + 1);
            Self::emit_window(
                &mut self.f,
                self.windowing,
                &key,
                entry,
                (end, firings),
                out,
                sides,
            );
        } else if entry.pending.insert(end) && firings > 0 {
            entry.fired.insert(end, firings);
        }
        let new_first = entry.pending.first().copied();
        if new_first != first {
            register(&mut self.fire, new_first, &key);
        }
    }

    fn on_late(&mut self, x: I) {
        if self.late_attached {
            self.late.push(x);
        } else {
            self.late_dropped += 1;
        }
    }

    /// Whether a window at or below the watermark has not fired (or a key not been purged)
    /// yet.
    fn due(&self) -> bool {
        let wm = self.watermark;
        self.fire.keys().next().is_some_and(|t| *t <= wm)
            || self.cleanup.keys().next().is_some_and(|t| *t <= wm)
    }

    /// Fires up to `budget` of the windows the watermark completed and purges what it
    /// expired; the rest on the next call (`due`). Keys are taken in the order of their
    /// earliest window due, and a key fires all its windows due at once, in order (a
    /// watermark that passes many windows of a key, e.g. the end of input over 60 s windows
    /// sliding by 1 s, visits each key once, not once per window).
    ///
    /// With a backup (a canonical order), a visit fires only the key's windows ending at the
    /// time visited: the results then come in (time, key hash) order, whatever watermark
    /// arrived during the storm and wherever a budget ended, as the backup's replay needs.
    fn advance(&mut self, budget: usize, out: &mut Collector<R>, sides: &mut SideOutputs) {
        let wm = self.watermark;
        let canonical = self.fire_order.is_canonical();
        let mut n = 0;
        while n < budget {
            let Some((t, key)) = pop_first_due(&mut self.fire, wm, &mut self.fire_order) else {
                break;
            };
            self.cow(&key);
            let Some(w) = self.keys.get_mut(&key) else {
                continue;
            };
            if w.pending.first() != Some(&(t + 1)) {
                continue; // merged away, or fired already: not the key's entry any more
            }
            crate::operator::handoff::mark(&mut self.changed, &key);
            let up_to = if canonical { t } else { wm };
            while n < budget {
                let Some(&end) = w.pending.first() else {
                    break;
                };
                if end - 1 > up_to {
                    break;
                }
                w.pending.pop_first();
                let firing = w.fired.get(&end).copied().unwrap_or(0);
                Self::emit_window(
                    &mut self.f,
                    self.windowing,
                    &key,
                    w,
                    (end, firing),
                    out,
                    sides,
                );
                if self.lateness > 0 {
                    w.fired.insert(end, firing + 1);
                }
                n += 1;
            }
            let next = w.pending.first().copied();
            register(&mut self.fire, next, &key);
            self.purge(&key);
        }
        while n < budget {
            let Some((_, key)) = pop_first_due(&mut self.cleanup, wm, &mut self.cleanup_order)
            else {
                break;
            };
            self.purge(&key);
            n += 1;
        }
    }

    /// The watermark that can go on now: the input's, held below the earliest window still
    /// to fire at or before it. `None` if it would not advance.
    fn watermark_to_forward(&mut self) -> Option<EventTime> {
        let earliest = self.fire.keys().next().copied();
        advance_forwarded(earliest, self.watermark, &mut self.forwarded)
    }

    /// Drops the slices of `key` no window can use any more, and the key when nothing is left.
    fn purge(&mut self, key: &K) {
        let (wm, lateness, windowing) = (self.watermark, self.lateness, self.windowing);
        self.cow(key);
        let Some(w) = self.keys.get_mut(key) else {
            return;
        };
        let expired = |end: i64| (end - 1).saturating_add(lateness) <= wm;
        // Slices are in start order and so are their last windows: if the first is still
        // needed, every one is (the common case, checked without a walk over them).
        let first_live = w
            .slices
            .first_key_value()
            .is_some_and(|(&s, (e, _))| !expired(windowing.last_end(s, *e)));
        if first_live && w.fired.is_empty() {
            return;
        }
        crate::operator::handoff::mark(&mut self.changed, key);
        // A slice goes once its last window is past the lateness and none of its windows is
        // still to fire (one watermark can pass several windows of a key).
        let pending = &w.pending;
        w.slices.retain(|&s, (e, _)| {
            let last = windowing.last_end(s, *e);
            !expired(last) || pending.any_in(*e, last)
        });
        w.fired.retain(|&e, _| !expired(e));
        if w.is_empty() {
            self.keys.remove(key);
        }
    }

    /// Rebuilds the fire and cleanup indexes from the keys' windows (after a restore).
    fn reindex(&mut self) {
        self.fire.clear();
        self.cleanup.clear();
        for (k, w) in &self.keys {
            register(&mut self.fire, w.pending.first().copied(), k);
            if self.lateness > 0 {
                let latest = w
                    .slices
                    .iter()
                    .map(|(&s, (e, _))| self.windowing.last_end(s, *e))
                    .chain(w.fired.keys().copied())
                    .max();
                if let Some(e) = latest {
                    self.cleanup
                        .entry((e - 1).saturating_add(self.lateness))
                        .or_default()
                        .push(k.clone());
                }
            }
        }
    }
}

/// Puts `key` in the fire index at its earliest window still to fire (`first`, an end), if
/// any. The index holds each key with pending windows at least there; an entry that is no
/// longer the key's earliest (fired, merged away) is skipped when it comes up.
fn register<K: Clone>(fire: &mut BTreeMap<EventTime, Vec<K>>, first: Option<i64>, key: &K) {
    if let Some(end) = first {
        fire.entry(end - 1).or_default().push(key.clone());
    }
}

impl<KF, K, I, R, G> WindowOp<KF, K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    pub(crate) fn new(
        key_fn: KF,
        f: G,
        spec: WindowSpec<I>,
        core: OpCore<R>,
        late_next: BoxOutput<I>,
        cfg: &crate::EnvConfig,
        restored: Option<&[u8]>,
    ) -> Result<Self, String> {
        let (max_parallelism, budget) = (cfg.max_parallelism, cfg.batch_size.max(1));
        let mut op = WindowOp {
            key_fn,
            inner: Inner {
                ts: spec.ts,
                windowing: spec.windowing,
                lateness: spec.lateness,
                f,
                keys: HashMap::default(),
                fire: BTreeMap::new(),
                cleanup: BTreeMap::new(),
                fire_order: DueOrder::new(spec.backed_up),
                cleanup_order: DueOrder::default(),
                watermark: EventTime::MIN,
                forwarded: EventTime::MIN,
                late: Vec::new(),
                late_attached: spec.late_attached,
                late_dropped: 0,
                ends: Vec::new(),
                // Logged for a backup's hand-offs (or incremental checkpoints: `with_chain`).
                changed: spec
                    .backed_up
                    .then(crate::operator::handoff::Changed::default),
                copying: None,
                _r: std::marker::PhantomData,
            },
            core,
            late_next,
            max_parallelism,
            budget,
            chain: None,
        };
        if let Some(payload) = restored {
            op.restore(payload)?;
        }
        Ok(op)
    }

    fn restore(&mut self, payload: &[u8]) -> Result<(), String> {
        use crate::hooks::__private as p;
        let (own, groups): (
            crate::hooks::StateSnapshot,
            KeyedPayload<K, KeyWindows<G::Acc>>,
        ) = crate::checkpoint::decode(payload)?;
        let mut fields = p::decode(STATE_NAME, STATE_VERSION, &own).map_err(|e| e.to_string())?;
        let marks: Vec<EventTime> =
            p::take_field(&mut fields, STATE_NAME, WATERMARK_FIELD).map_err(|e| e.to_string())?;
        // Several old subtasks' (a rescale): the lowest, so nothing on time becomes late.
        self.inner.watermark = marks.into_iter().min().unwrap_or(EventTime::MIN);
        for (_, entries) in groups {
            self.inner.keys.extend(entries);
        }
        self.inner.reindex();
        Ok(())
    }

    /// Fires up to `budget` due windows, pushes them on, then the watermark they allow
    /// (what a watermark completes goes before it).
    fn fire_some(&mut self, budget: usize) -> Result<(), TaskError> {
        let inner = &mut self.inner;
        self.core
            .run_with_sides(0, |out, sides| inner.advance(budget, out, sides))?;
        self.emit()?;
        if let Some(t) = self.inner.watermark_to_forward() {
            self.core.next.watermark(Watermark::At(t))?;
            self.late_next.watermark(Watermark::At(t))?;
        }
        Ok(())
    }

    /// Pushes the results and late records gathered so far on.
    fn emit(&mut self) -> Result<(), TaskError> {
        if self.inner.late_dropped > 0 {
            self.core.counters.late_dropped.fetch_add(
                std::mem::take(&mut self.inner.late_dropped),
                crate::sync::atomic::Ordering::Relaxed,
            );
        }
        self.core.emit()?;
        if !self.inner.late.is_empty() {
            self.core.counters.add_out(self.inner.late.len());
            self.late_next.push(&mut self.inner.late)?;
        }
        Ok(())
    }
}

impl<KF, K, I, R, G> Output<I> for WindowOp<KF, K, I, R, G>
where
    KF: FnMut(&I) -> K + Send,
    K: crate::Key,
    I: Send,
    R: Send,
    G: WindowFn<K, I, R>,
{
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let (key_fn, inner) = (&mut self.key_fn, &mut self.inner);
        self.core.run_with_sides(batch.len(), |out, sides| {
            for x in batch.drain(..) {
                let k = key_fn(&x);
                inner.add(k, x, out, sides);
            }
        })?;
        self.emit()
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        match w {
            Watermark::At(t) if t > self.inner.watermark => {
                self.inner.watermark = t;
                // A first run now, the rest from `poll_pending` (records wait meanwhile).
                self.fire_some(self.budget)
            }
            Watermark::At(_) => Ok(()),
            Watermark::Idle => {
                self.core.next.watermark(w)?;
                self.late_next.watermark(w)
            }
        }
    }
    fn holds_records(&self) -> bool {
        self.inner.due()
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.finish_copy();
        // The end of input came with the `MAX` watermark: what is left fires now, a budget
        // at a time (no one batch of every window).
        while self.inner.due() {
            self.fire_some(self.budget)?;
        }
        self.fire_some(usize::MAX)?;
        self.emit()?;
        self.late_next.finish()?;
        self.core.finish_with(|_| {})
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.snapshot_state(w)?;
        self.core.next.barrier(id, w)?;
        self.late_next.barrier(id, w)
    }
    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        // A checkpoint's copy still under way (a barrier came before it was done) ends here.
        self.finish_copy();
        if self.inner.changed.is_some() && w.changes_of(&self.core.info.uid).is_some() {
            return self.hand_changes(w);
        }
        if let (Some(_), Some((id, root))) = (&self.chain, w.incremental.clone()) {
            return self.snapshot_incremental(id, &root, w);
        }
        // Taken whole (an unaligned checkpoint, one handed over, a query): a chain starts
        // again at the next checkpoint.
        self.taken_whole();
        let payload = self.whole_payload(w.progress.as_ref())?;
        put_keyed(w, &self.core.info, payload);
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)?;
        self.late_next.notify_complete(id)
    }
    fn flush(&mut self) {
        self.core.next.flush();
        self.late_next.flush();
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
        if self.inner.due() {
            if let Err(e) = self.fire_some(self.budget) {
                return std::task::Poll::Ready(Err(e));
            }
            if self.inner.due() {
                cx.waker().wake_by_ref();
            }
        }
        // A checkpoint's copy goes on a budget of keys at a time, between units of input.
        if self.inner.copying.is_some() && !self.copy_step(false) {
            cx.waker().wake_by_ref();
        }
        crate::operator::all_ready([
            self.core.next.poll_pending(cx),
            self.late_next.poll_pending(cx),
        ])
    }
    fn usage(&self, usage: &mut QueueUsage) {
        self.core.next.usage(usage);
        self.late_next.usage(usage);
    }
    fn control(&mut self, c: &mut Control<'_>) {
        let (next, late) = (&mut self.core.next, &mut self.late_next);
        c.here_or(&self.core.info.uid, |c| {
            next.control(c);
            if c.outcome.is_none() {
                late.control(c);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sorted deque of pending ends does what a `BTreeSet` does, and is encoded as one.
    #[test]
    fn pending_ends_behave_and_encode_as_a_sorted_set() {
        let mut ends = Ends::default();
        let mut set = std::collections::BTreeSet::new();
        let mut x: u64 = 3;
        for _ in 0..2_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let e = (x >> 33) as i64 % 200;
            match x % 5 {
                0 => assert_eq!(ends.remove(&e), set.remove(&e)),
                1 => assert_eq!(ends.pop_first(), set.pop_first()),
                _ => assert_eq!(ends.insert(e), set.insert(e)),
            }
            assert_eq!(ends.first(), set.first());
            assert_eq!(ends.any_in(e, e + 7), set.range(e..=e + 7).next().is_some());
        }
        let bytes = crate::checkpoint::encode(&set).expect("encodes");
        assert_eq!(crate::checkpoint::encode(&ends).expect("encodes"), bytes);
        let back: Ends = crate::checkpoint::decode(&bytes).expect("decodes");
        assert!(back.0.iter().eq(set.iter()));
    }

    /// Windows sliding over panes, with panes changed and missing on the way, merge what a
    /// fresh sum over `[start, end)` gives.
    #[test]
    fn the_pane_queue_merges_what_a_fresh_sum_gives() {
        let (size, slide) = (60, 5);
        let mut slices: BTreeMap<i64, (i64, u64)> = BTreeMap::new();
        let mut q: PaneQueue<u64> = PaneQueue::default();
        let mut x: u64 = 7;
        for end in (size..2_000).step_by(slide as usize) {
            // New panes arrive ahead of the window, some are skipped, some get late records.
            for s in [end, end + 5, end + 10] {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                if !x.is_multiple_of(3) {
                    slices.entry(s).or_insert((s + 5, 0)).1 += x % 10;
                }
            }
            if x.is_multiple_of(7) {
                let s = end - 10;
                slices.entry(s).or_insert((s + 5, 0)).1 += 1;
                q.touched(s);
            }
            let start = end - size;
            let want: u64 = slices.range(start..end).map(|(_, (_, a))| *a).sum();
            let got = q.window(start, end, &slices, |a, b| *a += *b);
            let any = slices.range(start..end).next().is_some();
            assert_eq!(got, any.then_some(want), "window [{start}, {end})");
            slices.retain(|s, _| *s >= start);
        }
    }
}
