//! `lookup`: the operator that runs an [`AsyncLookup`]'s calls for one subtask.
//!
//! Where the calls run: inside the operator, polled with the subtask's own task waker from
//! [`Output::poll_pending`], which the data lane calls before it takes any input (and while
//! it drains at the end). A completed call wakes the subtask's task; its next poll moves the
//! results out. No extra task, channel or lock: the futures, the cache and the records share
//! the subtask's thread, and backpressure is the lane's ordinary rule — `poll_pending` is
//! `Pending` while `capacity` records are unfinished.
//!
//! Unfinished records live in a slab of entries (slots reused, no allocation per record
//! once warm); `waiting` holds those not issued yet (capacity full), `order` (ordered mode)
//! the emission order. A call is a `Call` in a `FuturesUnordered`, abortable so that a timed
//! out call is dropped; deadlines are one heap and one timer, not a timer per call.
//!
//! At a barrier the entries' records (inputs, or held results) go into the checkpoint in
//! input order and the barrier goes on at once; at the end of input the operator holds the
//! end back until every entry is emitted. This module does not own the cache (`cache`) or
//! the live keys (`settings`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures::future::{AbortHandle, Abortable};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use serde::{Deserialize, Serialize};

use super::cache::Cache;
use super::settings::{Change, Settings};
use super::{AsyncLookup, CacheKind, LoadFuture, LookupConfig, LookupCounters, OnTimeout};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::hooks::ConfigError;
use crate::metrics::QueueUsage;
use crate::operator::{all_ready, BoxOutput, Collector, Control, ControlAction, OpCore, Output};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

/// The operator's name in its state envelope.
const STATE_NAME: &str = "lookup";
const STATE_VERSION: u32 = 1;
/// The state field that holds the unfinished records (split over subtasks on rescale).
pub(crate) const STATE_FIELD: &str = "unfinished";

/// A record whose result was not emitted at a checkpoint.
#[derive(Debug, Deserialize)]
enum Unfinished<T, O> {
    /// Its call was in flight or not made yet: made again after a restore.
    Input(T),
    /// Its result was held back (ordered mode, behind a slower call).
    Output(O),
}

/// [`Unfinished`] by reference, for writing (same encoding).
#[derive(Serialize)]
#[serde(rename = "Unfinished")]
enum UnfinishedRef<'a, T, O> {
    Input(&'a T),
    Output(&'a O),
}

enum State<T, K, O> {
    /// Not issued yet (capacity full).
    Waiting { record: T, key: K },
    InFlight {
        record: T,
        key: K,
        attempt: u32,
        abort: AbortHandle,
    },
    /// Result ready, held for order.
    Done(O),
    /// Sent to the side output; its place in the order is freed when it reaches the front.
    Gone,
}

struct Entry<T, K, O> {
    seq: u64,
    state: State<T, K, O>,
}

/// A slot of the entry slab.
type Slot<T, L> = Option<Entry<T, <L as AsyncLookup<T>>::Key, <L as AsyncLookup<T>>::Out>>;

/// Why a call did not bring a value.
enum Failure {
    TimedOut,
    /// The service's error.
    Error(String),
}

/// One call: its entry (slot and sequence number) and attempt, and the user's future.
struct Call<V, E> {
    slot: usize,
    seq: u64,
    attempt: u32,
    fut: Abortable<super::LookupFuture<V, E>>,
}

impl<V, E> Future for Call<V, E> {
    /// `None`: aborted (timed out).
    type Output = (usize, u64, u32, Option<Result<V, E>>);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        Pin::new(&mut this.fut)
            .poll(cx)
            .map(|r| (this.slot, this.seq, this.attempt, r.ok()))
    }
}

/// Counts since they were last added to the shared counters.
#[derive(Default)]
struct Tally {
    hits: u64,
    misses: u64,
    timeouts: u64,
    retries: u64,
}

