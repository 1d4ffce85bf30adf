//! Keyed operators: `process` with per-key state, and rolling `reduce`.
//!
//! The key is extracted again on the receiving side (as in Flink); the upstream hash
//! partitioner sent every record of a key group here. A state entry is created with
//! `Default` on a key's first record, with no clone of the key on the common path.

use std::marker::PhantomData;

use super::{Collector, Control, OpCore, Output};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::hooks::{StateError, StateSnapshot};
use crate::key_group::{key_group_of, key_group_range};
use crate::metrics::QueueUsage;
use crate::state::{KeyedState, ValueState};
use crate::Data;

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
    /// Handles one record of `key`.
    fn process(&mut self, key: &K, state: &mut Self::State, input: I, out: &mut Collector<O>);
    /// Called once when the input has ended, with every key's state.
    fn end_of_input(&mut self, _state: &mut KeyedState<K, Self::State>, _out: &mut Collector<O>) {}
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
    pub(crate) _in: PhantomData<fn(I)>,
}

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

/// Adds a keyed subtask's snapshot `payload` to `w`, with the key groups it owns.
pub(crate) fn put_keyed(
    w: &mut StateWriter,
    info: &super::OperatorInfo,
    max_parallelism: usize,
    payload: Vec<u8>,
) {
    let range = key_group_range(info.subtask, max_parallelism, info.parallelism);
    w.put(&info.uid, Some((range.start, range.end)), payload);
}

impl<KF, K, P, I, O> KeyedOp<KF, K, P, I, O>
where
    K: crate::Key,
    P: KeyedProcessFunction<K, I, O>,
{
    /// Loads the entries of a checkpointed payload (preceded by the function's own fields if
    /// it has hooks).
    pub(crate) fn restore(&mut self, payload: &[u8]) -> Result<(), TaskError> {
        let groups: KeyedPayload<K, P::State> = match &self.hooks {
            None => crate::checkpoint::decode(payload).map_err(|e| self.core.state_error(e))?,
            Some(h) => {
                let (own, groups): (StateSnapshot, KeyedPayload<K, P::State>) =
                    crate::checkpoint::decode(payload).map_err(|e| self.core.state_error(e))?;
                (h.restore)(&mut self.f, &own).map_err(|e| self.core.state_error(e.to_string()))?;
                groups
            }
        };
        for (_, entries) in groups {
            self.state.map.extend(entries);
        }
        Ok(())
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
        let (key_fn, f, map) = (&mut self.key_fn, &mut self.f, &mut self.state.map);
        self.core.run(batch.len(), |out| {
            for r in batch.drain(..) {
                let k = key_fn(&r);
                if let Some(s) = map.get_mut(&k) {
                    f.process(&k, s, r, out);
                } else {
                    let mut s = P::State::default();
                    f.process(&k, &mut s, r, out);
                    map.insert(k, s);
                }
            }
        })
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        let (f, state) = (&mut self.f, &mut self.state);
        self.core.finish_with(|out| f.end_of_input(state, out))
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.snapshot_state(w)?;
        self.core.next.barrier(id, w)
    }
    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let groups = by_key_group(&self.state.map, self.max_parallelism);
        let payload = match &self.hooks {
            None => crate::checkpoint::encode(&groups),
            Some(h) => {
                let own =
                    (h.snapshot)(&self.f).map_err(|e| self.core.state_error(e.to_string()))?;
                crate::checkpoint::encode(&(own, groups))
            }
        }
        .map_err(|e| self.core.state_error(e))?;
        put_keyed(w, &self.core.info, self.max_parallelism, payload);
        Ok(())
    }
    fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        self.core.next.notify_complete(id)
    }
    fn watermark(&mut self, w: crate::time::Watermark) -> Result<(), TaskError> {
        self.core.next.watermark(w)
    }
    fn flush(&mut self) {
        self.core.next.flush()
    }
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), TaskError>> {
        self.core.next.poll_pending(cx)
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
