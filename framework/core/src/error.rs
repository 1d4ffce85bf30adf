//! Typed errors of Weir: what went wrong, where (job, operator uid, subtask, file, line) and
//! whether the input or the program is at fault.
//!
//! Each layer has its own enum: [`PlanError`] for graphs that cannot run (found before any
//! actor starts), [`SourceError`] and [`SinkError`] for I/O and malformed input, and
//! [`JobError`] for what `execute` returns. This module owns no recovery policy.

use std::path::PathBuf;

/// A graph that cannot be turned into a running job. Found by `execute`/`start` before any
/// actor starts, so nothing has been read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The graph has no source.
    #[error("the job graph has no source")]
    NoSource,
    /// Two operators were given the same uid.
    #[error("duplicate operator uid `{0}`: uids must be unique within a job")]
    DuplicateUid(String),
    /// Parallelism 0, or above the maximum parallelism (the number of key groups).
    #[error("operator `{uid}`: parallelism {parallelism} is not in 1..={max}")]
    BadParallelism {
        /// The operator.
        uid: String,
        /// What was asked.
        parallelism: usize,
        /// The job's maximum parallelism.
        max: usize,
    },
    /// A `forward()` edge between operators of different parallelism.
    #[error("forward edge `{from}` -> `{to}` needs equal parallelism, found {from_parallelism} and {to_parallelism}; use rebalance() or set equal parallelism")]
    ForwardMismatch {
        /// Upstream uid.
        from: String,
        /// Downstream uid.
        to: String,
        /// Upstream parallelism.
        from_parallelism: usize,
        /// Downstream parallelism.
        to_parallelism: usize,
    },
    /// A builder method that names one operator (`uid`, `set_parallelism`, `name`) was called
    /// on a stream that is not the output of exactly one operator (a union).
    #[error("`{method}` was called on a union of streams; call it on an operator's output")]
    NotAnOperator {
        /// The method.
        method: &'static str,
    },
    /// `with_initial_state` was given a number of snapshots other than the parallelism.
    #[error("operator `{uid}`: {snapshots} initial state snapshots for parallelism {parallelism}; give one per subtask")]
    StateParallelism {
        /// The operator.
        uid: String,
        /// Snapshots given.
        snapshots: usize,
        /// Its parallelism.
        parallelism: usize,
    },
    /// A configuration value out of range.
    #[error("invalid configuration `{key}`: {message}")]
    BadConfig {
        /// The setting.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// An operator's key groups cannot be assigned as asked (by load).
    #[error("cannot assign the key groups of operator `{uid}`: {message}")]
    KeyGroups {
        /// The operator.
        uid: String,
        /// Why not.
        message: String,
    },
    /// An operator cannot be backed up as asked.
    #[error("cannot back up operator `{uid}`: {message}")]
    Backup {
        /// The operator.
        uid: String,
        /// Why not.
        message: String,
    },
    /// A derived operator's state field does not fit the stream it is applied to.
    #[error("operator `{operator}`: {problem}")]
    StateField {
        /// The operator's type name.
        operator: String,
        /// What is wrong, and what to do.
        problem: String,
    },
}

/// A source could not produce its records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The source cannot resume from a checkpointed position.
    #[error("the source cannot be replayed from a checkpoint")]
    NotReplayable,
    /// A checkpointed position does not fit this source.
    #[error("cannot resume from the checkpointed position: {message}")]
    BadPosition {
        /// Why.
        message: String,
    },
    /// The source cannot start: a setting of its own is wrong (so every attempt fails the
    /// same way; a restart does not help).
    #[error("the source cannot start: {source}")]
    Setup {
        /// What is wrong, as the source's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An external system the source reads (a broker) failed or refused; a restart may help.
    #[error("{what}: {source}")]
    External {
        /// What was being done, and where (topic, partition).
        what: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A record read from an external system cannot be decoded (policy `Fail`): every
    /// attempt would fail on it again.
    #[error("malformed record at {at}: {message}")]
    BadRecord {
        /// Where it is (topic, partition and offset).
        at: String,
        /// Why it did not decode.
        message: String,
    },
    /// A line of a line file is malformed: too long, a NUL byte, not UTF-8, or (JSON Lines)
    /// not a valid record (policy `Fail`).
    #[error("malformed record in {path} line {line} (byte offset {byte_offset}): {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// Offset in the file of the line's first byte.
        byte_offset: u64,
        /// Why it did not parse.
        message: String,
    },
}

