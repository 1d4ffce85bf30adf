//! The calls that change a job, with their request and answer bodies: savepoints, stop and
//! triggered checkpoints (asynchronous: a trigger id, then a status), rescale, replace and
//! live settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// ---- Asynchronous operations: savepoints, triggered checkpoints -------------------------

/// The 202 answer to a call that starts an asynchronous operation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct TriggerId {
    /// The operation's id, for its status.
    #[serde(rename = "request-id")]
    pub request_id: String,
}

/// The status of an asynchronous operation (`/savepoints/{trigger}`,
/// `/checkpoints/{trigger}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct OperationStatus {
    /// `IN_PROGRESS` or `COMPLETED`.
    pub status: QueueStatus,
    /// Its outcome once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationResult>,
}

impl OperationStatus {
    /// Still under way.
    pub fn in_progress() -> OperationStatus {
        OperationStatus {
            status: QueueStatus::new("IN_PROGRESS"),
            operation: None,
        }
    }

    /// Completed with `operation`.
    pub fn completed(operation: OperationResult) -> OperationStatus {
        OperationStatus {
            status: QueueStatus::new("COMPLETED"),
            operation: Some(operation),
        }
    }

    /// Whether it completed (succeeded or failed).
    pub fn is_completed(&self) -> bool {
        self.status.id == "COMPLETED"
    }
}

/// The `status` of [`OperationStatus`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct QueueStatus {
    /// `IN_PROGRESS` or `COMPLETED`.
    pub id: String,
}

impl QueueStatus {
    /// A status by its id.
    pub fn new(id: impl Into<String>) -> QueueStatus {
        QueueStatus { id: id.into() }
    }
}

/// What a completed operation did: where a savepoint went, which checkpoint was taken, or
/// why it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct OperationResult {
    /// Where the savepoint went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The checkpoint taken.
    #[serde(rename = "checkpointId", skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<u64>,
    /// Why it failed.
    #[serde(rename = "failure-cause", skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<FailureCause>,
}

/// Why an operation failed (Flink's serialized exception).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct FailureCause {
    /// The error's class.
    pub class: String,
    /// Its message (Flink: its stack trace).
    pub stack_trace: String,
    /// (Flink's; the same message for Weir's savepoints.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serialized_throwable: Option<String>,
}

/// `POST /jobs/{id}/savepoints`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SavepointRequest {
    /// Where the savepoint goes.
    pub target_directory: Option<String>,
    /// Whether the job is cancelled after it.
    pub cancel_job: bool,
}

impl SavepointRequest {
    /// A savepoint into `dir`, the job kept running.
    pub fn new(dir: impl Into<String>) -> SavepointRequest {
        SavepointRequest {
            target_directory: Some(dir.into()),
            cancel_job: false,
        }
    }
}

/// `POST /jobs/{id}/stop`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StopRequest {
    /// Where the savepoint goes.
    pub target_directory: Option<String>,
    /// Whether to end event time first (Weir: not supported).
    pub drain: bool,
}

impl StopRequest {
    /// A stop with a savepoint into `dir`, not drained.
    pub fn new(dir: impl Into<String>) -> StopRequest {
        StopRequest {
            target_directory: Some(dir.into()),
            drain: false,
        }
    }
}

// ---- Rescale and replace -----------------------------------------------------------------

/// `PATCH /jobs/{id}/parallelism` and `/vertices/{vid}`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParallelismRequest {
    /// The new parallelism.
    pub parallelism: usize,
}

impl ParallelismRequest {
    /// To `parallelism`.
    pub fn new(parallelism: usize) -> ParallelismRequest {
        ParallelismRequest { parallelism }
    }
}

/// The answer to a rescale call (and the last one in `/jobs/{id}/rescales`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct RescaleReport {
    /// The checkpoint the new parallelism started from.
    pub checkpoint: Option<u64>,
    /// Each operator whose parallelism changed.
    pub changes: Vec<ParallelismChange>,
    /// Each operator kept at its parallelism, and why.
    pub kept: Vec<KeptOperator>,
    /// Each vertex whose key groups were assigned again by load.
    pub rebalanced: Vec<Rebalanced>,
    /// How long the rescale took, ms.
    pub duration_ms: Option<u64>,
    /// How long the input paused, ms.
    pub pause_ms: Option<u64>,
}

/// One operator's change in a [`RescaleReport`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ParallelismChange {
    /// The operator's uid.
    pub uid: String,
    /// Its parallelism before.
    pub from: u64,
    /// And after.
    pub to: u64,
}

