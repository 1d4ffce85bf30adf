//! `KeyedStream::apply`: a derived operator (`#[derive(Operator)]`) on a keyed stream, whose
//! keyed `#[weir(state)]` fields are per key.
//!
//! The runtime keeps one entry per key (a tuple of stamped slots, see
//! [`KeyedFields`](crate::hooks::KeyedFields)); before each record it moves the record's key's
//! values into the operator's fields and after it moves them back, so user code reads
//! `self.flag` as the flag of the current key and the hot path is one hash lookup and a few
//! moves per record. A key whose states are all empty is dropped. With a TTL on any field, the
//! clock is read once per batch and a few entries are checked for expiry after each batch.
//!
//! The snapshot is the operator's own (per-subtask) fields, then the keyed entries grouped by
//! key group, so checkpoints, savepoints, the buffer-queue backup and rescale carry them by the
//! same unit as `process_with` state.

use std::marker::PhantomData;

use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;

use super::handoff::{hand_changes, mark, Changed};
use super::keyed::{by_key_group, put_keyed, KeyedPayload};
use super::process::ProcessFunction;
use super::{Control, OpCore, Output};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::hooks::{KeyedFields, Operator, StateSnapshot};
use crate::metrics::QueueUsage;
use crate::StateTtl;

/// Entries checked for expiry after each batch, at least (more for larger batches).
const CLEANUP_PER_BATCH: usize = 16;

/// The checkpointed form: the operator's own fields, and the keyed entries by key group.
type Payload<K, E> = (StateSnapshot, KeyedPayload<K, E>);

pub(crate) struct KeyedApplyOp<KF, K, P: KeyedFields, I, O> {
    key_fn: KF,
    f: P,
    table: IndexMap<K, P::Keyed, FxBuildHasher>,
    ttls: Vec<Option<StateTtl>>,
    has_ttl: bool,
    /// Where incremental cleanup goes on.
    cursor: usize,
    /// With a buffer-queue backup: the keys written since the last hand-off.
    changed: Option<Changed<K>>,
    core: OpCore<O>,
    max_parallelism: usize,
    _in: PhantomData<fn(I)>,
}

impl<KF, K, P, I, O> KeyedApplyOp<KF, K, P, I, O>
where
    K: crate::Key,
    P: KeyedFields + Operator,
{
    pub(crate) fn new(key_fn: KF, f: P, core: OpCore<O>, max_parallelism: usize) -> Self {
        let ttls = P::keyed_ttls();
        KeyedApplyOp {
            key_fn,
            f,
            table: IndexMap::default(),
            has_ttl: ttls.iter().any(Option::is_some),
            ttls,
            cursor: 0,
            changed: None,
            core,
            max_parallelism,
            _in: PhantomData,
        }
    }

    /// With a buffer-queue backup (`backed_up`), hand-offs carry the keys written since the
    /// last one, not every entry.
    pub(crate) fn backed_up(mut self, backed_up: bool) -> Self {
        self.changed = backed_up.then(Changed::default);
        self
    }

    /// Loads a checkpointed payload: the operator's fields and every key's entry (expired
    /// ones are dropped when their key is next seen or by the cleanup).
    pub(crate) fn restore(&mut self, payload: &[u8]) -> Result<(), String> {
        let (own, groups): Payload<K, P::Keyed> = crate::checkpoint::decode(payload)?;
        self.f.restore_state(&own).map_err(|e| e.to_string())?;
        for (_, entries) in groups {
            self.table.extend(entries);
        }
        Ok(())
    }

    /// The operator itself (its hooks restore the initial state).
    pub(crate) fn function_mut(&mut self) -> &mut P {
        &mut self.f
    }

    /// Checks up to `budget` entries for expiry, from where the last check stopped.
    fn clean_some(&mut self, budget: usize, now_ms: u64) {
        for _ in 0..budget.min(self.table.len()) {
            if self.cursor >= self.table.len() {
                self.cursor = 0;
            }
            let Some((_, entry)) = self.table.get_index_mut(self.cursor) else {
                return;
            };
            if P::prune_keyed(entry, &self.ttls, now_ms) {
                if let Some((k, _)) = self.table.swap_remove_index(self.cursor) {
                    mark(&mut self.changed, &k);
                }
            } else {
                self.cursor += 1;
            }
        }
    }
}

