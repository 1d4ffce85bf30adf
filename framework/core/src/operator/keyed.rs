//! Keyed operators: `process` with per-key state, and rolling `reduce`.
//!
//! The key is extracted again on the receiving side (as in Flink); the upstream hash
//! partitioner sent every record of a key group here. A state entry is created with
//! `Default` on a key's first record, with no clone of the key on the common path.

use std::marker::PhantomData;

use super::timers::{Entry, EntryRef, KeyedContext, TimeDomain, Timers};
use super::{Collector, Control, OpCore, Output};
use crate::checkpoint::{Progress, StateWriter};
use crate::error::TaskError;
use crate::hooks::{StateError, StateSnapshot};
use crate::key_group::key_group_of;
use crate::metrics::QueueUsage;
use crate::state::changes::{is_timed, PromotedImage};
use crate::state::promoted::Promoted;
use crate::state::Entries;
use crate::state::{KeyedState, ValueState};
use crate::time::{EventTime, Timestamps, Watermark};
use crate::Data;

mod run;

use run::KeyedRun;

/// A keyed operator: per-key state, one required method.
///
/// ```
/// use weir::{Collector, KeyedProcessFunction, ValueState};
/// #[derive(Clone)]
/// struct Count;
/// impl KeyedProcessFunction<u64, u64, (u64, u64)> for Count {
///     type State = ValueState<u64>;
///     fn process(&mut self, key: &u64, s: &mut ValueState<u64>, _x: u64, out: &mut Collector<(u64, u64)>) {
///         let n = s.get_or_insert_with(|| 0);
///         *n += 1;
///         out.collect((*key, *n));
///     }
/// }
/// # let _ = Count;
/// ```
pub trait KeyedProcessFunction<K, I, O>: Send + 'static {
    /// What is kept per key.
    type State: Default + Data;
    /// Handles one record of `key`. Implement this, or
    /// [`process_with_ctx`](Self::process_with_ctx) to use timers or the record's timestamp.
    ///
    /// # Panics
    /// The provided body panics (failing the subtask, naming the operator): a function must
    /// implement one of the two.
    fn process(&mut self, _key: &K, _state: &mut Self::State, _input: I, _out: &mut Collector<O>) {
        panic!(
            "{} implements neither `process` nor `process_with_ctx` of KeyedProcessFunction",
            std::any::type_name::<Self>()
        )
    }
    /// Handles one record of `key` with its context: the record's timestamp, the current
    /// watermark, and the key's timers (see [`KeyedContext`]). By default, [`process`](Self::process).
    #[inline]
    fn process_with_ctx(
        &mut self,
        key: &K,
        state: &mut Self::State,
        input: I,
        _ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<O>,
    ) {
        self.process(key, state, input, out)
    }
    /// A timer of `key` registered through the context fired: `ts` is its time, `domain`
    /// its clock. Event-time timers fire in time order as the watermark passes them, before
    /// the watermark goes on; processing-time ones when the wall clock reaches them (those
    /// still pending when the input ends do not fire, as in Flink).
    fn on_timer(
        &mut self,
        _ts: EventTime,
        _domain: TimeDomain,
        _key: &K,
        _state: &mut Self::State,
        _ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<O>,
    ) {
    }
    /// Called once when the input has ended, with every key's state.
    fn end_of_input(&mut self, _state: &mut KeyedState<K, Self::State>, _out: &mut Collector<O>) {}
    /// [`end_of_input`](Self::end_of_input) with a context, through which it may emit to side
    /// outputs. By default, `end_of_input`.
    fn end_of_input_with_ctx(
        &mut self,
        state: &mut KeyedState<K, Self::State>,
        _ctx: &mut crate::ProcessContext<'_>,
        out: &mut Collector<O>,
    ) {
        self.end_of_input(state, out)
    }
}

/// A closure as a [`KeyedProcessFunction`] (what `KeyedStream::process` builds).
pub struct KeyedFn<F, S> {
    f: F,
    _state: PhantomData<fn() -> S>,
}

