//! `local_aggregate`: the local half of a local-global aggregation (Flink's two-phase
//! aggregation). Each subtask folds its own records per key, without a shuffle, and sends on
//! one partial accumulator per key once the watermark says the key is complete; a keyed
//! aggregation after the shuffle merges the partials.
//!
//! The operator keeps nothing across a checkpoint: at a barrier it sends every partial it
//! holds on before the barrier (as Flink's mini-batch local aggregation does), so restore,
//! rescale and savepoints have nothing of it to carry, and exactly-once rests on the
//! operators before and after it. A key may therefore go on in several partials (one per
//! subtask, more if a checkpoint came while it was open); the global step merges them.

use std::collections::{BTreeMap, HashMap};

use super::{forward_output_io, OpCore, Output};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::time::{EventTime, Watermark};
use crate::window::AggregateFunction;

/// Per-key partial accumulators of one subtask, sent on when the watermark completes them.
pub(crate) struct LocalAggregateOp<KF, CF, K, I, O, A: AggregateFunction<I, O>> {
    pub(crate) key_fn: KF,
    /// When a key is complete: its partial goes on once the watermark is at or past this.
    pub(crate) complete_at: CF,
    pub(crate) agg: A,
    pub(crate) groups: HashMap<K, A::Acc>,
    /// Completion time -> the keys open until then.
    pub(crate) open: BTreeMap<EventTime, Vec<K>>,
    pub(crate) watermark: EventTime,
    pub(crate) core: OpCore<(K, A::Acc)>,
    pub(crate) _io: std::marker::PhantomData<fn(I) -> O>,
}

impl<KF, CF, K, I, O, A> LocalAggregateOp<KF, CF, K, I, O, A>
where
    K: crate::Key,
    A: AggregateFunction<I, O>,
{
    /// Sends on the partials of the keys complete at the watermark (`all`: every one).
    fn send(&mut self, all: bool) -> Result<(), TaskError> {
        let up_to = if all { EventTime::MAX } else { self.watermark };
        if self.open.first_key_value().is_none_or(|(t, _)| *t > up_to) {
            return Ok(());
        }
        let (open, groups) = (&mut self.open, &mut self.groups);
        self.core.run(0, |out| {
            while let Some(entry) = open.first_entry() {
                if *entry.key() > up_to {
                    break;
                }
                for k in entry.remove() {
                    if let Some(acc) = groups.remove(&k) {
                        out.collect((k, acc));
                    }
                }
            }
        })
    }
}

impl<KF, CF, K, I, O, A> Output<I> for LocalAggregateOp<KF, CF, K, I, O, A>
where
    KF: Fn(&I) -> K + Send,
    CF: Fn(&K) -> EventTime + Send,
    K: crate::Key,
    I: Send,
    A: AggregateFunction<I, O>,
{
    fn push(&mut self, batch: &mut Vec<I>) -> Result<(), TaskError> {
        let (key_fn, complete_at, agg) = (&self.key_fn, &self.complete_at, &self.agg);
        let (groups, open) = (&mut self.groups, &mut self.open);
        self.core.run(batch.len(), |_| {
            for x in batch.drain(..) {
                let k = key_fn(&x);
                if let Some(acc) = groups.get_mut(&k) {
                    agg.add(acc, x);
                    continue;
                }
                let mut acc = A::Acc::default();
                agg.add(&mut acc, x);
                open.entry(complete_at(&k)).or_default().push(k.clone());
                groups.insert(k, acc);
            }
        })?;
        // A key complete already (its records came after the watermark): on at once.
        self.send(false)
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        if let Watermark::At(t) = w {
            self.watermark = self.watermark.max(t);
            self.send(false)?;
        }
        self.core.next.watermark(w)
    }
    fn barrier(&mut self, id: u64, w: &mut StateWriter) -> Result<(), TaskError> {
        self.core.at_barrier(w)?;
        // Nothing stays across the checkpoint: the open partials go on before the barrier.
        self.send(true)?;
        self.core.next.barrier(id, w)
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.send(true)?;
        self.core.finish_with(|_| {})
    }
    forward_output_io!();
}
