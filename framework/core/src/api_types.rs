//! The REST API's JSON, once: the request and answer bodies of the REST server (`rest`), as
//! serde types that the server serializes and its clients (`weirctl`, its control agent)
//! deserialize. Field names are Flink's where Flink has the call (`jid`, `state`,
//! `start-time`, `backpressureLevel`, `end_to_end_duration`: Flink mixes kebab, camel and snake
//! case, and so do these types, field by field); the fields Weir adds are named as Weir's
//! other fields are.
//!
//! Every answer type reads a Flink cluster's answer too: a field Flink does not send takes
//! its default (`#[serde(default)]` on every answer type; `Option` where "absent" means
//! something), and fields Flink sends that these types lack are ignored.
//!
//! It owns shapes only: no HTTP (the server is `rest`, behind the `rest` feature; this module
//! compiles with serde alone), no route (`rest::ROUTES`), and no conversion from the job's
//! types (the server's handlers build these values).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// ---- The cluster and its jobs ------------------------------------------------------------

/// `GET /overview`: the cluster in numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ClusterOverview {
    /// Task managers (Weir: 1, the process).
    pub taskmanagers: u64,
    /// Slots (Weir: one a job).
    pub slots_total: u64,
    /// Free slots.
    pub slots_available: u64,
    /// Jobs running, restarting, initializing or cancelling.
    pub jobs_running: u64,
    /// Jobs finished.
    pub jobs_finished: u64,
    /// Jobs cancelled.
    pub jobs_cancelled: u64,
    /// Jobs failed.
    pub jobs_failed: u64,
    /// The server's version (`weir <version>`, or Flink's).
    pub flink_version: String,
    /// The build's commit (empty for Weir).
    pub flink_commit: String,
}

/// `GET /jobs`: each job's id and status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct JobIdsWithStatus {
    /// The jobs.
    pub jobs: Vec<JobIdWithStatus>,
}

/// One job of [`JobIdsWithStatus`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct JobIdWithStatus {
    /// The job's id.
    pub id: String,
    /// Its state (`RUNNING`, `FINISHED`, ...).
    pub status: String,
}

/// `GET /jobs/overview`: every job with its state and times.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct JobsOverview {
    /// The jobs.
    pub jobs: Vec<JobOverview>,
}

/// Task counts by state (`running`, `finished`, ..., and `total`).
pub type TaskCounts = BTreeMap<String, u64>;

/// One job of [`JobsOverview`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct JobOverview {
    /// The job's id.
    pub jid: String,
    /// Its name.
    pub name: String,
    /// Its state (`RUNNING`, `FINISHED`, ...).
    pub state: String,
    /// When it started, ms since the Unix epoch.
    pub start_time: u64,
    /// When it ended, ms since the Unix epoch; -1 while it runs.
    pub end_time: i64,
    /// How long it ran (to now while it runs), ms.
    pub duration: u64,
    /// When this answer was made, ms since the Unix epoch.
    pub last_modification: u64,
    /// Its tasks by state.
    pub tasks: TaskCounts,
}

/// `GET /jobs/{id}`: a job with its vertices and plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct JobDetails {
    /// The job's id.
    pub jid: String,
    /// Its name.
    pub name: String,
    /// Whether it can be stopped without a savepoint (Weir: no).
    #[serde(rename = "isStoppable")]
    pub is_stoppable: bool,
    /// Its state.
    pub state: String,
    /// `STREAMING`.
    pub job_type: String,
    /// When it started, ms since the Unix epoch.
    pub start_time: u64,
    /// When it ended; -1 while it runs.
    pub end_time: i64,
    /// How long it ran, ms.
    pub duration: u64,
    /// The job's maximum parallelism (-1: per vertex).
    #[serde(rename = "maxParallelism")]
    pub max_parallelism: i64,
    /// When this answer was made, ms since the Unix epoch.
    pub now: u64,
    /// When it entered each state.
    pub timestamps: BTreeMap<String, u64>,
    /// Its vertices (chains of operators).
    pub vertices: Vec<JobVertex>,
    /// Its vertices by state.
    pub status_counts: BTreeMap<String, u64>,
    /// Its plan: the vertices with their inputs.
    pub plan: JobPlan,
    /// Weir's: the rate limit on each source subtask, when rate control is on.
    pub source_rate_limit: Option<f64>,
}

