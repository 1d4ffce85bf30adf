//! What subtasks report to their job's controller ([`JobEvent`]) and who they are
//! ([`SubtaskId`]): the vocabulary shared by the subtask actors (`task`, `backup`), which
//! send events, and the controller, which receives them. Commands to the controller from
//! outside the job are the controller's own (`controller::command`).

use crate::checkpoint::coordinator::AckPart;
use crate::error::TaskError;

/// An event a subtask (or a backup) reports to its job's controller.
#[derive(Debug)]
pub(crate) enum JobEvent {
    Finished {
        attempt: u64,
        actor: usize,
        /// Which primary (a fenced one's end is not the subtask's).
        epoch: u64,
    },
    Failed {
        attempt: u64,
        actor: usize,
        /// Which primary of a backed-up subtask (0 until a promotion).
        epoch: u64,
        error: TaskError,
    },
    Lost {
        attempt: u64,
        actor: usize,
        epoch: u64,
        uid: String,
        subtask: usize,
        reason: String,
    },
    /// The backup of subtask `actor` stopped (it failed, or its arbiter did).
    BackupLost {
        attempt: u64,
        actor: usize,
        generation: u64,
    },
    /// A subtask wrote its state for checkpoint `id`.
    Ack {
        attempt: u64,
        id: u64,
        actor: usize,
        /// The states themselves, (uid, payload), for a checkpoint handed over in memory.
        payloads: Vec<(String, Vec<u8>)>,
        /// Its files and how it was taken.
        part: AckPart,
    },
    /// A subtask could not take its part of checkpoint `id`.
    Declined {
        attempt: u64,
        id: u64,
        reason: String,
    },
    /// Checkpoint `id`'s `_metadata` was put on the object store the checkpoints go to, or
    /// could not be (see `checkpoint::remote`).
    MetadataStored {
        attempt: u64,
        id: u64,
        result: Result<(), String>,
    },
}

/// Identity of a subtask actor.
#[derive(Debug, Clone)]
pub(crate) struct SubtaskId {
    /// Index of this actor in the job's list.
    pub(crate) actor: usize,
    /// The chain's first operator.
    pub(crate) head: usize,
    /// Which run of the job (0, then +1 per restart): events of older runs are ignored.
    pub(crate) attempt: u64,
    /// Which primary of a backed-up subtask (0, then +1 per promotion): events of a fenced
    /// primary are ignored.
    pub(crate) epoch: u64,
    /// Uid of the chain's first operator.
    pub(crate) head_uid: String,
    pub(crate) subtask: usize,
}