/// A sink could not write its records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// Writing a file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An external system the sink writes to (a broker) failed or refused; a restart may
    /// help.
    #[error("{what}: {source}")]
    External {
        /// What was being done, and where (topic, transactional id).
        what: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The sink cannot start: a setting of its own is wrong (every attempt would fail).
    #[error("the sink cannot start: {message}")]
    Setup {
        /// What is wrong.
        message: String,
    },
    /// The checkpoint the job restored is older than what the sink's external system has
    /// already committed (a later checkpoint of this job, or of another run with the same
    /// transactional ids, was committed): going on from it would write records twice.
    /// Restarting from the same checkpoint fails the same way.
    #[error("{what}: it restored checkpoint {restored}, but checkpoint {committed} was already committed there; going on would write records twice (reprocessing on purpose takes new transactional ids)")]
    RestoredBehind {
        /// The sink and where it writes.
        what: String,
        /// The checkpoint the job restored.
        restored: u64,
        /// The newest checkpoint the external system holds as committed.
        committed: u64,
    },
    /// A record could not be encoded.
    #[error("cannot encode a record for {path}: {message}")]
    Encode {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Why a job did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The graph cannot run; nothing was started.
    #[error("job `{job}` cannot be planned: {source}")]
    Plan {
        /// Job name.
        job: String,
        /// What is wrong.
        #[source]
        source: PlanError,
    },
    /// User code panicked.
    #[error("job `{job}`: operator `{uid}` subtask {subtask} panicked: {message}")]
    OperatorPanicked {
        /// Job name.
        job: String,
        /// The operator's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// The panic message.
        message: String,
    },
    /// A source failed (I/O, malformed input).
    #[error("job `{job}`: source `{uid}` subtask {subtask} failed: {source}")]
    SourceFailed {
        /// Job name.
        job: String,
        /// The source's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// The cause.
        #[source]
        source: SourceError,
    },
    /// A sink failed.
    #[error("job `{job}`: sink `{uid}` subtask {subtask} failed: {source}")]
    SinkFailed {
        /// Job name.
        job: String,
        /// The sink's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// The cause.
        #[source]
        source: SinkError,
    },
    /// A subtask's actor stopped without finishing (its arbiter died, or the runtime failed).
    #[error("job `{job}`: subtask {subtask} of `{uid}` was lost: {reason}")]
    SubtaskLost {
        /// Job name.
        job: String,
        /// The chain head's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// What is known.
        reason: String,
    },
    /// An async lookup ([`DataStream::lookup`](crate::DataStream::lookup)) failed for good:
    /// a call timed out or returned an error on every attempt (the timeout policy fails the
    /// job), or its `all` cache could not be loaded.
    #[error("job `{job}`: lookup `{uid}` subtask {subtask} failed for key {key}: {message}")]
    LookupFailed {
        /// Job name.
        job: String,
        /// The lookup operator's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// The key (its `Debug` form), or `<load_all>` for a failed cache load.
        key: String,
        /// What happened: the timeout or the lookup's error, and the attempts made.
        message: String,
    },
    /// An operator's initial state could not be restored.
    #[error("job `{job}`: operator `{uid}` subtask {subtask} cannot restore its state: {source}")]
    StateRestore {
        /// Job name.
        job: String,
        /// The operator's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// Why.
        #[source]
        source: Box<crate::hooks::StateError>,
    },
    /// An operator's checkpointed state could not be written or read.
    #[error("job `{job}`: operator `{uid}` subtask {subtask}: checkpoint state: {message}")]
    CheckpointState {
        /// Job name.
        job: String,
        /// The operator's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// What failed.
        message: String,
    },
    /// Checkpoints failed more often in a row than tolerated (counted within one attempt:
    /// a restart starts the count over).
    #[error("job `{job}`: {failures} checkpoints failed in a row (tolerated: {tolerated}); the last one: {cause}")]
    CheckpointsFailing {
        /// Job name.
        job: String,
        /// Failures in a row.
        failures: u32,
        /// The configured tolerance.
        tolerated: u32,
        /// Why the last one failed (e.g. the I/O error writing its state).
        cause: String,
    },
    /// A panic recurred at the same input position after restores from the same checkpoint:
    /// restarting again would fail again, so the job fails (the input position is defined on
    /// [`FailureClass::Deterministic`](crate::FailureClass::Deterministic)).
    #[error("job `{job}`: operator `{uid}` subtask {subtask} fails again at input position {records} (records it took in since {since}, to the end of the failing batch) after {restarts} restarts; not restarting: {last}")]
    FailsAgain {
        /// Job name.
        job: String,
        /// The operator's uid.
        uid: String,
        /// Subtask index.
        subtask: usize,
        /// `checkpoint <id>` or `the start`: what the failing attempts were restored from.
        since: String,
        /// Records the operator subtask had taken in since the restore.
        records: u64,
        /// Restarts done.
        restarts: u64,
        /// The last failure.
        last: Box<JobError>,
    },
    /// A directory the job writes (checkpoints, a savepoint, a file sink) cannot be created
    /// or written; found before any record moves.
    #[error("job `{job}`: the {purpose} {path} cannot be created or written: {source}")]
    Directory {
        /// Job name.
        job: String,
        /// What the directory is for: `checkpoint directory`, `sink directory`, ...
        purpose: &'static str,
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The job was asked to start from the latest checkpoint of its earlier runs
    /// ([`RestoreLatest::Required`](crate::RestoreLatest::Required)) and none is usable.
    #[error("job `{job}`: no usable checkpoint to restore under {}: {found}", dir.display())]
    NoCheckpointToRestore {
        /// Job name.
        job: String,
        /// The job's directory of runs that was scanned (`<checkpoint directory>/<job>`).
        dir: PathBuf,
        /// What was found: no run, no complete checkpoint, or the unreadable ones and why.
        found: String,
    },
    /// The checkpoint or savepoint the job was asked to start from cannot be restored.
    #[error("job `{job}`: cannot start from {}: {source}", path.display())]
    Restore {
        /// Job name.
        job: String,
        /// The savepoint or checkpoint (or the directory scanned for one).
        path: PathBuf,
        /// Why: a `weir::checkpoint::store::CheckpointError` (downcast to match on it).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The job failed and its restart strategy allows no more restarts.
    #[error("job `{job}` failed after {restarts} restarts; last failure: {last}")]
    RestartsExhausted {
        /// Job name.
        job: String,
        /// Restarts done.
        restarts: u64,
        /// The failure that was not restarted.
        last: Box<JobError>,
    },
    /// A savepoint could not be taken.
    #[error("job `{job}`: savepoint into {dir} failed: {message}")]
    Savepoint {
        /// Job name.
        job: String,
        /// The directory asked for.
        dir: PathBuf,
        /// Why.
        message: String,
    },
    /// The job was cancelled through its handle.
    #[error("job `{job}` was cancelled")]
    Cancelled {
        /// Job name.
        job: String,
    },
    /// The runtime (threads, arbiters) could not be started or did not answer.
    #[error("job `{job}`: runtime failure: {message}")]
    Runtime {
        /// Job name.
        job: String,
        /// What failed.
        message: String,
    },
}

/// A failure inside one subtask, before the job name is attached.
#[derive(Debug)]
pub(crate) enum TaskError {
    Panic {
        uid: String,
        subtask: usize,
        message: String,
    },
    Source {
        uid: String,
        subtask: usize,
        source: SourceError,
    },
    Sink {
        uid: String,
        subtask: usize,
        source: SinkError,
    },
    State {
        uid: String,
        subtask: usize,
        source: crate::hooks::StateError,
    },
    /// A state could not be snapshotted or restored for a checkpoint.
    Checkpoint {
        uid: String,
        subtask: usize,
        message: String,
    },
    /// An async lookup failed for good (timed out or returned an error after its retries),
    /// or its cache could not be loaded.
    Lookup {
        uid: String,
        subtask: usize,
        /// The key looked up (`Debug` form), or what was being loaded.
        key: String,
        message: String,
    },
    /// A primary that was declared failed and replaced by its backup (epoch `epoch`) still
    /// ran: it stops without emitting anything.
    Fenced {
        uid: String,
        subtask: usize,
        epoch: u64,
    },
}

/// What a failed subtask reports, in a line (the cause a promotion records).
impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskError::Panic {
                uid,
                subtask,
                message,
            } => {
                write!(f, "operator `{uid}` subtask {subtask} panicked: {message}")
            }
            TaskError::Source {
                uid,
                subtask,
                source,
            } => {
                write!(f, "source `{uid}` subtask {subtask} failed: {source}")
            }
            TaskError::Sink {
                uid,
                subtask,
                source,
            } => {
                write!(f, "sink `{uid}` subtask {subtask} failed: {source}")
            }
            TaskError::State {
                uid,
                subtask,
                source,
            } => {
                write!(f, "the state of `{uid}` subtask {subtask}: {source}")
            }
            TaskError::Checkpoint {
                uid,
                subtask,
                message,
            } => {
                write!(f, "the checkpoint of `{uid}` subtask {subtask}: {message}")
            }
            TaskError::Lookup {
                uid,
                subtask,
                key,
                message,
            } => {
                write!(
                    f,
                    "lookup of {key} by `{uid}` subtask {subtask} failed: {message}"
                )
            }
            TaskError::Fenced {
                uid,
                subtask,
                epoch,
            } => {
                write!(f, "`{uid}` subtask {subtask} was fenced (epoch {epoch})")
            }
        }
    }
}