/// An operator a rescale left as it was.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct KeptOperator {
    /// The operator's uid.
    pub uid: String,
    /// Why.
    pub reason: String,
}

/// A vertex whose key groups a rescale assigned again by load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Rebalanced {
    /// The vertex's head operator.
    pub uid: String,
    /// Each subtask's load before.
    pub load_before: Vec<u64>,
    /// And after.
    pub load_after: Vec<u64>,
    /// Key groups moved.
    pub moved: u64,
}

/// `POST /jobs/{id}/replace`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ReplaceRequest {
    /// The registered graph version.
    pub graph: String,
    /// Whether the state of operators the new graph lacks may be dropped.
    pub allow_dropping_state: bool,
    /// How long the new graph has for its first checkpoint, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

impl ReplaceRequest {
    /// A replacement by `graph`, with no state dropped and the default grace.
    pub fn new(graph: impl Into<String>) -> ReplaceRequest {
        ReplaceRequest {
            graph: graph.into(),
            ..ReplaceRequest::default()
        }
    }
}

/// The answer to `POST /jobs/{id}/replace`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReplaceReport {
    /// The in-memory savepoint the new graph started from.
    pub checkpoint: Option<u64>,
    /// How long the replacement took, ms.
    pub duration_ms: Option<u64>,
    /// How long the input paused, ms.
    pub pause_ms: Option<u64>,
    /// The operators whose state was dropped.
    pub dropped_state: Vec<String>,
    /// The new graph's first completed checkpoint.
    pub committed_at: Option<u64>,
}

// ---- Live settings -----------------------------------------------------------------------

/// `GET /jobs/{id}/config`: every live setting's value.
pub type Settings = BTreeMap<String, String>;

/// The answer to `PATCH /jobs/{id}/config`, `POST .../config/plan` and `.../config/rollback`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SettingsChanges {
    /// Each change and how it applies.
    pub changes: Vec<SettingChange>,
    /// A rollback's settings kept (no earlier value known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<Vec<String>>,
}

/// One setting's change and how it applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SettingChange {
    /// The setting.
    pub name: String,
    /// Its value before (none: it had none).
    pub old: Option<String>,
    /// Its new value.
    pub new: String,
    /// `live` or `fast-restart`.
    pub applies: String,
    /// When it applies live, or why it needs a fast restart.
    pub why: String,
}

/// `GET /jobs/{id}/config/history`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SettingsHistory {
    /// Every change asked for, oldest first.
    pub history: Vec<SettingsHistoryEntry>,
}

/// One entry of [`SettingsHistory`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SettingsHistoryEntry {
    /// When, ms since the Unix epoch.
    pub timestamp: u64,
    /// Who asked.
    pub caller: String,
    /// The changes asked for.
    pub changes: Vec<SettingValueChange>,
    /// `applied`, or why not.
    pub outcome: String,
}

/// A setting's old and new value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SettingValueChange {
    /// The setting.
    pub name: String,
    /// Its value before.
    pub old: Option<String>,
    /// Its new value.
    pub new: String,
}

/// `GET /jobs/{id}/rescales`: rescales so far, the one in progress, the last one's report,
/// and each vertex's parallelism and key groups.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Rescales {
    /// Rescales completed.
    pub num_rescales: u64,
    /// The checkpoint of the rescale in progress.
    pub in_progress: Option<u64>,
    /// The last rescale's report.
    pub last: Option<RescaleReport>,
    /// Each vertex.
    pub vertices: Vec<RescaleVertex>,
}

/// One vertex of [`Rescales`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct RescaleVertex {
    /// The vertex's id.
    pub id: String,
    /// Its parallelism.
    pub parallelism: u64,
    /// Each subtask's key groups, `[start, end)` (keyed vertices).
    pub key_groups: Option<Vec<[u64; 2]>>,
    /// Each subtask's runs of key groups, when a rebalance split them.
    pub key_group_runs: Option<Vec<Vec<[u64; 2]>>>,
}

/// One vertex's parallelism bounds in `/jobs/{id}/resource-requirements` (a map by vertex
/// id).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ResourceRequirement {
    /// The bounds.
    pub parallelism: ParallelismBounds,
}

/// Flink's lower and upper parallelism bounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ParallelismBounds {
    /// The least.
    pub lower_bound: u64,
    /// The most (Weir runs a vertex at exactly this).
    pub upper_bound: u64,
}
