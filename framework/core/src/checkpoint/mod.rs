//! Checkpoints: Chandy–Lamport barriers through the dataflow, snapshots of every operator's
//! state, and the files that make a checkpoint complete.
//!
//! - [`CheckpointConfig`]: Flink's settings and defaults (off unless an interval is set).
//! - `align`: which input channels a subtask reads while a barrier is being aligned.
//! - `store`: snapshot files (CBOR in a versioned envelope, temp → fsync → rename) and the
//!   checkpoint's `_metadata`, written last: only a checkpoint with `_metadata` is complete.
//! - `coordinator`: triggers checkpoints at the sources, collects acknowledgements, completes
//!   or aborts them.
//! - Incremental checkpoints of keyed state (`CheckpointConfig::incremental`): `copy` (the
//!   operator's copy of what changed, a chunk at a time, copy-on-write), `incremental` (the
//!   thread per keyed subtask that writes its runs and keeps its chain), `runs` (the run
//!   files: format, merge, the payload a chain holds).
//!
//! Recovery (restoring the last complete checkpoint) is the controller's (`controller`).

pub(crate) mod align;
pub(crate) mod barriers;
pub mod coordinator;
pub(crate) mod copy;
pub(crate) mod incremental;
#[cfg(all(test, weir_loom))]
mod loom_align;
#[cfg(all(test, weir_loom))]
mod loom_overtake;
pub(crate) mod remote;
pub(crate) mod runs;
pub mod store;

use std::path::PathBuf;

/// What an operator that works long on a state calls now and then, so that its supervisor
/// does not take it for hung (a backed-up primary's heartbeat answer).
pub(crate) type Progress = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The states an operator chain contributes to one checkpoint, in chain order.
#[derive(Default)]
pub(crate) struct StateWriter {
    pub(crate) entries: Vec<StateEntry>,
    /// The states are handed over in memory too (a rescale's or a fast restart's checkpoint).
    pub(crate) hand_over: bool,
    /// Not a checkpoint: operator `uid` hands its state to its backup, as what changed since
    /// its last hand-off if it can (`state::changes`), everything if `true`.
    pub(crate) changes_of: Option<(String, bool)>,
    /// Called now and then by an operator that works long on this writer (a large hand-off),
    /// so its supervisor does not take it for hung.
    pub(crate) progress: Option<Progress>,
    /// The checkpoint's id and the job run's directory, when operators may hand this
    /// checkpoint their state incrementally (`incremental`): a checkpoint on disk, not
    /// handed over in memory.
    pub(crate) incremental: Option<(u64, PathBuf)>,
    /// An unaligned checkpoint: network outputs send its barrier ahead of what waits in
    /// their buffers and channels (`channel::Sender::send_overtaking`).
    pub(crate) unaligned: bool,
}

impl std::fmt::Debug for StateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateWriter")
            .field("entries", &self.entries)
            .field("hand_over", &self.hand_over)
            .field("changes_of", &self.changes_of)
            .field("incremental", &self.incremental)
            .field("unaligned", &self.unaligned)
            .finish_non_exhaustive()
    }
}

/// One operator subtask's state.
#[derive(Debug)]
pub(crate) struct StateEntry {
    pub(crate) uid: String,
    pub(crate) key_groups: Option<(usize, usize)>,
    pub(crate) payload: Vec<u8>,
    /// What changed (a hand-off's, from an operator that tracks its changes); `payload` is
    /// then empty.
    pub(crate) changes: Option<crate::state::changes::KeyedDelta>,
    /// The payload, made later (off the data path) by this; `payload` is then empty.
    pub(crate) deferred: Option<DeferredPayload>,
    /// The state is a chain of runs (an incremental checkpoint's), known once written;
    /// `payload` is then empty.
    pub(crate) chain: Option<incremental::ChainPart>,
}

/// A snapshot payload made when called: a backed-up keyed operator's checkpoint state,
/// built from its backup's copy by the checkpoint's writer thread. Dropping it gives up.
pub(crate) struct DeferredPayload(pub(crate) Box<dyn FnOnce() -> Result<Vec<u8>, String> + Send>);

impl std::fmt::Debug for DeferredPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeferredPayload")
    }
}

impl StateWriter {
    /// A writer for a checkpoint whose states are (`hand_over`) or are not handed over.
    pub(crate) fn new(hand_over: bool) -> Self {
        StateWriter {
            entries: Vec::new(),
            hand_over,
            changes_of: None,
            progress: None,
            incremental: None,
            unaligned: false,
        }
    }