impl<F: Clone, S> Clone for KeyedFn<F, S> {
    fn clone(&self) -> Self {
        KeyedFn {
            f: self.f.clone(),
            _state: PhantomData,
        }
    }
}

impl<F, S> KeyedFn<F, S> {
    pub(crate) fn new(f: F) -> Self {
        KeyedFn {
            f,
            _state: PhantomData,
        }
    }
}

impl<K, I, O, S, F> KeyedProcessFunction<K, I, O> for KeyedFn<F, S>
where
    F: FnMut(&K, &mut S, I, &mut Collector<O>) + Send + 'static,
    S: Default + Data,
{
    type State = S;
    #[inline]
    fn process(&mut self, key: &K, state: &mut S, input: I, out: &mut Collector<O>) {
        (self.f)(key, state, input, out)
    }
}

/// Rolling reduce: emits the running reduction of each key after every record.
#[derive(Clone)]
pub(crate) struct ReduceFn<F>(pub(crate) F);

impl<K, T, F> KeyedProcessFunction<K, T, T> for ReduceFn<F>
where
    F: FnMut(T, T) -> T + Send + 'static,
    T: Data,
{
    type State = ValueState<T>;
    #[inline]
    fn process(&mut self, _key: &K, state: &mut ValueState<T>, input: T, out: &mut Collector<T>) {
        let next = match state.take() {
            None => input,
            Some(acc) => (self.0)(acc, input),
        };
        out.collect(next.clone());
        state.update(next);
    }
}

pub(crate) struct KeyedOp<KF, K, P: KeyedProcessFunction<K, I, O>, I, O> {
    pub(crate) key_fn: KF,
    pub(crate) f: P,
    pub(crate) state: KeyedState<K, P::State>,
    pub(crate) core: OpCore<O>,
    pub(crate) max_parallelism: usize,
    /// The function's derived hooks (`KeyedStream::apply` of a `KeyedProcessFunction` that
    /// derives `Operator`): live config, and its own per-subtask fields in snapshots.
    pub(crate) hooks: Option<Hooks<P>>,
    /// The records' event time (what the context's `timestamp()` says), if the stream has it.
    pub(crate) ts: Option<Timestamps<I>>,
    pub(crate) timers: Timers<K>,
    /// How many timers fire in one run before the subtask takes other work.
    pub(crate) timer_budget: usize,
    /// Incremental checkpoints (`CheckpointConfig::incremental`), if on for this operator.
    pub(crate) incremental: Option<crate::checkpoint::copy::Incremental<K>>,
    /// The last hand-off's size (entries, encoded bytes): the next one's buffers start
    /// there, not grown (and copied) from nothing.
    pub(crate) handed: (usize, usize),
    pub(crate) _in: PhantomData<fn(I)>,
}

/// Encodes one keyed entry (without timers: an incremental delta is taken only while the
/// operator has none) into an incremental checkpoint's delta.
fn encode_entry<K: crate::Key, S: crate::Data>(
    d: &mut crate::state::changes::KeyedDelta,
    group: usize,
    key: &K,
    state: Option<&S>,
) -> Result<(), String> {
    match state {
        Some(state) => d.push(
            group,
            key,
            Some(&EntryRef {
                key,
                state,
                timers: None,
            }),
        ),
        None => d.push::<K, EntryRef<'_, K, S>>(group, key, None),
    }
}

/// A hand-off finds the changed entries by one pass over the map, not a lookup per changed
/// key, once they are at least `1 / SCAN_SHARE` of the entries in memory.
const SCAN_SHARE: usize = 8;

/// Entries of a promoted backup's state read in after one batch, at most (see `push`).
const READ_IN_PER_BATCH: usize = 4096;