/// Everything but the outputs (so user code can run with the collector borrowed).
struct Inner<T, L: AsyncLookup<T>> {
    f: L,
    info: Arc<crate::OperatorInfo>,
    settings: Settings,
    cache: Cache<L::Key, L::Value>,
    entries: Vec<Slot<T, L>>,
    free: Vec<usize>,
    /// Entries not issued yet, oldest first.
    waiting: VecDeque<usize>,
    /// Ordered mode: every entry, in input order.
    order: VecDeque<usize>,
    /// Entries held (any state).
    held: usize,
    in_flight: usize,
    next_seq: u64,
    calls: FuturesUnordered<Call<L::Value, L::Error>>,
    /// (deadline, seq, slot, attempt) of calls made; stale ones are skipped.
    deadlines: BinaryHeap<Reverse<(Instant, u64, usize, u32)>>,
    timer: Option<Pin<Box<actix_rt::time::Sleep>>>,
    timer_at: Option<Instant>,
    loading: Option<LoadFuture<L::Key, L::Value, L::Error>>,
    opened: bool,
    /// Unfinished records of the restored checkpoint, taken at open.
    restored: Option<Vec<Unfinished<T, L::Out>>>,
    finishing: bool,
    finished: bool,
    side: Collector<T>,
    /// The lane's waker, to wake it after a live change.
    waker: Option<Waker>,
    /// Output was emitted since the last flush.
    emitted: bool,
    counters: Arc<LookupCounters>,
    tally: Tally,
    /// Watermarks held behind the records that came before them, with the sequence number
    /// of the first record after each: one goes on once every earlier record is out.
    watermarks: VecDeque<(u64, crate::time::Watermark)>,
}

pub(crate) struct LookupOp<T, L: AsyncLookup<T>> {
    core: OpCore<L::Out>,
    side_next: BoxOutput<T>,
    inner: Inner<T, L>,
}

impl<T: crate::Data, L: AsyncLookup<T>> LookupOp<T, L> {
    /// The operator of one subtask, from its checkpointed state if `restored`, with the live
    /// changes made so far applied.
    pub(crate) fn new(
        f: L,
        config: &LookupConfig,
        core: OpCore<L::Out>,
        side_next: BoxOutput<T>,
        restored: Option<&[u8]>,
        live_config: &[(String, String)],
    ) -> Result<Self, String> {
        let settings = Settings::new(config);
        let counters = config
            .metrics
            .register(core.info.subtask, core.info.parallelism);
        let restored = restored.map(decode_state::<T, L::Out>).transpose()?;
        let mut op = LookupOp {
            inner: Inner {
                f,
                info: core.info.clone(),
                cache: Cache::new(settings.cache, settings.size, settings.ttl),
                settings,
                entries: Vec::new(),
                free: Vec::new(),
                waiting: VecDeque::new(),
                order: VecDeque::new(),
                held: 0,
                in_flight: 0,
                next_seq: 0,
                calls: FuturesUnordered::new(),
                deadlines: BinaryHeap::new(),
                timer: None,
                timer_at: None,
                loading: None,
                opened: false,
                restored,
                finishing: false,
                finished: false,
                side: Collector::default(),
                waker: None,
                emitted: false,
                counters,
                tally: Tally::default(),
                watermarks: VecDeque::new(),
            },
            core,
            side_next,
        };
        for (key, value) in live_config {
            op.inner
                .configure(key, value)
                .map_err(|e| format!("cannot apply live config: {e}"))?;
        }
        op.inner.publish();
        Ok(op)
    }
}

fn decode_state<T: crate::Data, O: crate::Data>(
    payload: &[u8],
) -> Result<Vec<Unfinished<T, O>>, String> {
    use crate::hooks::__private as p;
    let snap: crate::hooks::StateSnapshot = crate::checkpoint::decode(payload)?;
    let mut fields = p::decode(STATE_NAME, STATE_VERSION, &snap).map_err(|e| e.to_string())?;
    p::take_field(&mut fields, STATE_NAME, STATE_FIELD).map_err(|e| e.to_string())
}

impl<T: crate::Data, L: AsyncLookup<T>> Inner<T, L> {
    fn lookup_error(&self, key: String, message: String) -> TaskError {
        TaskError::Lookup {
            uid: self.info.uid.clone(),
            subtask: self.info.subtask,
            key,
            message,
        }
    }