    /// A writer for operator `uid`'s hand-off to its backup: what changed (or everything,
    /// `full`) from an operator that tracks it, its snapshot from the others.
    pub(crate) fn changes(uid: &str, full: bool) -> Self {
        StateWriter {
            entries: Vec::new(),
            hand_over: false,
            changes_of: Some((uid.to_owned(), full)),
            progress: None,
            incremental: None,
            unaligned: false,
        }
    }

    /// Whether operator `uid` is asked for its changes, and if so whether for everything.
    pub(crate) fn changes_of(&self, uid: &str) -> Option<bool> {
        match &self.changes_of {
            Some((u, full)) if u == uid => Some(*full),
            _ => None,
        }
    }

    /// Says the operator is working (see `progress`).
    pub(crate) fn progress(&self) {
        if let Some(p) = &self.progress {
            p();
        }
    }

    /// Adds operator `uid`'s changes (of the key groups it owns).
    pub(crate) fn put_changes(
        &mut self,
        uid: &str,
        key_groups: Option<(usize, usize)>,
        delta: crate::state::changes::KeyedDelta,
    ) {
        self.entries.push(StateEntry {
            uid: uid.to_owned(),
            key_groups,
            payload: Vec::new(),
            changes: Some(delta),
            deferred: None,
            chain: None,
        });
    }

    pub(crate) fn put(&mut self, uid: &str, key_groups: Option<(usize, usize)>, payload: Vec<u8>) {
        self.entries.push(StateEntry {
            uid: uid.to_owned(),
            key_groups,
            payload,
            changes: None,
            deferred: None,
            chain: None,
        });
    }

    /// Adds operator `uid`'s state as a chain of runs, known when `chain` is written.
    pub(crate) fn put_chain(
        &mut self,
        uid: &str,
        key_groups: Option<(usize, usize)>,
        chain: incremental::ChainPart,
    ) {
        self.entries.push(StateEntry {
            uid: uid.to_owned(),
            key_groups,
            payload: Vec::new(),
            changes: None,
            deferred: None,
            chain: Some(chain),
        });
    }
}

/// Encodes a state payload as CBOR, the format of every snapshot Weir writes. Sources and
/// sinks of other crates (the Kafka connector's offsets and transactions, say) encode their
/// [`StateSnapshot`](crate::StateSnapshot) payloads with it, so a checkpoint is one format.
///
/// ```
/// let bytes = weir::checkpoint::encode(&(7u64, "offset")).unwrap();
/// let back: (u64, String) = weir::checkpoint::decode(&bytes).unwrap();
/// assert_eq!(back, (7, "offset".to_owned()));
/// ```
pub fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Decodes a CBOR state payload written by [`encode`]; the error names what did not fit.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    ciborium::from_reader(bytes).map_err(|e| e.to_string())
}
use std::time::Duration;

use crate::error::PlanError;

/// The id a two-phase sink is given for the commit made when a job's input has ended (after
/// the last checkpoint): it commits what is pending then, with no checkpoint to wait for.
pub const FINAL_COMMIT: u64 = u64::MAX;

/// Where an operator instance starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartPoint {
    /// No checkpoint: the first deployment, or a restart before any checkpoint completed.
    Fresh,
    /// Checkpoint (or savepoint) `id`, restored.
    Checkpoint(u64),
    /// A promoted backup, going on from its primary's state.
    Promoted,
}

/// The delivery guarantee of checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Aligned barriers: each record is reflected in the state exactly once.
    ExactlyOnce,
    /// Unaligned processing of barriers: after a restore some records may be reflected twice.
    AtLeastOnce,
}

