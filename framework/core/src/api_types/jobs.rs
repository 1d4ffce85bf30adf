//! The cluster, its jobs, their vertices and backpressure, and metrics: the answers of
//! `/overview`, `/jobs`, `/jobs/overview`, `/jobs/{id}`, `/jobs/{id}/vertices/{vid}` (and its
//! `backpressure`), and the job, vertex and subtask metrics.

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

// ---- Failures and backups ----------------------------------------------------------------

/// `GET /jobs/{id}/exceptions`: Flink's exception history, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct JobExceptions {
    /// The newest entry's message.
    pub root_exception: Option<String>,
    /// The newest entry's time, ms since the Unix epoch.
    pub timestamp: Option<u64>,
    /// (Flink's, deprecated; empty.)
    pub all_exceptions: Vec<serde_json::Value>,
    /// Whether older entries were left out.
    pub truncated: bool,
    /// The entries.
    #[serde(rename = "exceptionHistory")]
    pub exception_history: ExceptionHistory,
}

/// The entries of [`JobExceptions`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ExceptionHistory {
    /// Newest first.
    pub entries: Vec<ExceptionEntry>,
    /// Whether older entries were left out.
    pub truncated: bool,
}

/// One failure of [`ExceptionHistory`], with how the job recovered (Weir's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExceptionEntry {
    /// The error's class (`weir.JobError`, `weir.TaskFailure`).
    pub exception_name: String,
    /// Its message.
    pub stacktrace: String,
    /// When, ms since the Unix epoch.
    pub timestamp: u64,
    /// The subtask that failed (`uid (i/n)`), if one did.
    pub task_name: Option<String>,
    /// (Flink's; null.)
    pub endpoint: Option<String>,
    /// (Flink's; null.)
    pub task_manager_id: Option<String>,
    /// The failure's labels (`class`: `transient`, ...).
    pub failure_labels: BTreeMap<String, String>,
    /// (Flink's; empty.)
    pub concurrent_exceptions: Vec<serde_json::Value>,
    /// Weir's: how the job recovered: `promotion`, `restart` or `failed`.
    pub failover: Option<String>,
    /// Weir's: how long recovery took, ms (null while a restart is under way); a whole
    /// number for a restart, a fraction for a promotion.
    pub recovery_ms: Option<serde_json::Number>,
    /// Weir's: records a promoted backup replayed from its buffer queue (null for a
    /// restart).
    pub records_replayed: Option<u64>,
    /// Weir's: what only a restart or only a promotion reports.
    #[serde(flatten)]
    pub recovery: Option<Recovery>,
}

/// What one kind of recovery reports beside the common fields of an [`ExceptionEntry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum Recovery {
    /// A backup of the failed subtask took over.
    Promotion {
        /// The failed subtask's operator.
        uid: String,
        /// Its index.
        subtask: u64,
        /// Batches replayed from the buffer queue.
        batches_replayed: u64,
        /// Batches processed again.
        batches_reprocessed: u64,
    },
    /// The job restarted (or failed for good).
    Restart {
        /// The restart's attempt.
        attempt: u64,
        /// The pause before the restart, ms (null: no restart).
        restart_delay_ms: Option<u64>,
    },
}

/// `GET /jobs/{id}/backups`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Backups {
    /// Each backed-up subtask.
    pub backups: Vec<Backup>,
}

/// One backed-up subtask of [`Backups`]: its buffer queue, filtering, promotions and lag.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct Backup {
    /// The operator.
    pub uid: String,
    /// The subtask.
    pub subtask: u64,
    /// Entries in its buffer queue.
    pub queue_entries: u64,
    /// Their bytes.
    pub queue_bytes: u64,
    /// Batches filtered out of the queue.
    pub filtered_batches: u64,
    /// Records filtered out of the queue.
    pub filtered_records: u64,
    /// Entries added.
    pub added: u64,
    /// Entries claimed.
    pub claimed: u64,
    /// Promotions of its backup.
    pub promotions: u64,
    /// Backups replaced.
    pub backup_replacements: u64,
    /// The last failover's duration, ms.
    pub last_failover_ms: Option<f64>,
    /// Batches processed again in the last failover.
    pub last_reprocessed_batches: u64,
    /// How far the backup is behind.
    pub backup_lag: u64,
    /// Whether it runs without a backup.
    pub degraded: bool,
}