    fn alloc(&mut self, state: State<T, L::Key, L::Out>) -> usize {
        let entry = Entry {
            seq: self.next_seq,
            state,
        };
        self.next_seq += 1;
        self.held += 1;
        match self.free.pop() {
            Some(i) => {
                self.entries[i] = Some(entry);
                i
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        }
    }

    fn release(&mut self, slot: usize) {
        self.entries[slot] = None;
        self.free.push(slot);
        self.held -= 1;
    }

    /// One record: answered from the cache, or held until its call completes.
    fn accept(&mut self, record: T, out: &mut Collector<L::Out>, now: Instant) {
        let key = self.f.key(&record);
        if let Some(v) = self.cache.get(&key, now) {
            self.tally.hits += 1;
            let o = self.f.enrich(record, v);
            self.resolved_now(o, out);
            return;
        }
        let slot = self.alloc(State::Waiting { record, key });
        self.waiting.push_back(slot);
        if self.settings.ordered {
            self.order.push_back(slot);
        }
    }

    /// A result without an entry: out now, unless ordered results are held before it.
    fn resolved_now(&mut self, o: L::Out, out: &mut Collector<L::Out>) {
        if self.settings.ordered && !self.order.is_empty() {
            let slot = self.alloc(State::Done(o));
            self.order.push_back(slot);
        } else {
            out.collect(o);
        }
    }

    /// The result of the entry in `slot`.
    fn resolve(&mut self, slot: usize, o: L::Out, out: &mut Collector<L::Out>) {
        if self.settings.ordered {
            if let Some(e) = self.entries[slot].as_mut() {
                e.state = State::Done(o);
            }
            self.drain_order(out);
        } else {
            out.collect(o);
            self.release(slot);
        }
    }

    /// Ordered mode: emits the results at the front of the order.
    fn drain_order(&mut self, out: &mut Collector<L::Out>) {
        while let Some(&slot) = self.order.front() {
            let Some(e) = self.entries[slot].as_mut() else {
                unreachable!("internal error: an ordered slot is empty")
            };
            match std::mem::replace(&mut e.state, State::Gone) {
                State::Done(o) => out.collect(o),
                State::Gone => {}
                other => {
                    e.state = other;
                    return;
                }
            }
            self.order.pop_front();
            self.release(slot);
        }
    }

    /// Issues waiting entries while capacity allows; how many calls were made.
    fn issue(&mut self, now: Instant, out: &mut Collector<L::Out>) -> usize {
        let mut made = 0;
        while self.in_flight < self.settings.capacity {
            let Some(slot) = self.waiting.pop_front() else {
                break;
            };
            let Some(e) = self.entries[slot].as_mut() else {
                continue;
            };
            let State::Waiting { record, key } = std::mem::replace(&mut e.state, State::Gone)
            else {
                continue;
            };
            // An earlier call may have brought the key in meanwhile.
            if let Some(v) = self.cache.get(&key, now) {
                self.tally.hits += 1;
                let o = self.f.enrich(record, v);
                self.resolve(slot, o, out);
                continue;
            }
            self.tally.misses += 1;
            self.call(slot, record, key, 0, now);
            made += 1;
        }
        made
    }

    fn call(&mut self, slot: usize, record: T, key: L::Key, attempt: u32, now: Instant) {
        let fut = self.f.lookup(&key);
        let (abort, registration) = AbortHandle::new_pair();
        let Some(e) = self.entries[slot].as_mut() else {
            return;
        };
        let seq = e.seq;
        e.state = State::InFlight {
            record,
            key,
            attempt,
            abort,
        };
        self.calls.push(Call {
            slot,
            seq,
            attempt,
            fut: Abortable::new(fut, registration),
        });
        self.deadlines
            .push(Reverse((now + self.settings.timeout, seq, slot, attempt)));
        self.in_flight += 1;
    }

    /// Takes the entry's record and key if it is the call `(seq, attempt)` in flight.
    fn take_call(&mut self, slot: usize, seq: u64, attempt: u32) -> Option<(T, L::Key)> {
        let e = self.entries.get_mut(slot)?.as_mut()?;
        match &e.state {
            State::InFlight { attempt: a, .. } if e.seq == seq && *a == attempt => {}
            _ => return None,
        }
        let State::InFlight {
            record, key, abort, ..
        } = std::mem::replace(&mut e.state, State::Gone)
        else {
            return None;
        };
        abort.abort();
        self.in_flight -= 1;
        Some((record, key))
    }

    /// A call failed: retried, sent to the side output (timed out), or the job fails.
    fn failed(
        &mut self,
        slot: usize,
        record: T,
        key: L::Key,
        attempt: u32,
        failure: Failure,
        now: Instant,
    ) -> Result<(), TaskError> {
        if attempt < self.settings.retries {
            self.tally.retries += 1;
            self.call(slot, record, key, attempt + 1, now);
            return Ok(());
        }
        let why = match failure {
            Failure::TimedOut if self.settings.on_timeout == OnTimeout::SideOutput => None,
            Failure::TimedOut => Some(format!("timed out after {:?}", self.settings.timeout)),
            Failure::Error(e) => Some(e),
        };
        let Some(why) = why else {
            self.side.collect(record);
            if !self.settings.ordered {
                self.release(slot);
            }
            // Ordered: the entry stays `Gone` until it reaches the front.
            return Ok(());
        };
        let attempts = attempt + 1;
        let plural = if attempts == 1 { "" } else { "s" };
        Err(self.lookup_error(
            format!("{key:?}"),
            format!("{why} ({attempts} attempt{plural})"),
        ))
    }

    /// Opens (once): starts the `all` load and takes in the restored records.
    fn open(&mut self, out: &mut Collector<L::Out>, now: Instant) -> Result<(), TaskError> {
        self.opened = true;
        if self.settings.cache == CacheKind::All {
            match self.f.load_all() {
                Some(load) => self.loading = Some(load),
                None => return Err(self.lookup_error(
                    "<load_all>".into(),
                    "the `all` cache needs AsyncLookup::load_all, which this lookup does not have"
                        .into(),
                )),
            }
        }
        for u in self.restored.take().into_iter().flatten() {
            match u {
                Unfinished::Input(t) => self.accept(t, out, now),
                Unfinished::Output(o) => self.resolved_now(o, out),
            }
        }
        Ok(())
    }

    /// Everything that can move now: the load, completed calls, timeouts, waiting entries.
    fn progress(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<L::Out>,
        now: Instant,
    ) -> Result<(), TaskError> {
        if !self.opened {
            self.open(out, now)?;
        }
        if let Some(load) = self.loading.as_mut() {
            if let Poll::Ready(r) = load.poll_unpin(cx) {
                self.loading = None;
                match r {
                    Ok(pairs) if self.settings.cache == CacheKind::All => {
                        for (k, v) in pairs {
                            self.cache.insert(k, v, now);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        return Err(
                            self.lookup_error("<load_all>".into(), format!("cannot load: {e}"))
                        )
                    }
                }
            }
        }
        loop {
            let mut moved = self.issue(now, out) > 0;
            while let Poll::Ready(Some((slot, seq, attempt, result))) =
                self.calls.poll_next_unpin(cx)
            {
                let Some(result) = result else { continue };
                let Some((record, key)) = self.take_call(slot, seq, attempt) else {
                    continue;
                };
                moved = true;
                match result {
                    Ok(v) => {
                        let o = self.f.enrich(record, &v);
                        if self.cache.keeps() {
                            self.cache.insert(key, v, now);
                        }
                        self.resolve(slot, o, out);
                    }
                    Err(e) => {
                        let failure = Failure::Error(e.to_string());
                        self.failed(slot, record, key, attempt, failure, now)?
                    }
                }
            }
            while let Some(&Reverse((at, seq, slot, attempt))) = self.deadlines.peek() {
                if at > now {
                    break;
                }
                self.deadlines.pop();
                let Some((record, key)) = self.take_call(slot, seq, attempt) else {
                    continue;
                };
                moved = true;
                self.tally.timeouts += 1;
                self.failed(slot, record, key, attempt, Failure::TimedOut, now)?;
            }
            if self.settings.ordered {
                self.drain_order(out);
            }
            if !moved {
                break;
            }
        }
        self.arm_timer(cx);
        Ok(())
    }

    /// Sets the timer to the earliest deadline of a call in flight, and registers the waker.
    fn arm_timer(&mut self, cx: &mut Context<'_>) {
        // Stale deadlines (calls that completed) pile up until they are due: clear them out
        // when they outnumber the calls in flight.
        if self.deadlines.len() > 2 * self.in_flight + 64 {
            let entries = &self.entries;
            self.deadlines.retain(|Reverse((_, seq, slot, attempt))| {
                matches!(
                    entries.get(*slot),
                    Some(Some(Entry { seq: s, state: State::InFlight { attempt: a, .. } }))
                        if s == seq && a == attempt
                )
            });
        }
        if self.in_flight == 0 {
            return;
        }
        let Some(&Reverse((at, ..))) = self.deadlines.peek() else {
            return;
        };
        let deadline = actix_rt::time::Instant::from_std(at);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(actix_rt::time::sleep_until(deadline)));
        if self.timer_at != Some(at) {
            timer.as_mut().reset(deadline);
            self.timer_at = Some(at);
        }
        if timer.as_mut().poll(cx).is_ready() {
            // Due already: look again at once.
            cx.waker().wake_by_ref();
        }
    }

    /// Whether new input may come in.
    fn accepts_input(&self) -> bool {
        self.loading.is_none() && self.held < self.settings.capacity
    }

    /// A live change: checked, then applied (a refusal changes nothing).
    fn configure(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let change = Settings::parse(&self.info.uid, key, value)?;
        match change {
            Change::Cache(kind) if kind == self.settings.cache => {}
            Change::Cache(kind) => {
                let load = if kind == CacheKind::All {
                    let f = &mut self.f;
                    let load = catch_unwind(AssertUnwindSafe(|| f.load_all())).map_err(|p| {
                        ConfigError::BadValue {
                            operator: self.info.uid.clone(),
                            key: key.to_owned(),
                            value: value.to_owned(),
                            expected: "none|all|lru".into(),
                            message: format!(
                                "load_all panicked: {}",
                                crate::error::panic_message(&*p)
                            ),
                        }
                    })?;
                    match load {
                        Some(l) => Some(l),
                        None => {
                            return Err(ConfigError::BadValue {
                                operator: self.info.uid.clone(),
                                key: key.to_owned(),
                                value: value.to_owned(),
                                expected: "none|lru (this lookup has no AsyncLookup::load_all)"
                                    .into(),
                                message: "the `all` cache needs a loader".into(),
                            })
                        }
                    }
                } else {
                    None
                };
                self.cache = Cache::new(kind, self.settings.size, self.settings.ttl);
                // Before open, the load starts at open.
                self.loading = load.filter(|_| self.opened);
            }
            Change::Size(n) => self.cache.set_size(n),
            Change::Ttl(t) => self.cache.set_ttl(t),
            Change::Timeout(_) | Change::Capacity(_) | Change::Retries(_) => {}
        }
        self.settings.apply(change);
        self.publish();
        if let Some(w) = &self.waker {
            w.wake_by_ref();
        }
        Ok(())
    }

    /// Adds the counts to the shared counters and sets the gauges (per batch or poll).
    fn publish(&mut self) {
        let c = &self.counters;
        let t = std::mem::take(&mut self.tally);
        for (counter, n) in [
            (&c.hits, t.hits),
            (&c.misses, t.misses),
            (&c.timeouts, t.timeouts),
            (&c.retries, t.retries),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        c.in_flight.store(self.in_flight as u64, Ordering::Relaxed);
        c.cache_size
            .store(self.cache.len() as u64, Ordering::Relaxed);
        c.set_strategy(self.settings.cache);
    }

    /// The sequence number of the oldest record not emitted yet, if any.
    fn oldest_unfinished(&self) -> Option<u64> {
        self.entries.iter().flatten().map(|e| e.seq).min()
    }

    /// The unfinished records, in input order, as a state payload.
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        use crate::hooks::__private as p;
        let mut slots: Vec<usize> = if self.settings.ordered {
            self.order.iter().copied().collect()
        } else {
            let mut s: Vec<usize> = (0..self.entries.len())
                .filter(|&i| self.entries[i].is_some())
                .collect();
            s.sort_by_key(|&i| self.entries[i].as_ref().map_or(0, |e| e.seq));
            s
        };
        let mut items: Vec<UnfinishedRef<'_, T, L::Out>> = Vec::with_capacity(self.held);
        if let Some(r) = &self.restored {
            items.extend(r.iter().map(|u| match u {
                Unfinished::Input(t) => UnfinishedRef::Input(t),
                Unfinished::Output(o) => UnfinishedRef::Output(o),
            }));
        }
        for slot in slots.drain(..) {
            let Some(e) = &self.entries[slot] else {
                continue;
            };
            match &e.state {
                State::Waiting { record, .. } | State::InFlight { record, .. } => {
                    items.push(UnfinishedRef::Input(record))
                }
                State::Done(o) => items.push(UnfinishedRef::Output(o)),
                State::Gone => {}
            }
        }
        let mut fields = Vec::new();
        p::put_field(&mut fields, STATE_NAME, STATE_FIELD, &items).map_err(|e| e.to_string())?;
        let snap = p::encode(STATE_NAME, STATE_VERSION, fields).map_err(|e| e.to_string())?;
        crate::checkpoint::encode(&snap)
    }
}

impl<T: crate::Data, L: AsyncLookup<T>> LookupOp<T, L> {
    /// Pushes what the collectors hold on; finishes the outputs once draining is done.
    fn emit(&mut self) -> Result<(), TaskError> {
        if !self.core.out.is_empty() {
            self.inner.emitted = true;
            self.core.emit()?;
        }
        if !self.inner.side.is_empty() {
            self.inner.emitted = true;
            self.core.counters.add_out(self.inner.side.len());
            self.side_next.push(self.inner.side.buf())?;
        }
        while let Some(&(first_after, w)) = self.inner.watermarks.front() {
            if self
                .inner
                .oldest_unfinished()
                .is_some_and(|oldest| oldest < first_after)
            {
                break;
            }
            self.inner.watermarks.pop_front();
            self.core.next.watermark(w)?;
            self.side_next.watermark(w)?;
        }
        if self.inner.finishing && !self.inner.finished && self.inner.held == 0 {
            self.inner.finished = true;
            self.inner.loading = None;
            self.core.next.finish()?;
            self.side_next.finish()?;
        }
        Ok(())
    }

