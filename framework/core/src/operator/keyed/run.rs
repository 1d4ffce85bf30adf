//! A batch's records through a keyed function, for each way the state is kept (without a
//! change log, with one, on disk): [`KeyedRun`], what `KeyedOp::push` hands a batch to. Not
//! the operator's timers, snapshots or hand-offs (the parent module).

use std::marker::PhantomData;

use super::KeyedProcessFunction;
use crate::operator::timers::{KeyedContext, Timers};
use crate::operator::Collector;
use crate::state::promoted::Promoted;
use crate::time::{EventTime, Timestamps};

/// What the records of one batch are processed with (`KeyedOp::push`), whatever way the
/// state is kept: the key selector, the function, the records' event time, the timers, the
/// side outputs and the output. Made once per batch, on the stack.
pub(super) struct KeyedRun<'a, KF, K, P, I, O> {
    pub(super) key_fn: &'a mut KF,
    pub(super) f: &'a mut P,
    pub(super) ts: &'a Option<Timestamps<I>>,
    pub(super) timers: &'a mut Timers<K>,
    pub(super) sides: &'a mut crate::operator::side::SideOutputs,
    pub(super) out: &'a mut Collector<O>,
    pub(super) _k: PhantomData<fn() -> K>,
}

impl<KF, K, P, I, O> KeyedRun<'_, KF, K, P, I, O>
where
    KF: FnMut(&I) -> K + Send,
    K: crate::Key,
    P: KeyedProcessFunction<K, I, O>,
    O: Send,
    I: Send,
{
    /// The key and the event time of record `r`.
    #[inline]
    fn key_of(&mut self, r: &I) -> (K, Option<EventTime>) {
        let k = (self.key_fn)(r);
        let t = self.ts.as_ref().map(|ts| ts(r));
        (k, t)
    }

    /// Runs the function on record `r` of key `k` (event time `t`) and its state `s`.
    #[inline]
    fn process(&mut self, k: &K, t: Option<EventTime>, s: &mut P::State, r: I) {
        let ctx = &mut KeyedContext::new(k, t, self.timers, self.sides);
        self.f.process_with_ctx(k, s, r, ctx, self.out);
    }

    /// The batch's records, on states kept without a change log.
    #[inline]
    pub(super) fn plain(
        &mut self,
        batch: &mut Vec<I>,
        map: &mut std::collections::HashMap<K, P::State, rustc_hash::FxBuildHasher>,
    ) {
        for r in batch.drain(..) {
            let (k, t) = self.key_of(&r);
            if let Some(s) = map.get_mut(&k) {
                self.process(&k, t, s, r);
            } else {
                let mut s = P::State::default();
                self.process(&k, t, &mut s, r);
                map.insert(k, s);
            }
        }
    }

    /// The batch's records, on states whose changes are logged (and, for a promoted backup,
    /// its state at the promotion not read in yet).
    #[inline]
    pub(super) fn logged(
        &mut self,
        batch: &mut Vec<I>,
        map: &mut crate::state::TrackedMap<K, P::State>,
        changes: &mut crate::state::changes::ChangeLog<K>,
        saved: &mut Vec<(K, P::State)>,
        promoted: &mut Option<Box<Promoted>>,
    ) {
        for r in batch.drain(..) {
            let (k, t) = self.key_of(&r);
            if let Some(e) = map.get_mut(&k) {
                if changes.touch(&k, e.logged.get_mut()) {
                    // A checkpoint's copy has yet to take it: copied first.
                    saved.push((k.clone(), e.state.clone()));
                }
                self.process(&k, t, &mut e.state, r);
            } else {
                // A promoted backup's key not read in yet: its state at the promotion.
                let restored = match promoted.as_deref_mut() {
                    Some(p) => match p.get::<K, P::State>(&k) {
                        Ok(s) => s,
                        Err(e) => {
                            // The subtask fails with it (below), as on disk.
                            p.fail(e);
                            break;
                        }
                    },
                    None => None,
                };
                let e = match restored {
                    Some(mut state) => {
                        let mut logged = 0;
                        if changes.touch(&k, &mut logged) {
                            saved.push((k.clone(), state.clone()));
                        }
                        self.process(&k, t, &mut state, r);
                        crate::state::Tracked::new(state, logged)
                    }
                    None => {
                        let mut state = P::State::default();
                        self.process(&k, t, &mut state, r);
                        let logged = changes.inserted(&k);
                        crate::state::Tracked::new(state, logged)
                    }
                };
                map.insert(k, e);
            }
        }
    }

    /// The batch's records, on states kept on disk (the keys in use cached).
    #[inline]
    pub(super) fn disk(
        &mut self,
        batch: &mut Vec<I>,
        d: &mut crate::state::disk::DiskEntries<K, P::State>,
        changes: &mut crate::state::changes::ChangeLog<K>,
        saved: &mut Vec<(K, P::State)>,
    ) {
        for r in batch.drain(..) {
            let (k, t) = self.key_of(&r);
            if let Some(e) = d.cache.get_mut(&k) {
                if changes.touch(&k, e.logged.get_mut()) {
                    saved.push((k.clone(), e.state.clone()));
                }
                self.process(&k, t, &mut e.state, r);
            } else {
                // Not cached: read from the store, or new.
                let mut e = match d.load(&k, changes, P::State::default) {
                    Ok(e) => e,
                    Err(err) => {
                        // The subtask fails with it (below); the batch's other records go
                        // with the drain, and are replayed from the checkpoint the restart
                        // restores.
                        d.fail(err);
                        break;
                    }
                };
                if changes.touch(&k, e.logged.get_mut()) {
                    saved.push((k.clone(), e.state.clone()));
                }
                self.process(&k, t, &mut e.state, r);
                d.insert(k, e);
            }
        }
    }
}