impl TaskError {
    pub(crate) fn into_job_error(self, job: &str) -> JobError {
        let job = job.to_owned();
        match self {
            TaskError::Panic {
                uid,
                subtask,
                message,
            } => JobError::OperatorPanicked {
                job,
                uid,
                subtask,
                message,
            },
            TaskError::Source {
                uid,
                subtask,
                source,
            } => JobError::SourceFailed {
                job,
                uid,
                subtask,
                source,
            },
            TaskError::Sink {
                uid,
                subtask,
                source,
            } => JobError::SinkFailed {
                job,
                uid,
                subtask,
                source,
            },
            TaskError::State {
                uid,
                subtask,
                source,
            } => JobError::StateRestore {
                job,
                uid,
                subtask,
                source: Box::new(source),
            },
            TaskError::Checkpoint {
                uid,
                subtask,
                message,
            } => JobError::CheckpointState {
                job,
                uid,
                subtask,
                message,
            },
            TaskError::Lookup {
                uid,
                subtask,
                key,
                message,
            } => JobError::LookupFailed {
                job,
                uid,
                subtask,
                key,
                message,
            },
            TaskError::Fenced {
                uid,
                subtask,
                epoch,
            } => JobError::SubtaskLost {
                job,
                uid,
                subtask,
                reason: format!("fenced: its backup took over as epoch {epoch}"),
            },
        }
    }
}

/// The text of a panic payload (`&str` or `String`; anything else is named as such).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
