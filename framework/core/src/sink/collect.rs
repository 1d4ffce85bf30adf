//! Collects records into memory: for tests and small results.

use std::collections::{BTreeMap, HashSet};

use super::{Sink, SinkContext};
use crate::error::SinkError;
use crate::sync::{lock, Arc, Mutex};
use crate::Data;

/// Handle to the records a `collect()` sink received, from every subtask (in arrival order
/// per subtask; subtasks interleave).
///
/// ```
/// use weir::Env;
/// let env = Env::new();
/// let out = env.from_collection(vec![1u32, 2, 3]).map(|x| x * 10).collect();
/// env.execute("collect-doc").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![10, 20, 30]);
/// ```
#[derive(Debug)]
pub struct CollectSink<T> {
    shared: Arc<Mutex<Collected<T>>>,
}

#[derive(Debug)]
struct Collected<T> {
    items: Vec<T>,
    /// (subtask, checkpoint) transactions already committed: commits are idempotent.
    committed: HashSet<(usize, u64)>,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Default for CollectSink<T> {
    fn default() -> Self {
        CollectSink {
            shared: Arc::new(Mutex::new(Collected {
                items: Vec::new(),
                committed: HashSet::new(),
            })),
        }
    }
}

impl<T: Clone> CollectSink<T> {
    /// Takes the records collected (committed) so far.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut lock(&self.shared).items)
    }
    /// A copy of the records collected (committed) so far.
    pub fn snapshot(&self) -> Vec<T> {
        lock(&self.shared).items.clone()
    }
    /// How many records were collected (committed) so far.
    pub fn len(&self) -> usize {
        lock(&self.shared).items.len()
    }
    /// Whether nothing was collected yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn instance(&self, cx: &SinkContext) -> CollectInstance<T> {
        CollectInstance {
            shared: self.shared.clone(),
            subtask: cx.subtask,
            transactional: cx.checkpointing,
            staged: Vec::new(),
            pending: BTreeMap::new(),
        }
    }
}

/// One subtask of a collect sink. Without checkpoints it writes through. With them it is
/// exactly-once (two-phase commit): records since the last barrier are staged, set aside per
/// checkpoint at its barrier, and made visible when that checkpoint completes (or at the
/// end of the input); what a checkpoint set aside is part of its state, so a restored job
/// commits it, once.
pub(crate) struct CollectInstance<T> {
    shared: Arc<Mutex<Collected<T>>>,
    subtask: usize,
    transactional: bool,
    staged: Vec<T>,
    pending: BTreeMap<u64, Vec<T>>,
}

impl<T> CollectInstance<T> {
    fn commit_up_to(&mut self, id: u64) {
        let ready: Vec<u64> = self.pending.range(..=id).map(|(k, _)| *k).collect();
        let mut shared = lock(&self.shared);
        for k in ready {
            if let Some(records) = self.pending.remove(&k) {
                if shared.committed.insert((self.subtask, k)) {
                    shared.items.extend(records);
                }
            }
        }
    }
}

impl<T: Data> Sink<T> for CollectInstance<T> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        if self.transactional {
            self.staged.append(batch);
        } else {
            lock(&self.shared).items.append(batch);
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        if !self.transactional {
            return Ok(None);
        }
        let staged = std::mem::take(&mut self.staged);
        self.pending.insert(checkpoint, staged);
        let state: Vec<(u64, &Vec<T>)> = self.pending.iter().map(|(k, v)| (*k, v)).collect();
        crate::checkpoint::encode(&state)
            .map(Some)
            .map_err(|message| SinkError::Encode {
                path: "<collect>".into(),
                message,
            })
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if checkpoint == crate::checkpoint::FINAL_COMMIT && !self.staged.is_empty() {
            let staged = std::mem::take(&mut self.staged);
            self.pending.insert(crate::checkpoint::FINAL_COMMIT, staged);
        }
        self.commit_up_to(checkpoint);
        Ok(())
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let Some(state) = restored else {
            return Ok(());
        };
        let pending: Vec<(u64, Vec<T>)> =
            crate::checkpoint::decode(state).map_err(|message| SinkError::Encode {
                path: "<collect>".into(),
                message,
            })?;
        self.pending.extend(pending);
        // The restored checkpoint is complete: everything it set aside is committed.
        self.commit_up_to(u64::MAX - 1);
        Ok(())
    }
}
