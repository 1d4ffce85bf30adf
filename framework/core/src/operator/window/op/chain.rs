//! A window operator's incremental checkpoints (`CheckpointConfig::incremental`, without a
//! buffer-queue backup, whose checkpoints are made from the backup's copy): at a barrier, the
//! keys whose windows changed since the operator's previous checkpoint (records added, windows
//! fired, slices purged, keys gone), each key's windows encoded on its own
//! (`operator::handoff::delta`), go to the subtask's chain thread (`checkpoint::incremental`),
//! which sorts and writes them as a run and answers with the chain the checkpoint references.
//! At the barrier only the change log is taken; the changed keys are then encoded a budget at
//! a time between units of input ([`Copying`]), and a key still to copy that the operator is
//! about to write (a record, a firing, a purge) is copied first (copy-on-write), so the copy
//! is the state at the barrier. A new chain (the first checkpoint of an instance, one after a
//! run could not be written, one after the state was taken whole) encodes every key at the
//! barrier. A restore reads the chain as it reads a full snapshot's payload (the runs hold the
//! same items).
//!
//! Owns when a checkpoint is a delta and when a base, and the copy's progress; not the change
//! log (`operator::handoff`), the runs (`checkpoint::runs`) nor the windows (`op`).

use std::collections::HashSet;
use std::path::PathBuf;

use rustc_hash::FxBuildHasher;

use super::WindowOp;
use crate::checkpoint::incremental::ChainWriter;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::key_group::key_group_of;
use crate::operator::keyed::{envelope_range, put_keyed};
use crate::operator::window::WindowFn;
use crate::state::changes::KeyedDelta;

/// A window subtask's chain of incremental checkpoints.
pub(crate) struct Chain {
    writer: ChainWriter,
    /// The state was taken whole outside the chain (an unaligned checkpoint, one handed
    /// over): the next checkpoint starts a new chain with every key.
    restart: bool,
}

impl Chain {
    /// The chain of subtask `info`, if its checkpoints are incremental (`cfg`) and it has no
    /// backup.
    pub(crate) fn start(
        info: &crate::operator::OperatorInfo,
        cfg: &crate::EnvConfig,
        backed_up: bool,
    ) -> Result<Option<Chain>, TaskError> {
        let c = &cfg.checkpoint;
        if !c.incremental || c.interval.is_none() || backed_up {
            return Ok(None);
        }
        let writer =
            ChainWriter::start(&info.uid, info.subtask).map_err(|e| TaskError::Checkpoint {
                uid: info.uid.clone(),
                subtask: info.subtask,
                message: format!("cannot start incremental checkpoints: {e}"),
            })?;
        Ok(Some(Chain {
            writer,
            restart: false,
        }))
    }
}

/// Checkpoint `id`'s copy of the keys changed before its barrier, under way.
pub(crate) struct Copying<K> {
    id: u64,
    root: PathBuf,
    /// Keys not copied yet (a key leaves once copied, by the copy or by a write).
    left: HashSet<K, FxBuildHasher>,
    /// The copy's order over them.
    order: std::vec::IntoIter<K>,
    /// Entries encoded and not handed to the chain's thread yet.
    buf: KeyedDelta,
    max_parallelism: usize,
    failed: Option<String>,
}

impl<K: crate::Key> Copying<K> {
    /// Copies `key` (its windows `entry`, or its removal) if it is still to copy.
    #[inline]
    pub(super) fn copy<E: serde::Serialize>(&mut self, key: &K, entry: Option<&E>) {
        if !self.left.remove(key) || self.failed.is_some() {
            return;
        }
        let group = key_group_of(key, self.max_parallelism);
        let pushed = match entry {
            Some(e) => self.buf.push(group, key, Some(&(key, e))),
            None => self.buf.push::<K, (&K, ())>(group, key, None),
        };
        if let Err(e) = pushed {
            self.failed = Some(e);
        }
    }
}

impl<K, I, R, G> super::Inner<K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    /// `key` is about to be written: if a checkpoint's copy has it still to copy, it is copied
    /// now, as it was at the barrier.
    #[inline]
    pub(super) fn cow(&mut self, key: &K) {
        if let Some(c) = self.copying.as_mut() {
            c.copy(key, self.keys.get(key));
        }
    }
}