impl<KF, K, P, I, O> Output<I> for KeyedApplyOp<KF, K, P, I, O>
where
    KF: FnMut(&I) -> K + Send,
    K: crate::Key,
    P: ProcessFunction<I, O> + KeyedFields + Operator + Clone,
    O: Send,
    I: Send,
{
    #[inline]
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let now = if self.has_ttl {
            crate::metrics::now_ms()
        } else {
            0
        };
        let n = batch.len();
        let (key_fn, f, table, ttls) = (&mut self.key_fn, &mut self.f, &mut self.table, &self.ttls);
        let changed = &mut self.changed;
        self.core.run_with_sides(n, |out, sides| {
            let ctx = &mut crate::ProcessContext::new(sides);
            for r in batch.drain(..) {
                let k = key_fn(&r);
                mark(changed, &k);
                match table.get_full_mut(&k) {
                    Some((i, _, entry)) => {
                        f.load_keyed(entry, ttls, now);
                        f.process_with_ctx(r, ctx, out);
                        if f.store_keyed(entry, ttls, now) {
                            table.swap_remove_index(i);
                        }
                    }
                    None => {
                        let mut entry = P::Keyed::default();
                        f.load_keyed(&mut entry, ttls, now);
                        f.process_with_ctx(r, ctx, out);
                        if !f.store_keyed(&mut entry, ttls, now) {
                            table.insert(k, entry);
                        }
                    }
                }
            }
        })?;
        if self.has_ttl {
            self.clean_some(CLEANUP_PER_BATCH.max(n), now);
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        let f = &mut self.f;
        self.core.finish_with(|out| f.end_of_input(out))
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        self.snapshot_state(w)?;
        self.core.next.barrier(id, w)
    }
    fn snapshot_state(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let core = &self.core;
        let own = self
            .f
            .snapshot_state()
            .map_err(|e| core.state_error(e.to_string()))?;
        if self.has_ttl {
            // Expired values are left out of snapshots: clean them all now.
            let now = crate::metrics::now_ms();
            let (ttls, changed) = (&self.ttls, &mut self.changed);
            self.table.retain(|k, e| {
                let expired = P::prune_keyed(e, ttls, now);
                if expired {
                    mark(changed, k);
                }
                !expired
            });
        }
        if self.changed.is_some() && w.changes_of(&core.info.uid).is_some() {
            let own = crate::checkpoint::encode(&own).map_err(|e| core.state_error(e))?;
            let table = &self.table;
            return hand_changes(
                w,
                &core.info,
                self.max_parallelism,
                &mut self.changed,
                own,
                table.keys(),
                |k| table.get(k),
            )
            .map_err(|e| core.state_error(e));
        }
        let groups = by_key_group(&self.table, self.max_parallelism);
        let payload =
            crate::checkpoint::encode(&(&own, &groups)).map_err(|e| core.state_error(e))?;
        put_keyed(w, &core.info, payload);
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
        if c.uid == self.core.info.uid {
            c.apply(&mut self.f)
        } else {
            self.core.next.control(c)
        }
    }
}

/// Where a derived operator runs, for [`check_state_fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppliedTo {
    /// `DataStream::apply`: no keys.
    Stream,
    /// `KeyedStream::apply` of a `ProcessFunction`: keyed fields are per key.
    KeyedStream,
    /// `KeyedStream::apply` of a `KeyedProcessFunction`: per-key state is its `State` type.
    KeyedFunction,
}

/// Checks a derived operator's state fields against where it runs: keyed fields need a keyed
/// stream (and are the `State` type of a keyed function); on a keyed stream, per-subtask
/// fields must be marked `#[weir(operator_state)]`.
pub(crate) fn check_state_fields<P: Operator>(
    operator: &str,
    applied: AppliedTo,
) -> Result<(), crate::error::PlanError> {
    use crate::hooks::StateScope;
    let keyed_stream = applied != AppliedTo::Stream;
    for field in P::state_fields() {
        let (name, ty) = (field.name, field.type_name);
        let problem = match (field.scope, applied) {
            (StateScope::Keyed, AppliedTo::Stream) => Some(format!(
                "field `{name}` ({ty}) is keyed state, but the stream is not keyed: call `key_by` first, or keep it per subtask with `#[weir(operator_state)]`"
            )),
            (StateScope::Keyed, AppliedTo::KeyedFunction) => Some(format!(
                "field `{name}` ({ty}) is keyed state in a `KeyedProcessFunction`, which keeps per-key state in its `State` type: move it there, or implement `ProcessFunction` instead"
            )),
            (StateScope::Subtask { marked: false, .. }, _) if keyed_stream => Some(format!(
                "field `{name}` ({ty}) is per-subtask state on a keyed stream, which rescale cannot split by key: use a keyed state type (`ValueState`, `MapState`, `ListState`, `ReducingState`), or say it is per subtask with `#[weir(operator_state)]`"
            )),
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(crate::error::PlanError::StateField {
                operator: operator.to_owned(),
                problem,
            });
        }
    }
    Ok(())
}