/// One vertex of [`JobDetails`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct JobVertex {
    /// The vertex's id (Weir: its head operator's uid).
    pub id: String,
    /// Its name (its operators').
    pub name: String,
    /// Its maximum parallelism (key groups).
    #[serde(rename = "maxParallelism")]
    pub max_parallelism: u64,
    /// Its parallelism.
    pub parallelism: u64,
    /// Its state.
    pub status: String,
    /// When it started, ms since the Unix epoch.
    pub start_time: u64,
    /// When it ended; -1 while it runs.
    pub end_time: i64,
    /// How long it ran, ms.
    pub duration: u64,
    /// Its subtasks by state.
    pub tasks: TaskCounts,
    /// Records and bytes in and out.
    pub metrics: VertexIoMetrics,
    /// Weir's: the worst backpressure level of its subtasks (`ok`, `low`, `high`).
    pub backpressure_level: Option<String>,
    /// Weir's: records in per second over the last metrics interval.
    pub records_in_per_second: Option<f64>,
    /// Weir's: records out per second over the last metrics interval.
    pub records_out_per_second: Option<f64>,
}

/// The records and bytes into and out of a vertex.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct VertexIoMetrics {
    /// Bytes read (Weir: 0, not measured).
    pub read_bytes: u64,
    /// Whether `read_bytes` is complete.
    pub read_bytes_complete: bool,
    /// Bytes written (Weir: 0, not measured).
    pub write_bytes: u64,
    /// Whether `write_bytes` is complete.
    pub write_bytes_complete: bool,
    /// Records into the vertex's first operator.
    pub read_records: u64,
    /// Whether `read_records` is complete.
    pub read_records_complete: bool,
    /// Records out of its last operator.
    pub write_records: u64,
    /// Whether `write_records` is complete.
    pub write_records_complete: bool,
}

/// A job's plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct JobPlan {
    /// The job's id.
    pub jid: String,
    /// Its name.
    pub name: String,
    /// `STREAMING`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its vertices.
    pub nodes: Vec<PlanNode>,
}

/// A vertex of a [`JobPlan`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PlanNode {
    /// The vertex's id.
    pub id: String,
    /// Its parallelism.
    pub parallelism: u64,
    /// Its name.
    pub description: String,
    /// (Flink's; empty.)
    pub operator: String,
    /// (Flink's; empty.)
    pub operator_strategy: String,
    /// The vertices it reads.
    pub inputs: Vec<PlanInput>,
}

/// An input of a [`PlanNode`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PlanInput {
    /// Its position among the inputs.
    pub num: u64,
    /// The vertex read.
    pub id: String,
    /// How records go to the subtasks (`FORWARD`, `HASH`, `REBALANCE`, ...).
    pub ship_strategy: String,
    /// (Flink's; `pipelined_bounded`.)
    pub exchange: String,
}

/// `GET /jobs/{id}/vertices/{vid}`: a vertex and its subtasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct VertexDetails {
    /// The vertex's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u64,
    /// Its maximum parallelism.
    #[serde(rename = "maxParallelism")]
    pub max_parallelism: u64,
    /// When this answer was made, ms since the Unix epoch.
    pub now: u64,
    /// Its subtasks.
    pub subtasks: Vec<VertexSubtask>,
}

/// One subtask of [`VertexDetails`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct VertexSubtask {
    /// Its index.
    pub subtask: u64,
    /// Its state.
    pub status: String,
    /// Its attempt (Weir: 0).
    pub attempt: u64,
    /// Where it runs.
    pub host: String,
    /// When it started, ms since the Unix epoch.
    pub start_time: u64,
    /// When it ended; -1 while it runs.
    pub end_time: i64,
    /// How long it ran, ms.
    pub duration: u64,
}

/// `GET /jobs/{id}/vertices/{vid}/backpressure`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct VertexBackpressure {
    /// `ok` (Flink: or `deprecated`).
    pub status: String,
    /// The worst level of the subtasks: `ok`, `low`, `high`.
    #[serde(rename = "backpressureLevel")]
    pub backpressure_level: String,
    /// When it was measured, ms since the Unix epoch.
    #[serde(rename = "end-timestamp")]
    pub end_timestamp: u64,
    /// Each subtask's.
    pub subtasks: Vec<SubtaskBackpressure>,
}

/// One subtask of [`VertexBackpressure`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SubtaskBackpressure {
    /// Its index.
    pub subtask: u64,
    /// Its attempt.
    #[serde(rename = "attempt-number")]
    pub attempt_number: u64,
    /// `ok`, `low`, `high`.
    #[serde(rename = "backpressureLevel")]
    pub backpressure_level: String,
    /// The share of time it was back-pressured, 0 to 1.
    pub ratio: f64,
    /// The share of time it was busy.
    #[serde(rename = "busyRatio")]
    pub busy_ratio: f64,
    /// The share of time it was idle.
    #[serde(rename = "idleRatio")]
    pub idle_ratio: f64,
}

// ---- Metrics -----------------------------------------------------------------------------