/// The hooks of a function that derives `Operator`, captured where that is known.
pub(crate) struct Hooks<P> {
    control: fn(&mut P, &mut Control<'_>),
    configure: fn(&mut P, &str, &str) -> Result<(), crate::hooks::ConfigError>,
    snapshot: fn(&P) -> Result<StateSnapshot, StateError>,
    restore: fn(&mut P, &StateSnapshot) -> Result<(), StateError>,
    /// The function's state fields (for its rescale rule).
    pub(crate) fields: fn() -> &'static [crate::hooks::StateField],
}

impl<P: crate::hooks::Operator + Clone> Hooks<P> {
    pub(crate) fn of() -> Self {
        Hooks {
            control: |p, c| c.apply(p),
            configure: |p, k, v| p.on_config(k, v),
            snapshot: |p| p.snapshot_state(),
            restore: |p, s| p.restore_state(s),
            fields: P::state_fields,
        }
    }
}

/// The checkpointed form of keyed state: entries grouped by key group (the unit of
/// redistribution when an operator is rescaled), ascending.
pub(crate) type KeyedPayload<K, S> = Vec<(usize, Vec<(K, S)>)>;

/// Keyed entries of another form, grouped by key group.
type Grouped<E> = Vec<(usize, Vec<E>)>;

/// Groups keyed entries by key group, for a snapshot (both keyed operators).
pub(crate) fn by_key_group<'a, K, S>(
    entries: impl IntoIterator<Item = (&'a K, &'a S)>,
    max_parallelism: usize,
) -> KeyedPayload<&'a K, &'a S>
where
    K: std::hash::Hash + 'a,
    S: 'a,
{
    let mut groups: std::collections::BTreeMap<usize, Vec<(&K, &S)>> = Default::default();
    for (k, s) in entries {
        groups
            .entry(key_group_of(k, max_parallelism))
            .or_default()
            .push((k, s));
    }
    groups.into_iter().collect()
}

/// Calls `progress` every [`EVERY`](Self::EVERY) entries encoded.
pub(crate) struct Saying<'p> {
    progress: Option<&'p Progress>,
    encoded: std::cell::Cell<usize>,
}

impl<'p> Saying<'p> {
    const EVERY: usize = 64;

    pub(crate) fn new(progress: Option<&'p Progress>) -> Self {
        Saying {
            progress,
            encoded: std::cell::Cell::new(0),
        }
    }

    pub(crate) fn tick(&self) {
        if let Some(p) = self.progress {
            p();
        }
    }

    fn one(&self) {
        let n = self.encoded.get() + 1;
        self.encoded.set(n);
        if n.is_multiple_of(Self::EVERY) {
            self.tick();
        }
    }
}

/// A slice encoded as a `Vec` of it is (the same bytes), saying it works as it goes.
pub(crate) struct SaidSeq<'a, 'p, E>(pub(crate) &'a [E], pub(crate) &'a Saying<'p>);

impl<E: serde::Serialize> serde::Serialize for SaidSeq<'_, '_, E> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        // A few hundred entries touched before any of them is encoded (`state::touch`): their
        // misses (the map's buckets, the states' heap parts) under way together.
        for chunk in self.0.chunks(crate::state::LOOKAHEAD) {
            chunk.iter().for_each(|e| {
                crate::state::touch::touch(e);
            });
            for e in chunk {
                self.1.one();
                seq.serialize_element(e)?;
            }
        }
        seq.end()
    }
}

/// The key groups a keyed subtask's state file says it covers: its range, if it has one.
pub(crate) fn envelope_range(info: &super::OperatorInfo) -> Option<(usize, usize)> {
    info.key_groups.as_ref().map(|r| (r.start, r.end))
}

/// Adds a keyed subtask's snapshot `payload` to `w`, with the key groups it owns.
pub(crate) fn put_keyed(w: &mut StateWriter, info: &super::OperatorInfo, payload: Vec<u8>) {
    w.put(&info.uid, envelope_range(info), payload);
}