/// Resuming a job from the newest checkpoint its earlier runs left: what a supervisor (systemd,
/// Kubernetes, a shell loop) sets to restart a process that was killed, crashed or lost its
/// machine, with the same checkpoint directory.
///
/// Each run of a job writes its checkpoints into a directory of its own,
/// `<directory>/<job>/run-<start ms>-<pid>-<n>/chk-<id>/`, where `<directory>` is the
/// checkpoint directory and `<job>` the name the job is started with. At start the job scans
/// every run directory of `<directory>/<job>/` and takes the newest complete checkpoint —
/// newest run first (by its start time), then highest checkpoint id — whose `_metadata` and
/// state files all read back and check (format, operator, subtask, checkpoint id). A corrupted,
/// truncated or partial checkpoint is skipped with a warning (log and stderr) for the one
/// before it, in the same run or an earlier one. Like Flink's restore from a retained
/// checkpoint, the state is matched to the job's operators by uid, and
/// [`CheckpointConfig::allow_non_restored_state`] applies; state that cannot fit the job (an
/// operator it no longer has, a changed parallelism) fails the start with
/// [`JobError::Restore`](crate::JobError::Restore) rather than being skipped.
///
/// The new run continues the checkpoint ids after the restored one and, once its own first
/// checkpoint is complete (or it finishes), deletes the run directories it scanned (Flink's
/// *claim* mode): a later restart resumes from the new run's checkpoints, and a job that
/// finished leaves nothing to resume from. Until then a failure of the new run restores the
/// same checkpoint again.
///
/// ```
/// use weir::{CheckpointConfig, RestoreLatest};
/// let mut c = CheckpointConfig::default();
/// c.interval = Some(std::time::Duration::from_secs(1));
/// c.directory = std::env::temp_dir().join("weir-doc-restore-latest");
/// // Resume if an earlier run left a checkpoint, start fresh if none did.
/// c.restore_latest = Some(RestoreLatest::if_any(&c.directory));
/// assert!(c.validate().is_ok());
/// c.restore_from = Some("/backups/sp".into());
/// assert!(c.validate().is_err(), "one place to start from");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreLatest {
    /// Restore the newest usable checkpoint under this checkpoint directory; if there is none
    /// (no run left one, or every one is unreadable), the job does not start: `execute` and
    /// `start` return [`JobError::NoCheckpointToRestore`](crate::JobError::NoCheckpointToRestore)
    /// saying what was found.
    /// Like Flink's `--fromSavepoint <path>`, which fails when the path holds nothing.
    Required(PathBuf),
    /// Restore the newest usable checkpoint under this checkpoint directory, or start fresh
    /// (with a warning) if there is none: the setting for "start, or resume after a crash".
    IfAny(PathBuf),
}

impl RestoreLatest {
    /// [`RestoreLatest::Required`] over the checkpoint directory `dir`.
    pub fn required(dir: impl Into<PathBuf>) -> Self {
        RestoreLatest::Required(dir.into())
    }

    /// [`RestoreLatest::IfAny`] over the checkpoint directory `dir`.
    pub fn if_any(dir: impl Into<PathBuf>) -> Self {
        RestoreLatest::IfAny(dir.into())
    }

    /// The checkpoint directory scanned (its `<job>/` sub-directory holds the runs).
    pub fn directory(&self) -> &std::path::Path {
        match self {
            RestoreLatest::Required(d) | RestoreLatest::IfAny(d) => d,
        }
    }

    /// Whether a start without a usable checkpoint is an error.
    pub fn is_required(&self) -> bool {
        matches!(self, RestoreLatest::Required(_))
    }
}

