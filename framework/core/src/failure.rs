//! What a job's failures are and how they are told: each failure is classified
//! ([`FailureClass`]: deterministic ones fail the job at once, the rest restart under the
//! restart strategy), recorded in the job's failure history ([`FailureRecord`], read with
//! `JobMonitor::failures`; a failure a backup took over is a [`PromotionRecord`], read with
//! `JobMonitor::promotions`), and announced on stderr with one line ([`Warnings`]) whether or not
//! the app installed a `tracing` subscriber.
//!
//! A panic is deterministic when it recurs at the same input position after a restore
//! ([`Recurrence`]). The *input position* of a panic is the number of records the failing
//! operator subtask had taken in since its attempt started, to the end of the batch it
//! failed in (for a source, the records it had emitted before the failing batch), together
//! with the checkpoint the attempt was restored from. Two attempts restored from the same
//! checkpoint replay the same input, so a record that makes user code panic fails both at the
//! same position. Batch boundaries across a network channel depend on timing, so positions
//! within one batch (`batch_size` records) of each other are the same position.
//!
//! This module decides nothing about restarting (`restart`) and runs nothing (`controller`).

use std::time::Duration;

use crate::error::{JobError, SinkError, SourceError};

/// Whether a failure can go away by restarting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureClass {
    /// Restarting may help (a panic seen once, I/O, a lost or hung subtask, failed
    /// checkpoints): the restart strategy decides.
    Transient,
    /// The same input fails the same way again (a malformed record without a skip policy, a
    /// source that cannot seek to its checkpointed position, a record that cannot be encoded,
    /// an unusable directory, a panic that recurred at the same input position after a
    /// restore): the job fails at once with this error.
    ///
    /// A panic's *input position* is the number of records the failing operator subtask had
    /// taken in since its attempt started, to the end of the batch it failed in (a source:
    /// the records it had emitted before the failing batch), and the checkpoint the attempt
    /// was restored from. Attempts restored from the same checkpoint replay the same input,
    /// so a record that makes user code panic fails them at the same position; positions
    /// less than one batch (`EnvConfig::batch_size`) apart are the same, since batch
    /// boundaries across a network channel depend on timing. When two restarted attempts in
    /// a row panic at the same position (the third occurrence, counting the first run's),
    /// the job fails with [`JobError::FailsAgain`](crate::JobError::FailsAgain).
    Deterministic,
}

impl FailureClass {
    /// The class of `error` on its own (a recurring panic is found by [`Recurrence`]).
    pub(crate) fn of(error: &JobError) -> Self {
        let deterministic = match error {
            JobError::Plan { .. }
            | JobError::StateRestore { .. }
            | JobError::FailsAgain { .. }
            | JobError::NoCheckpointToRestore { .. }
            | JobError::Restore { .. }
            | JobError::Directory { .. } => true,
            JobError::SourceFailed { source, .. } => matches!(
                source,
                SourceError::Malformed { .. }
                    | SourceError::NotReplayable
                    | SourceError::BadPosition { .. }
                    | SourceError::Setup { .. }
                    | SourceError::BadRecord { .. }
            ),
            JobError::SinkFailed { source, .. } => {
                matches!(
                    source,
                    SinkError::Encode { .. }
                        | SinkError::Setup { .. }
                        | SinkError::RestoredBehind { .. }
                )
            }
            _ => false,
        };
        if deterministic {
            FailureClass::Deterministic
        } else {
            FailureClass::Transient
        }
    }

    /// `transient` or `deterministic`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "transient",
            FailureClass::Deterministic => "deterministic",
        }
    }
}

/// What the job did about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureOutcome {
    /// The job restarted from its last complete checkpoint after `delay`.
    Restarted {
        /// The wait before the restart.
        delay: Duration,
    },
    /// The job failed with this error (deterministic, or the restart strategy gave up).
    Failed,
}