impl<KF, K, P, I, O> KeyedOp<KF, K, P, I, O>
where
    K: crate::Key,
    P: KeyedProcessFunction<K, I, O>,
{
    /// Loads the entries of a checkpointed payload (preceded by the function's own fields if
    /// it has hooks).
    pub(crate) fn restore(&mut self, payload: &[u8]) -> Result<(), TaskError> {
        let groups: Grouped<Entry<K, P::State>> = match &self.hooks {
            None => crate::checkpoint::decode(payload).map_err(|e| self.core.state_error(e))?,
            Some(h) => {
                let (own, groups): (StateSnapshot, Grouped<Entry<K, P::State>>) =
                    crate::checkpoint::decode(payload).map_err(|e| self.core.state_error(e))?;
                (h.restore)(&mut self.f, &own).map_err(|e| self.core.state_error(e.to_string()))?;
                groups
            }
        };
        for (_, entries) in groups {
            for e in entries {
                if !e.timers.is_empty() {
                    self.timers.restore(&e.key, &e.timers);
                }
                self.state.restore(e.key, e.state);
            }
        }
        Ok(())
    }

    /// Starts from the image a promoted backup's backup kept and the hand-offs it had not
    /// applied yet, read in key by key from here on (`state::promoted`); the entries' timers
    /// (only the image's carry any: `changes::pending`) and the function's own fields are
    /// restored now.
    pub(crate) fn restore_promoted(&mut self, image: PromotedImage) -> Result<(), TaskError> {
        if !matches!(self.state.map, Entries::Logged(_)) {
            // Read in key by key only into a map that logs changes (a backed-up operator's
            // in memory); on disk, restored as a snapshot.
            return self.restore(&image.payload());
        }
        match (&self.hooks, image.own()) {
            (Some(h), Some(own)) => {
                let own: StateSnapshot =
                    crate::checkpoint::decode(own).map_err(|e| self.core.state_error(e))?;
                (h.restore)(&mut self.f, &own).map_err(|e| self.core.state_error(e.to_string()))?;
            }
            (Some(_), None) => {
                return Err(self
                    .core
                    .state_error("the backup's state has no fields of the function's own".into()))
            }
            (None, _) => {}
        }
        if image.image.has_timers() {
            for group in image.image.group_numbers() {
                for bytes in image.image.entries_in(group).filter(|e| is_timed(e)) {
                    let e: Entry<K, P::State> =
                        crate::checkpoint::decode(bytes).map_err(|e| self.core.state_error(e))?;
                    self.timers.restore(&e.key, &e.timers);
                }
            }
        }
        self.state
            .start_promoted(Promoted::new(image, self.max_parallelism));
        Ok(())
    }

    /// Hands what changed since the last hand-off to `w` (everything the first time, or when
    /// `w` asks for it): each changed key's entry encoded on its own, so the cost is the
    /// change, not the state (see `state::changes`).
    fn hand_changes(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let full = w.changes_of(&self.core.info.uid) == Some(true);
        let keys = self.state.changes.take(full);
        let timers = self.timers.by_key();
        let mut delta = crate::state::changes::KeyedDelta::new(keys.is_none());
        let (entries, bytes) = self.handed;
        delta.reserve(entries + entries / 4, bytes + bytes / 4);
        // Says it works as often as the whole-state paths do (`Saying::EVERY` entries): an
        // entry's encoding (or, on disk, its read) may be slow, and a hand-off large.
        let progress = |delta: &crate::state::changes::KeyedDelta| {
            if delta.index.len() % Saying::EVERY == Saying::EVERY - 1 {
                w.progress();
            }
        };
        let push = |delta: &mut crate::state::changes::KeyedDelta, k: &K, s: &P::State| {
            progress(delta);
            let entry = EntryRef {
                key: k,
                state: s,
                timers: timers.get(k).map(Vec::as_slice),
            };
            delta.push(key_group_of(k, self.max_parallelism), k, Some(&entry))
        };
        if keys.is_none() {
            // Everything: a promoted backup's entries not read in yet are read in first, a
            // part at a time, saying it works between two parts (a heartbeat's answer).
            while self.state.promoted.is_some() {
                self.state
                    .read_in(READ_IN_PER_BATCH)
                    .map_err(|e| self.core.state_error(e))?;
                w.progress();
            }
        }
        let max_parallelism = self.max_parallelism;
        let gone = |delta: &mut crate::state::changes::KeyedDelta, k: &K| {
            delta.push::<K, EntryRef<'_, K, P::State>>(key_group_of(k, max_parallelism), k, None)
        };
        let scan = keys
            .as_ref()
            .is_some_and(|keys| keys.len().saturating_mul(SCAN_SHARE) >= self.state.len());
        let scanned = if scan {
            self.state
                .try_for_each_changed(|k, s| push(&mut delta, k, s))
        } else {
            None
        };
        // Every entry in memory changed, none gone: the hand-off holds the whole state, and
        // its backup takes it as its image instead of applying it entry by entry
        // (`backup::image`).
        let whole = self.state.promoted.is_none()
            && matches!((&keys, &scanned), (Some(keys), Some(Ok(n)))
                if *n == keys.len() && *n == self.state.len());
        let pushed = match (&keys, scanned) {
            (None, _) => self
                .state
                .try_for_each(|k, s| push(&mut delta, k, s), &|| w.progress()),
            (Some(keys), Some(Ok(n))) if n == keys.len() => Ok(()),
            // Fewer entries than keys logged: the others are gone (or were logged twice).
            (Some(keys), Some(Ok(_))) => keys.iter().try_for_each(|k| {
                if self.state.holds(k)? {
                    Ok(())
                } else {
                    gone(&mut delta, k)
                }
            }),
            (Some(_), Some(Err(e))) => Err(e),
            (Some(keys), None) => self.state.read_each(keys, |k, s| match s {
                Some(s) => push(&mut delta, k, s),
                None => gone(&mut delta, k),
            }),
        };
        pushed.map_err(|e| self.core.state_error(e))?;
        delta.full |= whole;
        if let Some(h) = &self.hooks {
            let own = (h.snapshot)(&self.f).map_err(|e| self.core.state_error(e.to_string()))?;
            delta.own =
                Some(crate::checkpoint::encode(&own).map_err(|e| self.core.state_error(e))?);
        }
        self.handed = (delta.index.len(), delta.bytes.len());
        let info = &self.core.info;
        w.put_changes(&info.uid, envelope_range(info), delta);
        Ok(())
    }

    /// The whole state's snapshot payload: entries by key group, with their timers, after
    /// the function's own fields if it has hooks.
    /// `progress` is called now and then while a large state is encoded (a backed-up
    /// primary's: its supervisor must not take it for hung meanwhile).
    fn whole_payload(&mut self, progress: Option<&Progress>) -> Result<Vec<u8>, TaskError> {
        if self.state.on_disk() {
            return self.whole_payload_from_disk(progress);
        }
        self.state
            .load_all()
            .map_err(|e| self.core.state_error(e))?;
        let said = Saying::new(progress);
        let timers = self.timers.by_key();
        said.tick();
        let groups: Grouped<EntryRef<'_, K, P::State>> =
            by_key_group(self.state.iter(), self.max_parallelism)
                .into_iter()
                .map(|(g, entries)| {
                    let entries = entries.into_iter().map(|(key, state)| EntryRef {
                        key,
                        state,
                        timers: timers.get(key).map(Vec::as_slice),
                    });
                    (g, entries.collect())
                })
                .collect();
        said.tick();
        let groups: Vec<(usize, SaidSeq<'_, '_, _>)> = groups
            .iter()
            .map(|(g, entries)| (*g, SaidSeq(entries, &said)))
            .collect();
        match &self.hooks {
            None => crate::checkpoint::encode(&groups),
            Some(h) => {
                let own =
                    (h.snapshot)(&self.f).map_err(|e| self.core.state_error(e.to_string()))?;
                crate::checkpoint::encode(&(own, groups))
            }
        }
        .map_err(|e| self.core.state_error(e))
    }

    /// [`whole_payload`](Self::whole_payload) of a state on disk: the same CBOR, written as
    /// the store gives the entries (by key group ascending), one entry decoded at a time,
    /// saying it works (`progress`) every few entries.
    fn whole_payload_from_disk(
        &mut self,
        progress: Option<&Progress>,
    ) -> Result<Vec<u8>, TaskError> {
        let said = Saying::new(progress);
        let timers = self.timers.by_key();
        said.tick();
        let max_parallelism = self.max_parallelism;
        // `[group, [entry...]]` per key group, back to back; the groups' array head last.
        let mut body = Vec::new();
        let mut groups = 0u64;
        let mut group: Option<(usize, u64, Vec<u8>)> = None;
        let close = |body: &mut Vec<u8>, (g, n, entries): (usize, u64, Vec<u8>)| {
            crate::state::changes::head(body, 4, 2);
            crate::state::changes::head(body, 0, g as u64);
            crate::state::changes::head(body, 4, n);
            body.extend_from_slice(&entries);
        };
        self.state
            .try_for_each(
                |key, state| {
                    let g = key_group_of(key, max_parallelism);
                    if group.as_ref().is_none_or(|(at, _, _)| *at != g) {
                        if let Some(done) = group.take() {
                            close(&mut body, done);
                        }
                        groups += 1;
                        group = Some((g, 0, Vec::new()));
                    }
                    let (_, n, entries) = group.as_mut().ok_or("no group")?;
                    let entry = EntryRef {
                        key,
                        state,
                        timers: timers.get(key).map(Vec::as_slice),
                    };
                    ciborium::into_writer(&entry, &mut *entries).map_err(|e| e.to_string())?;
                    *n += 1;
                    said.one();
                    Ok(())
                },
                &|| said.tick(),
            )
            .map_err(|e| self.core.state_error(e))?;
        if let Some(done) = group.take() {
            close(&mut body, done);
        }
        let mut payload = Vec::with_capacity(body.len() + 16);
        if let Some(h) = &self.hooks {
            let own = (h.snapshot)(&self.f).map_err(|e| self.core.state_error(e.to_string()))?;
            crate::state::changes::head(&mut payload, 4, 2);
            ciborium::into_writer(&own, &mut payload)
                .map_err(|e| self.core.state_error(e.to_string()))?;
        }
        crate::state::changes::head(&mut payload, 4, groups);
        payload.extend_from_slice(&body);
        Ok(payload)
    }

    /// The state store's first error, as the subtask's failure.
    fn state_failed(&mut self) -> Result<(), TaskError> {
        match self.state.take_error() {
            Some(e) => Err(self.core.state_error(e)),
            None => Ok(()),
        }
    }

    /// Hands barrier `id`'s state incrementally (runs under `root`): what changed since the
    /// previous checkpoint, copied a chunk at a time from here on (`checkpoint::copy`), or the
    /// whole state when it must (the first checkpoint, after a failed write, with timers).
    fn snapshot_incremental(
        &mut self,
        id: u64,
        root: &std::path::Path,
        w: &mut StateWriter,
    ) -> Result<(), TaskError> {
        let has_timers = !self.timers.is_empty();
        let own = match &self.hooks {
            Some(h) => {
                let own =
                    (h.snapshot)(&self.f).map_err(|e| self.core.state_error(e.to_string()))?;
                Some(crate::checkpoint::encode(&own).map_err(|e| self.core.state_error(e))?)
            }
            None => None,
        };
        let Some(inc) = self.incremental.as_mut() else {
            return Ok(());
        };
        let encode = encode_entry::<K, P::State>;
        let part = match inc.begin(id, root, &mut self.state, has_timers, own, encode) {
            Some(part) => part,
            None => {
                let payload = self.whole_payload(w.progress.as_ref())?;
                let own = self.hooks.is_some();
                match self.incremental.as_mut() {
                    // A run addresses its entries with 32 bits: a larger state is written as
                    // a full checkpoint's, and the chain starts again after it.
                    Some(inc) if payload.len() > u32::MAX as usize => {
                        inc.taken_whole();
                        put_keyed(w, &self.core.info, payload);
                        return Ok(());
                    }
                    Some(inc) => inc.whole(id, root, &mut self.state, payload, own),
                    None => return Ok(()),
                }
            }
        };
        let info = &self.core.info;
        w.put_chain(&info.uid, envelope_range(info), part);
        Ok(())
    }

    /// Fires up to `budget` due timers: event-time ones up to the input watermark, then
    /// processing-time ones up to `now` (if given).
    pub(crate) fn fire_timers(
        &mut self,
        budget: usize,
        now: Option<EventTime>,
    ) -> Result<(), TaskError> {
        let (f, state, timers) = (&mut self.f, &mut self.state, &mut self.timers);
        self.core.run_with_sides(0, |out, sides| {
            let mut n = 0;
            while n < budget {
                let Some((t, domain, k)) = timers.pop_due(now) else {
                    break;
                };
                // A fired timer changes the key's entry (its timers) whatever `on_timer` does.
                let Some(s) = state.write(&k, P::State::default) else {
                    continue;
                };
                f.on_timer(
                    t,
                    domain,
                    &k,
                    s,
                    &mut KeyedContext::new(&k, Some(t), timers, sides),
                    out,
                );
                n += 1;
            }
        })?;
        // A key whose state could not be read (on disk, or from a promoted backup's image)
        // fails the subtask here, not at its next batch.
        self.state_failed()
    }

    /// Sends on the watermark the fired timers allow (all of the input's once none at or
    /// below it is left).
    pub(crate) fn forward_watermark(&mut self) -> Result<(), TaskError> {
        match self.timers.watermark_to_forward() {
            Some(t) => self.core.next.watermark(Watermark::At(t)),
            None => Ok(()),
        }
    }

    /// Applies the config changes (key, value) made while the job ran (functions with hooks
    /// only).
    pub(crate) fn apply_live_config(
        &mut self,
        changes: &[(String, String)],
    ) -> Result<(), crate::hooks::ConfigError> {
        let Some(h) = &self.hooks else {
            return Ok(());
        };
        for (key, value) in changes {
            (h.configure)(&mut self.f, key, value)?;
        }
        Ok(())
    }
}