/// One metric of `GET /jobs/{id}/metrics` or `/vertices/{vid}/metrics`: its name, and its
/// value (as a string, as Flink's) when asked for with `get`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Metric {
    /// The metric's name.
    pub id: String,
    /// Its value; absent in the list of names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl Metric {
    /// A metric's name alone (the list of names).
    pub fn name(id: impl Into<String>) -> Metric {
        Metric {
            id: id.into(),
            value: None,
        }
    }

    /// A metric with its value.
    pub fn with_value(id: impl Into<String>, value: impl Into<String>) -> Metric {
        Metric {
            id: id.into(),
            value: Some(value.into()),
        }
    }

    /// Its value as a number, if it is one.
    pub fn number(&self) -> Option<f64> {
        self.value.as_deref()?.parse().ok()
    }
}

/// One metric of `GET /jobs/{id}/vertices/{vid}/subtasks/metrics`: its name and the
/// aggregates asked for over the subtasks (absent: not asked for).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AggregatedMetric {
    /// The metric's name.
    pub id: String,
    /// The smallest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The sum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    /// The average.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg: Option<f64>,
    /// How far the largest is above the average, in percent of the largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew: Option<f64>,
}

impl AggregatedMetric {
    /// A metric's name alone (the list of names).
    pub fn name(id: impl Into<String>) -> AggregatedMetric {
        AggregatedMetric {
            id: id.into(),
            ..AggregatedMetric::default()
        }
    }
}

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

// ---- Errors ------------------------------------------------------------------------------

/// Every error answer: `{"errors": ["..."]}` (Flink's shape).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ErrorBody {
    /// The messages (Flink's carry Java stack traces).
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Flink answer, with fields these types lack and without Weir's, parses.
    #[test]
    fn flink_answers_parse() {
        let overview: JobsOverview = serde_json::from_str(
            r#"{"jobs":[{"jid":"a1","name":"n","state":"RUNNING","start-time":1,"end-time":-1,
            "duration":5,"last-modification":2,"tasks":{"running":2,"total":2},"pending-operators":0}]}"#,
        )
        .unwrap();
        assert_eq!(overview.jobs[0].jid, "a1");
        let job: JobDetails = serde_json::from_str(
            r#"{"jid":"a1","name":"n","state":"RUNNING","vertices":[{"id":"v","name":"Source",
            "parallelism":2,"status":"RUNNING","metrics":{"read-records":3,"accumulated-backpressured-time":0}}]}"#,
        )
        .unwrap();
        assert_eq!(job.vertices[0].metrics.read_records, 3);
        assert_eq!(job.vertices[0].backpressure_level, None);
        let stats: CheckpointingStatistics = serde_json::from_str(
            r#"{"counts":{"completed":4,"failed":0},"latest":{"completed":{"id":4,
            "end_to_end_duration":12,"state_size":7,"checkpointed_size":7},"failed":null}}"#,
        )
        .unwrap();
        assert_eq!(stats.counts.completed, 4);
        assert_eq!(
            stats.latest.completed.map(|c| c.end_to_end_duration),
            Some(12)
        );
    }

    /// Every answer Flink 2.3 gave in the recorded fixtures parses into its type.
    #[test]
    fn the_recorded_flink_answers_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/tests/fixtures/flink-2.3");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let text = read(&name);
            let parsed = match name.as_str() {
                n if n.starts_with("overview") => {
                    serde_json::from_str::<JobsOverview>(&text).map(drop)
                }
                n if n.starts_with("job") => serde_json::from_str::<JobDetails>(&text).map(drop),
                n if n.starts_with("checkpoints") => {
                    serde_json::from_str::<CheckpointingStatistics>(&text).map(drop)
                }
                n if n.starts_with("backpressure") => {
                    serde_json::from_str::<VertexBackpressure>(&text).map(drop)
                }
                n if n.starts_with("metrics") => {
                    serde_json::from_str::<Vec<Metric>>(&text).map(drop)
                }
                n if n.starts_with("subtasks-metrics") => {
                    serde_json::from_str::<Vec<AggregatedMetric>>(&text).map(drop)
                }
                "stop-trigger.json" => serde_json::from_str::<TriggerId>(&text).map(drop),
                n if n.starts_with("stop-") => {
                    serde_json::from_str::<OperationStatus>(&text).map(drop)
                }
                "unknown-job.json" => serde_json::from_str::<ErrorBody>(&text).map(drop),
                _ => continue,
            };
            parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
            seen += 1;
        }
        assert!(seen >= 20, "only {seen} fixtures read");
    }

    /// The names are Flink's, field by field.
    #[test]
    fn field_names_are_flinks() {
        let v = serde_json::to_value(OperationStatus::completed(OperationResult {
            failure_cause: Some(FailureCause {
                class: "c".into(),
                stack_trace: "s".into(),
                serialized_throwable: None,
            }),
            ..OperationResult::default()
        }))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status": {"id": "COMPLETED"},
                "operation": {"failure-cause": {"class": "c", "stack-trace": "s"}}})
        );
        let v = serde_json::to_value(TriggerId {
            request_id: "x".into(),
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"request-id": "x"}));
        let v = serde_json::to_value(StopRequest::new("/d")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"targetDirectory": "/d", "drain": false})
        );
    }
}