/// One failure of a job that restarted it or ended it (`JobMonitor::failures`). Failures a
/// backup took over without a restart are not in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureRecord {
    /// When the controller saw it, ms since the Unix epoch.
    pub time_ms: u64,
    /// The attempt that failed: 0 for the first deployment, then one more per restart.
    pub attempt: u64,
    /// The error's text.
    pub error: String,
    /// Whether restarting could help.
    pub class: FailureClass,
    /// What the job did.
    pub outcome: FailureOutcome,
    /// For a restart: from the failure to the restarted job running again (`None` while it
    /// restarts, and for a failure that ended the job).
    pub recovery: Option<Duration>,
}

/// One failover without a restart: a backup promoted in place of its failed primary
/// (`JobMonitor::promotions`); the rest of the job kept running.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromotionRecord {
    /// When the controller saw the primary fail, ms since the Unix epoch.
    pub time_ms: u64,
    /// The backed-up operator (the uid of its vertex's first operator).
    pub uid: String,
    /// The subtask whose backup took over.
    pub subtask: usize,
    /// Why the primary was taken for failed (its error, a missed heartbeat, a lost thread).
    pub cause: String,
    /// From the failure's detection to the new primary running.
    pub recovery: Duration,
    /// Batches the new primary replays from the buffer queue.
    pub batches_replayed: u64,
    /// Records in those batches.
    pub records_replayed: u64,
    /// Of the batches replayed, those the old primary had processed already.
    pub batches_reprocessed: u64,
}

/// Where a panic happened, in terms replay reproduces (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PanicAt {
    pub(crate) uid: String,
    pub(crate) subtask: usize,
    /// The checkpoint the failing attempt was restored from (`None`: from the start).
    pub(crate) checkpoint: Option<u64>,
    /// Records the operator subtask had taken in since the attempt started.
    pub(crate) records: u64,
}

/// Finds panics that recur at the same input position after a restore: the job fails when
/// two restarted attempts in a row, restored from the same checkpoint, panic in the same
/// operator subtask at the same position — the third occurrence counting the first run's.
#[derive(Debug, Default)]
pub(crate) struct Recurrence {
    last: Option<PanicAt>,
}

impl Recurrence {
    /// Attempt `attempt` failed, with a panic at `at` (`None`: some other failure). The
    /// earlier panic it repeats, if it does.
    pub(crate) fn observe(
        &mut self,
        attempt: u64,
        at: Option<PanicAt>,
        batch: u64,
    ) -> Option<PanicAt> {
        // The first attempt was not restored: its failure is what led to the restore.
        let at = at.filter(|_| attempt > 0);
        let previous = std::mem::replace(&mut self.last, at.clone());
        let (previous, at) = (previous?, at?);
        let same = previous.uid == at.uid
            && previous.subtask == at.subtask
            && previous.checkpoint == at.checkpoint
            && previous.records.abs_diff(at.records) < batch.max(1);
        same.then_some(previous)
    }
}

/// The one-line stderr warnings of a job: every restart and every failed checkpoint, with
/// or without a `tracing` subscriber; off with `EnvConfig::stderr_warnings = false` or the
/// environment variable `WEIR_STDERR_WARNINGS=0`.
#[derive(Debug, Clone)]
pub(crate) struct Warnings {
    job: String,
    on: bool,
}

impl Warnings {
    pub(crate) fn new(job: &str, on: bool) -> Self {
        Warnings {
            job: job.to_owned(),
            on,
        }
    }

    fn line(&self, what: std::fmt::Arguments<'_>) {
        if self.on {
            eprintln!("weir: job '{}' {what}", self.job);
        }
    }

    /// The job restarts (`restart` against the strategy's bound, after `delay`).
    pub(crate) fn restarting(&self, restart: &str, delay: Duration, error: &JobError) {
        self.line(format_args!(
            "restarting (restart {restart}, in {delay:?}) after: {error}"
        ));
    }