    /// Runs `f` on the operator's state and collector; a panic of the user code it calls
    /// becomes a [`TaskError::Panic`] naming this operator.
    fn guarded(
        &mut self,
        f: impl FnOnce(&mut Inner<T, L>, &mut Collector<L::Out>) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        let (inner, out) = (&mut self.inner, &mut self.core.out);
        match catch_unwind(AssertUnwindSafe(|| f(inner, out))) {
            Ok(r) => r,
            Err(payload) => {
                self.core.out.buf().clear();
                Err(self.core.panic(payload))
            }
        }
    }

    fn write_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let payload = self
            .inner
            .snapshot()
            .map_err(|e| self.core.state_error(e))?;
        w.put(&self.core.info.uid, None, payload);
        Ok(())
    }
}

impl<T: crate::Data, L: AsyncLookup<T>> Output<T> for LookupOp<T, L> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<(), TaskError> {
        let now = Instant::now();
        if !self.inner.opened {
            // The lane polls before it pushes; anything else opens here.
            self.guarded(|inner, out| inner.open(out, now))?;
        }
        let inner = &mut self.inner;
        let r = self.core.run(batch.len(), |out| {
            for r in batch.drain(..) {
                inner.accept(r, out, now);
            }
            inner.issue(now, out);
        });
        self.inner.publish();
        r?;
        self.emit()
    }

    fn flush(&mut self) {
        self.core.next.flush();
        self.side_next.flush();
    }

    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        // After every record that came before it.
        self.inner.watermarks.push_back((self.inner.next_seq, w));
        self.emit()
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        if !self.inner.opened {
            let now = Instant::now();
            self.guarded(|inner, out| inner.open(out, now))?;
        }
        self.inner.finishing = true;
        // Nothing held: end now; else once the last result is out (see `poll_pending`).
        self.emit()
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let now = Instant::now();
        if !self
            .inner
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.inner.waker = Some(cx.waker().clone());
        }
        let r = self.guarded(|inner, out| inner.progress(cx, out, now));
        self.inner.publish();
        if let Err(e) = r.and_then(|()| self.emit()) {
            return Poll::Ready(Err(e));
        }
        let downstream = all_ready([
            self.core.next.poll_pending(cx),
            self.side_next.poll_pending(cx),
        ]);
        let ready = if self.inner.finishing {
            self.inner.finished
        } else {
            self.inner.accepts_input()
        };
        if ready || matches!(downstream, Poll::Ready(Err(_))) {
            return downstream;
        }
        // Waiting for calls is idle time for the output: send what is buffered.
        if std::mem::take(&mut self.inner.emitted) {
            self.flush();
        }
        Poll::Pending
    }

    fn usage(&self, usage: &mut QueueUsage) {
        self.core.next.usage(usage);
        self.side_next.usage(usage);
    }

    fn control(&mut self, c: &mut Control<'_>) {
        if c.uid != self.core.info.uid {
            self.core.next.control(c);
            if c.outcome.is_none() {
                self.side_next.control(c);
            }
            return;
        }
        match c.action {
            ControlAction::Configure { key, value } => {
                let r = self.inner.configure(key, value);
                c.outcome = Some(crate::operator::ControlOutcome::Configured(r));
            }
            ControlAction::Validate { key, value } => {
                // Parsing is the whole check (a cache `all` without a loader is refused
                // when applied).
                let r = Settings::parse(&self.inner.info.uid, key, value).map(|_| ());
                c.outcome = Some(crate::operator::ControlOutcome::Configured(r));
            }
            ControlAction::Snapshot => c.unsupported(),
        }
    }

    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.write_state(w)?;
        self.core.next.barrier(id, w)?;
        self.side_next.barrier(id, w)
    }

    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        self.write_state(w)
    }

    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)?;
        self.side_next.notify_complete(id)
    }
}
