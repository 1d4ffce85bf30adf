//! Fast restart with a new graph: what a caller asks for and what it is told. The protocol
//! lives in the controller (`controller::states::replacing`); this module owns the public
//! types only.

use std::time::Duration;

/// How a graph replacement may go ([`JobMonitor::replace`](crate::JobMonitor::replace)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplaceOptions {
    /// Drop the state of operators the new graph does not have (otherwise refused).
    pub allow_dropping_state: bool,
    /// How long the new graph has to complete its first checkpoint; a failure before that,
    /// or no checkpoint by then, rolls back to the old graph from the same savepoint.
    pub grace: Duration,
}

impl Default for ReplaceOptions {
    fn default() -> Self {
        ReplaceOptions {
            allow_dropping_state: false,
            grace: Duration::from_secs(30),
        }
    }
}

impl ReplaceOptions {
    /// Drops the state of operators the new graph does not have.
    pub fn allow_dropping_state(mut self) -> Self {
        self.allow_dropping_state = true;
        self
    }

    /// The time the new graph has to complete its first checkpoint.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

/// What a replacement did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplaceReport {
    /// The in-memory savepoint the new graph started from.
    pub checkpoint: u64,
    /// From the request to the new graph's subtasks running.
    pub duration: Duration,
    /// From the sources' pause at the savepoint's barrier to the new subtasks running.
    pub pause: Duration,
    /// Operators whose state was dropped (`allow_dropping_state`).
    pub dropped_state: Vec<String>,
    /// The new graph's first checkpoint that completed (it can no longer be rolled back
    /// past), if checkpoints are on.
    pub committed_at: Option<u64>,
}

/// Why a replacement was refused, abandoned or rolled back. Whatever the error, the job runs
/// the graph it ran before, and nothing was lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplaceError {
    /// No graph of this name was registered ([`Env::register_graph`](crate::Env::register_graph)).
    #[error("no graph is registered as `{name}` (registered: {known})")]
    UnknownGraph {
        /// The name asked for.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// The new graph is not a valid job.
    #[error("the new graph cannot run: {0}")]
    Plan(String),
    /// State of the running job has no place in the new graph.
    #[error("state of operator `{uid}` does not fit the new graph: {why}")]
    StateDoesNotFit {
        /// The operator.
        uid: String,
        /// Why (and how to allow it, if it can be dropped).
        why: String,
    },
    /// Another change is in progress (a rescale, a savepoint, a replacement).
    #[error("cannot replace the graph now: {0}")]
    Busy(String),
    /// The job's settings do not allow it.
    #[error("cannot replace this job's graph: {0}")]
    Unsupported(String),
    /// Abandoned before anything changed (its savepoint failed, or the job failed first).
    #[error("replacement abandoned, the old graph runs on: {0}")]
    Aborted(String),
    /// The new graph failed, or did not complete a checkpoint in its grace period: the old
    /// graph runs again from the same savepoint.
    #[error("the new graph was rolled back: {0}")]
    RolledBack(String),
    /// The job ended before it answered.
    #[error("the job ended before the replacement completed")]
    JobEnded,
}