impl<KF, K, P, I, O> Output<I> for KeyedOp<KF, K, P, I, O>
where
    KF: FnMut(&I) -> K + Send,
    K: crate::Key,
    P: KeyedProcessFunction<K, I, O>,
    O: Send,
    I: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let (key_fn, f) = (&mut self.key_fn, &mut self.f);
        let n = batch.len();
        let crate::state::KeyedState {
            map,
            changes,
            saved,
            promoted,
        } = &mut self.state;
        let (ts, timers) = (&self.ts, &mut self.timers);
        self.core.run_with_sides(batch.len(), |out, sides| {
            let mut run = KeyedRun {
                key_fn,
                f,
                ts,
                timers,
                sides,
                out,
                _k: PhantomData,
            };
            match map {
                crate::state::Entries::Plain(map) => run.plain(batch, map),
                crate::state::Entries::Logged(map) => {
                    run.logged(batch, map, changes, saved, promoted)
                }
                crate::state::Entries::Disk(d) => run.disk(batch, d, changes, saved),
            }
        })?;
        if self.timers.late_dropped > 0 {
            self.core.counters.late_dropped.fetch_add(
                std::mem::take(&mut self.timers.late_dropped),
                crate::sync::atomic::Ordering::Relaxed,
            );
        }
        if self.state.promoted.is_some() {
            // The rest of a promoted backup's state, read in a part at a time: twice the
            // batch's records, so it is all in after the records of about half the keys, and
            // at most `READ_IN_PER_BATCH`, so a large batch does not keep heartbeats waiting.
            if let Err(e) = self.state.read_in((2 * n).min(READ_IN_PER_BATCH)) {
                return Err(self.core.state_error(e));
            }
        }
        self.state_failed()
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        // A checkpoint's copy under way is done before the state changes at the end.
        if let Some(inc) = self.incremental.as_mut() {
            inc.finish(&mut self.state, encode_entry::<K, P::State>);
        }
        // The input ended with the `MAX` watermark: every event-time timer fires now.
        self.fire_timers(usize::MAX, None)?;
        self.forward_watermark()?;
        // `end_of_input` is given every key's state: on disk, they are read in first.
        self.state
            .load_all()
            .map_err(|e| self.core.state_error(e))?;
        let (f, state) = (&mut self.f, &mut self.state);
        self.core.finish_with_sides(|out, sides| {
            f.end_of_input_with_ctx(state, &mut crate::ProcessContext::new(sides), out)
        })
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.snapshot_state(w)?;
        self.core.next.barrier(id, w)
    }
    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        // A replay from this state is told the time before its first batch.
        self.timers.told = None;
        // Only a state that logs its changes can hand them; another hands its snapshot.
        if self.state.logs_changes() && w.changes_of(&self.core.info.uid).is_some() {
            return self.hand_changes(w);
        }
        if let (Some(_), Some((id, root))) = (&self.incremental, w.incremental.clone()) {
            return self.snapshot_incremental(id, &root, w);
        }
        if let Some(inc) = self.incremental.as_mut() {
            // Taken whole (an unaligned checkpoint, one handed over, a query): the chain
            // starts again at the next checkpoint.
            inc.taken_whole();
        }
        let payload = self.whole_payload(w.progress.as_ref())?;
        put_keyed(w, &self.core.info, payload);
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)
    }
    fn holds_records(&self) -> bool {
        self.timers.event_due()
    }
    fn restores_watermark(&self) -> bool {
        true
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        match w {
            Watermark::At(t) if t > self.timers.watermark => {
                self.timers.watermark = t;
                // A first run now; the rest from `poll_pending`, between units of input.
                self.fire_timers(self.timer_budget, None)?;
                self.forward_watermark()
            }
            Watermark::At(_) => Ok(()),
            Watermark::Idle => self.core.next.watermark(w),
        }
    }
    fn flush(&mut self) {
        self.core.next.flush()
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
        let clock = self
            .timers
            .has_processing()
            .then(crate::operator::timers::now_ms);
        // With a backup, processing-time timers fire when the gate tells the time (logged,
        // see `advance_processing_time`); the clock only wakes the subtask for them.
        let now = clock.filter(|_| !self.timers.backed_up);
        if let Some(inc) = self.incremental.as_mut().filter(|i| i.copying()) {
            // A checkpoint's copy goes on a chunk at a time, between units of input.
            inc.step(
                &mut self.state,
                crate::checkpoint::copy::STEP,
                encode_entry::<K, P::State>,
            );
            if inc.copying() {
                cx.waker().wake_by_ref();
            }
        }
        let due = self.timers.event_due() || now.is_some_and(|n| self.timers.processing_due(n));
        if due {
            if let Err(e) = self.fire_timers(self.timer_budget, now) {
                return std::task::Poll::Ready(Err(e));
            }
            if let Err(e) = self.forward_watermark() {
                return std::task::Poll::Ready(Err(e));
            }
            if self.timers.event_due() || now.is_some_and(|n| self.timers.processing_due(n)) {
                // More to fire: come back after one unit of other work.
                cx.waker().wake_by_ref();
            }
        }
        if let Some(clock) = clock {
            self.timers.poll_wake(cx, clock);
        }
        self.core.next.poll_pending(cx)
    }
    fn next_processing_time(&self) -> Option<EventTime> {
        if !self.timers.backed_up {
            return None;
        }
        // The time is told before a batch whenever the clock moved on (at most once a
        // millisecond), so whatever the function reads of it is logged; and at once after a
        // state was handed or checkpointed, so a replay from that state is told it before
        // its first batch too. A due timer is told its time.
        let clock = match self.timers.told {
            Some(t) => t.saturating_add(1),
            None => EventTime::MIN,
        };
        Some(match self.timers.processing.earliest() {
            Some(timer) => timer.min(clock),
            None => clock,
        })
    }
    fn advance_processing_time(&mut self, now: EventTime) -> Result<(), TaskError> {
        self.timers.told = Some(now);
        if self.timers.processing_due(now) {
            self.fire_timers(usize::MAX, Some(now))?;
            self.forward_watermark()?;
        }
        Ok(())
    }
    fn usage(&self, usage: &mut QueueUsage) {
        self.core.next.usage(usage)
    }
    fn control(&mut self, c: &mut Control<'_>) {
        match &self.hooks {
            Some(h) if c.uid == self.core.info.uid => (h.control)(&mut self.f, c),
            _ => {
                let next = &mut self.core.next;
                c.here_or(&self.core.info.uid, |c| next.control(c))
            }
        }
    }
}