impl<KF, K, I, R, G> WindowOp<KF, K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    /// Writes checkpoint `id`'s state as a link of the chain (its runs under `root`): what
    /// changed since the previous checkpoint, or everything when the chain starts (the first
    /// checkpoint of an instance, one after the state was taken whole, one after a run could
    /// not be written). Without a chain, the whole snapshot.
    pub(super) fn snapshot_incremental(
        &mut self,
        id: u64,
        root: &std::path::Path,
        w: &mut StateWriter,
    ) -> Result<(), TaskError> {
        let own = self.own_fields()?;
        let own = crate::checkpoint::encode(&own).map_err(|e| self.core.state_error(e))?;
        let Some(chain) = self.chain.as_mut() else {
            let payload = self.whole_payload(w.progress.as_ref())?;
            put_keyed(w, &self.core.info, payload);
            return Ok(());
        };
        let full = chain.writer.needs_base() || std::mem::take(&mut chain.restart);
        let new_chain = self.inner.changed.as_ref().is_none_or(|c| c.all());
        if !full && !new_chain {
            // The changed keys are copied from here, a budget at a time.
            let (left, _) = crate::operator::handoff::take(&mut self.inner.changed);
            let order: Vec<K> = left.iter().cloned().collect();
            let mut buf = chain.writer.spare();
            buf.own = Some(own);
            chain.writer.begin(id, root);
            self.inner.copying = Some(Box::new(Copying {
                id,
                root: root.to_owned(),
                left,
                order: order.into_iter(),
                buf,
                max_parallelism: self.max_parallelism,
                failed: None,
            }));
            let info = &self.core.info;
            w.put_chain(&info.uid, envelope_range(info), chain.writer.part(id));
            return Ok(());
        }
        let keys = &self.inner.keys;
        let delta = crate::operator::handoff::delta(
            w,
            self.max_parallelism,
            &mut self.inner.changed,
            full,
            own,
            keys.keys(),
            |k| keys.get(k),
        );
        let delta = match delta {
            Ok(d) => d,
            Err(e) => {
                // (A state over the 4 GiB a run addresses.) The change log started again:
                // the next checkpoint starts a new chain; this one fails.
                chain.restart = true;
                return Err(self.core.state_error(e));
            }
        };
        let full = delta.full;
        chain.writer.begin(id, root);
        chain.writer.hand(Ok(delta));
        chain.writer.seal(id, root, full);
        let info = &self.core.info;
        w.put_chain(&info.uid, envelope_range(info), chain.writer.part(id));
        Ok(())
    }

    /// Copies up to a budget of the changed keys still to copy (all of them if `all`), hands
    /// what it encoded to the chain's thread (unless that has enough to do and not `all`), and
    /// seals the checkpoint's run once every key is copied. Whether no copy is under way now.
    pub(super) fn copy_step(&mut self, all: bool) -> bool {
        let (Some(c), Some(chain)) = (self.inner.copying.as_mut(), self.chain.as_mut()) else {
            return true;
        };
        if !all && chain.writer.busy() {
            return false;
        }
        let keys = &self.inner.keys;
        let mut n = 0;
        let done = loop {
            if !all && n == self.budget {
                break false;
            }
            let Some(k) = c.order.next() else {
                break true;
            };
            c.copy(&k, keys.get(&k));
            n += 1;
        };
        if let Some(e) = c.failed.take() {
            // This checkpoint fails; the next one starts a new chain.
            chain.restart = true;
            chain.writer.hand(Err(e));
            chain.writer.seal(c.id, &c.root, false);
            self.inner.copying = None;
            return true;
        }
        chain
            .writer
            .hand(Ok(std::mem::replace(&mut c.buf, chain.writer.spare())));
        if done {
            chain.writer.seal(c.id, &c.root, false);
            self.inner.copying = None;
        }
        done
    }

    /// Checkpoints through `chain` (if some): the operator logs the keys it writes from now.
    pub(crate) fn with_chain(mut self, chain: Option<Chain>) -> Self {
        if chain.is_some() && self.inner.changed.is_none() {
            self.inner.changed = Some(Default::default());
        }
        self.chain = chain;
        self
    }

    /// Ends a checkpoint's copy under way at once.
    pub(super) fn finish_copy(&mut self) {
        if self.inner.copying.is_some() {
            self.copy_step(true);
        }
    }

    /// The state was taken whole, outside the chain: the next checkpoint starts a new one.
    pub(super) fn taken_whole(&mut self) {
        if let Some(chain) = self.chain.as_mut() {
            chain.restart = true;
        }
    }
}
