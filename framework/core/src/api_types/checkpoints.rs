//! Checkpoint statistics: `/jobs/{id}/checkpoints` and one checkpoint's details, per vertex
//! and per subtask.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// ---- Checkpoints -------------------------------------------------------------------------

/// `GET /jobs/{id}/checkpoints`: counts, summary, the latest of each kind, the history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointingStatistics {
    /// How many of each.
    pub counts: CheckpointCounts,
    /// Over the completed ones.
    pub summary: CheckpointSummary,
    /// The latest of each kind.
    pub latest: LatestCheckpoints,
    /// The last ones, newest first.
    pub history: Vec<CheckpointStatistics>,
}

/// The counts of [`CheckpointingStatistics`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointCounts {
    /// Restores (Weir: restarts).
    pub restored: u64,
    /// Every checkpoint started.
    pub total: u64,
    /// In progress.
    pub in_progress: u64,
    /// Completed.
    pub completed: u64,
    /// Failed.
    pub failed: u64,
}

/// Smallest, largest and average of a quantity over checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct MinMaxAvg {
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
    /// Average.
    pub avg: f64,
}

impl MinMaxAvg {
    /// The three.
    pub fn new(min: u64, max: u64, avg: f64) -> MinMaxAvg {
        MinMaxAvg { min, max, avg }
    }
}

/// The summary of [`CheckpointingStatistics`], over the completed checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointSummary {
    /// Bytes written by each.
    pub checkpointed_size: MinMaxAvg,
    /// The full state's size.
    pub state_size: MinMaxAvg,
    /// Trigger to last acknowledgement, ms.
    pub end_to_end_duration: MinMaxAvg,
    /// (Flink's; 0.)
    pub alignment_buffered: MinMaxAvg,
    /// (Flink's; 0.)
    pub processed_data: MinMaxAvg,
    /// In-flight data persisted (unaligned checkpoints), bytes.
    pub persisted_data: MinMaxAvg,
}

/// The latest checkpoint of each kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LatestCheckpoints {
    /// The latest completed checkpoint (not a savepoint).
    pub completed: Option<CheckpointStatistics>,
    /// The latest completed savepoint.
    pub savepoint: Option<CheckpointStatistics>,
    /// The latest failed one.
    pub failed: Option<CheckpointStatistics>,
    /// The one the job restored from.
    pub restored: Option<RestoredCheckpoint>,
}

/// The checkpoint a job restored from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RestoredCheckpoint {
    /// Its id.
    pub id: u64,
    /// Whether it was a savepoint.
    pub is_savepoint: bool,
}

/// One checkpoint: of the history, the latest ones, or `GET
/// /jobs/{id}/checkpoints/details/{cid}` (with its `tasks`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointStatistics {
    /// Its id.
    pub id: u64,
    /// `IN_PROGRESS`, `COMPLETED`, `FAILED`.
    pub status: String,
    /// Whether it is a savepoint.
    pub is_savepoint: bool,
    /// A savepoint's format (`CANONICAL`).
    #[serde(rename = "savepointFormat")]
    pub savepoint_format: Option<String>,
    /// When it was triggered, ms since the Unix epoch.
    pub trigger_timestamp: u64,
    /// The last acknowledgement, ms since the Unix epoch; -1 before the first.
    pub latest_ack_timestamp: i64,
    /// The full state's size, bytes.
    pub state_size: u64,
    /// The bytes it wrote.
    pub checkpointed_size: u64,
    /// Weir's: the longest synchronous part of a subtask, ms.
    pub sync_duration: Option<u64>,
    /// Weir's: the same, µs.
    pub sync_duration_us: Option<u64>,
    /// Weir's: the longest asynchronous part of a subtask, ms.
    pub async_duration: Option<u64>,
    /// Trigger to last acknowledgement, ms.
    pub end_to_end_duration: u64,
    /// (Flink's; 0.)
    pub alignment_buffered: u64,
    /// (Flink's; 0.)
    pub processed_data: u64,
    /// In-flight data persisted (unaligned), bytes.
    pub persisted_data: u64,
    /// Weir's: the longest alignment of a subtask, ms.
    pub alignment_duration: Option<u64>,
    /// Weir's: the longest start delay of a subtask, ms.
    pub start_delay: Option<u64>,
    /// Its subtasks.
    pub num_subtasks: u64,
    /// The subtasks that acknowledged it.
    pub num_acknowledged_subtasks: u64,
    /// `CHECKPOINT`, `UNALIGNED_CHECKPOINT`, `SAVEPOINT`.
    pub checkpoint_type: String,
    /// Whether it is unaligned.
    pub is_unaligned: bool,
    /// Weir's: `EXACTLY_ONCE` or `AT_LEAST_ONCE`.
    pub mode: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// When it failed, ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_timestamp: Option<u64>,
    /// Its details: each vertex's part (only in `/checkpoints/details/{cid}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<BTreeMap<String, CheckpointVertexStatistics>>,
}

