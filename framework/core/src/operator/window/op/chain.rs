//! A window operator's incremental checkpoints (`CheckpointConfig::incremental`, without a
//! buffer-queue backup, whose checkpoints are made from the backup's copy): at a barrier, the
//! keys whose windows changed since the operator's previous checkpoint (records added, windows
//! fired, slices purged, keys gone), each key's windows encoded on its own
//! (`operator::handoff::delta`), go to the subtask's chain thread (`checkpoint::incremental`),
//! which sorts and writes them as a run and answers with the chain the checkpoint references.
//! The operator's pause is then the encoding of what changed, not of every window; a restore
//! reads the chain as it reads a full snapshot's payload (the runs hold the same items).
//!
//! Owns when a checkpoint is a delta and when a base; not the change log
//! (`operator::handoff`), the runs (`checkpoint::runs`) nor the windows (`op`).

use super::WindowOp;
use crate::checkpoint::incremental::ChainWriter;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::graph::OpEnv;
use crate::operator::keyed::put_keyed;
use crate::operator::window::WindowFn;

/// A window subtask's chain of incremental checkpoints.
pub(crate) struct Chain {
    writer: ChainWriter,
    /// The state was taken whole outside the chain (an unaligned checkpoint, one handed
    /// over): the next checkpoint starts a new chain with every key.
    restart: bool,
}

impl Chain {
    /// The chain of `env`'s subtask, if its checkpoints are incremental and it has no backup.
    pub(crate) fn start(env: &OpEnv) -> Result<Option<Chain>, TaskError> {
        let c = &env.config.checkpoint;
        if !c.incremental || c.interval.is_none() || env.backed_up {
            return Ok(None);
        }
        let writer = ChainWriter::start(&env.info.uid, env.info.subtask).map_err(|e| {
            TaskError::Checkpoint {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                message: format!("cannot start incremental checkpoints: {e}"),
            }
        })?;
        Ok(Some(Chain {
            writer,
            restart: false,
        }))
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
        let part = chain.writer.part(id);
        let info = &self.core.info;
        w.put_chain(
            &info.uid,
            info.key_groups.as_ref().map(|r| (r.start, r.end)),
            part,
        );
        Ok(())
    }

    /// The state was taken whole, outside the chain: the next checkpoint starts a new one.
    pub(super) fn taken_whole(&mut self) {
        if let Some(chain) = self.chain.as_mut() {
            chain.restart = true;
        }
    }
}