/// Checkpoint settings (Flink's names and defaults).
///
/// ```
/// let mut c = weir::CheckpointConfig::default();
/// assert!(c.interval.is_none(), "off unless an interval is set");
/// c.interval = Some(std::time::Duration::from_secs(1));
/// c.directory = std::env::temp_dir().join("weir-doc-checkpoints");
/// assert!(c.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// How often to checkpoint; `None` (default) turns checkpoints off.
    pub interval: Option<Duration>,
    /// A checkpoint not complete after this long is aborted (default 10 min).
    pub timeout: Duration,
    /// Least time between the end of one checkpoint and the start of the next (default 0).
    pub min_pause: Duration,
    /// Checkpoints in progress at once (default 1).
    pub max_concurrent: usize,
    /// Exactly-once (aligned, default) or at-least-once.
    pub mode: CheckpointMode,
    /// Unaligned checkpoints (exactly-once mode): a subtask snapshots as soon as the first
    /// barrier is visible in any input, without blocking channels, and stores the data that
    /// was still in flight before the barrier on each channel as channel state (default off).
    pub unaligned: bool,
    /// An aligned checkpoint whose alignment takes longer than this switches to unaligned
    /// (default none).
    pub aligned_checkpoint_timeout: Option<Duration>,
    /// Failed checkpoints tolerated in a row before the job fails (default 0).
    pub tolerable_failed_checkpoints: u32,
    /// Completed checkpoints kept on disk (default 1).
    pub retained: usize,
    /// Where checkpoints are written (`<directory>/<job>/<run>/chk-<id>/`): a local path,
    /// or an object store's URL (`s3://bucket/path`, `gs://`, `az://`, `file://`; feature
    /// `object-store`, credentials from the store's usual environment variables), kept in
    /// step with a local copy under `local_directory`. See the book's "State backends and
    /// checkpoint storage".
    pub directory: PathBuf,
    /// Where checkpoints, savepoints and restores on an object store keep their local copy
    /// (`<local_directory>/<scheme>/<bucket>/<path>`; default `<temp>/weir-local`). A
    /// restore finds files already there and fetches only the rest.
    pub local_directory: PathBuf,
    /// Settings of the object-store client, over those read from the environment: object
    /// store's own keys, such as `aws_endpoint`, `aws_allow_http`, `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_region` (S3), `google_service_account` (GCS),
    /// `azure_storage_account_name` (Azure). Default none. A key the store does not know
    /// fails the job's start, naming it.
    pub storage_options: Vec<(String, String)>,
    /// Start the job from this savepoint (or complete checkpoint) directory.
    pub restore_from: Option<PathBuf>,
    /// Start the job from the newest complete checkpoint an earlier run of it (of the same job
    /// name) left, e.g. one killed mid-job: see [`RestoreLatest`] (default none: every run
    /// starts fresh). Not together with `restore_from`.
    pub restore_latest: Option<RestoreLatest>,
    /// With `restore_from`: drop state of operators the job no longer has instead of failing.
    pub allow_non_restored_state: bool,
    /// Incremental checkpoints (Flink's `execution.checkpointing.incremental`, default off):
    /// a keyed operator's checkpoint writes only the entries changed since its previous one,
    /// copied a chunk at a time beside its records and written off its thread, and references
    /// the earlier runs it builds on (under `shared/` of the run's directory); the runs are
    /// merged into a new base once they add up to it. Savepoints stay self-contained. See
    /// the book's "State backends and checkpoint storage".
    pub incremental: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: None,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            mode: CheckpointMode::ExactlyOnce,
            unaligned: false,
            aligned_checkpoint_timeout: None,
            tolerable_failed_checkpoints: 0,
            retained: 1,
            directory: std::env::temp_dir().join("weir-checkpoints"),
            local_directory: std::env::temp_dir().join("weir-local"),
            storage_options: Vec::new(),
            restore_from: None,
            restore_latest: None,
            allow_non_restored_state: false,
            incremental: false,
        }
    }
}

impl CheckpointConfig {
    /// Checks every value; the error names the first bad one.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |key, message: &str| {
            Err(PlanError::BadConfig {
                key,
                message: message.to_owned(),
            })
        };
        if self.interval.is_some_and(|i| i < Duration::from_millis(10)) {
            return bad("checkpoint.interval", "must be at least 10 ms");
        }
        if self.timeout.is_zero() {
            return bad("checkpoint.timeout", "must be more than 0");
        }
        if self.max_concurrent == 0 {
            return bad("checkpoint.max_concurrent", "must be at least 1");
        }
        if self.retained == 0 {
            return bad("checkpoint.retained", "must keep at least 1 checkpoint");
        }
        if self.directory.as_os_str().is_empty() {
            return bad("checkpoint.directory", "must be set");
        }
        let dirs = [
            ("checkpoint.directory", Some(&self.directory)),
            ("checkpoint.restore_from", self.restore_from.as_ref()),
            (
                "checkpoint.restore_latest",
                self.restore_latest.as_ref().map(|r| match r {
                    RestoreLatest::Required(d) | RestoreLatest::IfAny(d) => d,
                }),
            ),
        ];
        for (key, dir) in dirs {
            if let Some(Err(message)) = dir
                .filter(|d| remote::is_url(d))
                .map(|d| remote::check_url(d))
            {
                return bad(key, &message);
            }
        }
        if self.local_directory.as_os_str().is_empty() || remote::is_url(&self.local_directory) {
            return bad("checkpoint.local_directory", "must be a local path");
        }
        if self.restore_from.is_some() && self.restore_latest.is_some() {
            return bad(
                "checkpoint.restore_latest",
                "cannot be used together with restore_from: choose one place to start from",
            );
        }
        if self
            .restore_latest
            .as_ref()
            .is_some_and(|r| r.directory().as_os_str().is_empty())
        {
            return bad("checkpoint.restore_latest", "its directory must be set");
        }
        Ok(())
    }
}