/// One vertex's part of a checkpoint (`/checkpoints/details/{cid}`'s `tasks`, and
/// `/checkpoints/details/{cid}/subtasks/{vid}` with its `subtasks`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointVertexStatistics {
    /// The checkpoint's id.
    pub id: u64,
    /// The checkpoint's status.
    pub status: String,
    /// The vertex's last acknowledgement; -1 before the first.
    pub latest_ack_timestamp: i64,
    /// Its subtasks' state, bytes.
    pub state_size: u64,
    /// The bytes they wrote.
    pub checkpointed_size: u64,
    /// The longest of a subtask, ms.
    pub end_to_end_duration: u64,
    /// (Flink's; 0.)
    pub alignment_buffered: u64,
    /// (Flink's; 0.)
    pub processed_data: u64,
    /// In-flight data persisted, bytes.
    pub persisted_data: u64,
    /// Its subtasks.
    pub num_subtasks: u64,
    /// Those that acknowledged.
    pub num_acknowledged_subtasks: u64,
    /// Each subtask (only in `/subtasks/{vid}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subtasks: Option<Vec<SubtaskCheckpointStatistics>>,
}

/// One subtask's part of a checkpoint: acknowledged (`completed`, with its numbers) or not
/// (`pending_or_failed`, its numbers absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SubtaskCheckpointStatistics {
    /// The subtask's index.
    pub index: u64,
    /// `completed` or `pending_or_failed`.
    pub status: String,
    /// When it acknowledged, ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timestamp: Option<u64>,
    /// Trigger to its acknowledgement, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end_duration: Option<u64>,
    /// Its state, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_size: Option<u64>,
    /// The bytes it wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpointed_size: Option<u64>,
    /// Its synchronous and asynchronous parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<SubtaskCheckpointDuration>,
    /// Its alignment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<SubtaskAlignment>,
    /// Its start delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_delay: Option<u64>,
    /// Whether its barrier overtook in-flight data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unaligned_checkpoint: Option<bool>,
    /// Whether it was aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aborted: Option<bool>,
}

/// A subtask's synchronous and asynchronous checkpoint parts, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SubtaskCheckpointDuration {
    /// The synchronous part.
    pub sync: u64,
    /// The asynchronous part.
    #[serde(rename = "async")]
    pub async_: u64,
}

/// A subtask's alignment in a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SubtaskAlignment {
    /// (Flink's; 0.)
    pub buffered: u64,
    /// (Flink's; 0.)
    pub processed: u64,
    /// In-flight data persisted, bytes.
    pub persisted: u64,
    /// How long it aligned, ms.
    pub duration: u64,
}

/// `GET /jobs/{id}/checkpoints/config`: the checkpoint settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// `exactly_once` or `at_least_once`.
    pub mode: String,
    /// The interval, ms (the largest `i64` when periodic checkpoints are off).
    pub interval: u64,
    /// The timeout, ms.
    pub timeout: u64,
    /// The least pause between two, ms.
    pub min_pause: u64,
    /// The most at once.
    pub max_concurrent: u64,
    /// Whether checkpoints are kept after the job.
    pub externalization: Externalization,
    /// Whether checkpoints are unaligned.
    pub unaligned_checkpoints: bool,
    /// How long an aligned checkpoint waits before it goes unaligned, ms (0: never).
    pub aligned_checkpoint_timeout: u64,
    /// Failed checkpoints tolerated in a row.
    pub tolerable_failed_checkpoints: u64,
    /// (Flink's; false.)
    pub checkpoints_after_tasks_finish: bool,
    /// The state backend.
    pub state_backend: String,
    /// The checkpoint storage.
    pub checkpoint_storage: String,
}

/// Whether checkpoints outlive the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Externalization {
    /// Whether they are kept.
    pub enabled: bool,
    /// Whether a cancel deletes them.
    pub delete_on_cancellation: bool,
}