    /// Checkpoint `id` failed because of `why`.
    pub(crate) fn checkpoint_failed(&self, id: u64, in_a_row: u32, tolerated: u32, why: &str) {
        self.line(format_args!(
            "checkpoint {id} failed ({in_a_row} in a row, {tolerated} tolerated): {why}"
        ));
    }

    /// A savepoint could not be taken.
    pub(crate) fn savepoint_failed(&self, why: &str) {
        self.line(format_args!("savepoint failed: {why}"));
    }

    /// A checkpoint of an earlier run cannot be restored (corrupted, partial): an older one is
    /// tried.
    pub(crate) fn checkpoint_skipped(&self, dir: &std::path::Path, why: &str) {
        self.line(format_args!(
            "skipping checkpoint {} (unreadable; trying an older one): {why}",
            dir.display()
        ));
    }

    /// The job starts fresh although it was asked to resume if it could.
    pub(crate) fn starting_fresh(&self, dir: &std::path::Path) {
        self.line(format_args!(
            "found no usable checkpoint of an earlier run under {}: starting from the beginning",
            dir.display()
        ));
    }
}

/// Whether stderr warnings are on by default: yes, unless `WEIR_STDERR_WARNINGS` is `0`,
/// `false`, `off` or `no`.
pub(crate) fn stderr_warnings_default() -> bool {
    match std::env::var("WEIR_STDERR_WARNINGS") {
        Ok(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off" | "no"
        ),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(uid: &str, checkpoint: Option<u64>, records: u64) -> Option<PanicAt> {
        Some(PanicAt {
            uid: uid.into(),
            subtask: 0,
            checkpoint,
            records,
        })
    }

    #[test]
    fn a_panic_recurs_when_two_restored_attempts_fail_at_the_same_position() {
        let mut r = Recurrence::default();
        assert_eq!(r.observe(0, at("m", None, 500), 64), None);
        assert_eq!(r.observe(1, at("m", Some(3), 500), 64), None);
        assert_eq!(
            r.observe(2, at("m", Some(3), 520), 64),
            at("m", Some(3), 500),
            "within one batch"
        );
    }

    #[test]
    fn other_positions_checkpoints_operators_or_failures_do_not_recur() {
        let mut r = Recurrence::default();
        r.observe(1, at("m", Some(3), 500), 64);
        assert_eq!(r.observe(2, at("m", Some(3), 600), 64), None, "position");
        assert_eq!(r.observe(3, at("m", Some(4), 600), 64), None, "checkpoint");
        assert_eq!(r.observe(4, at("n", Some(4), 600), 64), None, "operator");
        assert_eq!(r.observe(5, None, 64), None);
        assert_eq!(
            r.observe(6, at("n", Some(4), 600), 64),
            None,
            "not in a row"
        );
        let mut first = Recurrence::default();
        first.observe(0, at("m", None, 500), 64);
        assert_eq!(
            first.observe(1, at("m", None, 500), 64),
            None,
            "the first run is not a restore"
        );
    }

    #[test]
    fn deterministic_errors_are_classified_so() {
        let malformed = JobError::SourceFailed {
            job: "j".into(),
            uid: "src".into(),
            subtask: 0,
            source: SourceError::Malformed {
                path: "in.jsonl".into(),
                line: 3,
                byte_offset: 120,
                message: "bad".into(),
            },
        };
        assert_eq!(FailureClass::of(&malformed), FailureClass::Deterministic);
        let io = JobError::SourceFailed {
            job: "j".into(),
            uid: "src".into(),
            subtask: 0,
            source: SourceError::Io {
                path: "in.jsonl".into(),
                source: std::io::Error::other("gone"),
            },
        };
        assert_eq!(FailureClass::of(&io), FailureClass::Transient);
        let panic = JobError::OperatorPanicked {
            job: "j".into(),
            uid: "m".into(),
            subtask: 0,
            message: "boom".into(),
        };
        assert_eq!(FailureClass::of(&panic), FailureClass::Transient);
    }
}
