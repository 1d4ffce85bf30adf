//! Loading checkpoints for a restore: the states of a savepoint or checkpoint directory matched
//! to the job's operators ([`load_dir`], [`load`]), and the scan of a job's earlier runs for
//! the newest usable checkpoint ([`find_latest`]). Not the format of the files read (the
//! parent module), nor dealing the states to a new parallelism (`rescale`).

use std::path::{Path, PathBuf};

use super::{
    checkpoint_dir, completed, io, local, read_envelope_at, read_metadata, read_metadata_at,
    Chained, CheckpointError, Fetch,
};

/// The states of the savepoint (or checkpoint directory) `dir`, matched to the job's
/// operators by uid. State of an operator the job does not have is an error unless
/// `allow_non_restored` (then it is logged and dropped). A parallelism other than the job's
/// is dealt to the new subtasks when the job is deployed (`rescale`).
pub(crate) fn load_dir(
    dir: &Path,
    uids: &[String],
    allow_non_restored: bool,
) -> Result<Loaded, CheckpointError> {
    load_dir_of(dir, None, uids, allow_non_restored, &local)
}

/// [`load_dir`], and with `expected`, the metadata must be that checkpoint's (checked before
/// any state file is read: a misplaced `_metadata` is named as such).
fn load_dir_of(
    dir: &Path,
    expected: Option<u64>,
    uids: &[String],
    allow_non_restored: bool,
    fetch: Fetch<'_>,
) -> Result<Loaded, CheckpointError> {
    let meta = read_metadata_at(dir)?;
    if let Some(id) = expected.filter(|id| *id != meta.checkpoint_id) {
        return Err(CheckpointError::Invalid {
            path: dir.join("_metadata"),
            message: format!("holds checkpoint {}, expected {id}", meta.checkpoint_id),
        });
    }
    let invalid = |message: String| CheckpointError::Incompatible {
        path: dir.to_owned(),
        message,
    };
    let mut loaded = Loaded::new(meta.checkpoint_id);
    for (uid, files) in &meta.states {
        let owner = uid.split_once("#in").map_or(uid.as_str(), |(o, _)| o);
        if !uids.iter().any(|u| u == owner) {
            if allow_non_restored {
                tracing::warn!(uid, "savepoint state of an operator the job does not have: dropped (allow_non_restored_state)");
                continue;
            }
            return Err(invalid(format!(
                "it holds state of operator `{uid}`, which the job does not have (set allow_non_restored_state to drop it)"
            )));
        }
        for (subtask, file) in files {
            loaded.read(dir, file, uid, *subtask, fetch)?;
        }
    }
    Ok(loaded)
}

/// The newest usable checkpoint of a job's earlier runs: see [`find_latest`].
#[derive(Debug)]
pub(crate) struct Latest {
    /// The checkpoint's directory (`<job dir>/<run>/chk-<id>`).
    pub(crate) dir: PathBuf,
    pub(crate) loaded: Loaded,
}

/// What [`find_latest`] found: the newest usable checkpoint (if any), the checkpoints it
/// skipped as unreadable (newest first, with why), and every run directory it scanned.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) latest: Option<Latest>,
    pub(crate) skipped: Vec<(PathBuf, CheckpointError)>,
    pub(crate) runs: Vec<PathBuf>,
}

/// The start time (ms) and sequence number in a run directory's name
/// (`run-<ms>-<pid>-<seq>`); `None` for anything else.
fn run_order(name: &str) -> Option<(u64, u64)> {
    let mut parts = name.strip_prefix("run-")?.split('-');
    let ms = parts.next()?.parse().ok()?;
    let _pid: u64 = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((ms, seq))
}

/// Scans the run directories of `job_dir` (`<checkpoint directory>/<job>`) for the newest
/// complete checkpoint — newest run first, then highest id — whose files all read back and
/// whose state fits the job (as [`load_dir`] checks). An unreadable checkpoint (I/O error,
/// corrupted or partial file) is skipped for the one before it; one that does not fit the job
/// is an error ([`CheckpointError::Incompatible`]). A missing `job_dir` is an empty scan.
///
/// `fetch` makes each file present before it is read (a restore from an object store fetches
/// the files of the checkpoints it tries, not every file of the job's runs).
pub(crate) fn find_latest(
    job_dir: &Path,
    uids: &[String],
    allow_non_restored: bool,
    fetch: Fetch<'_>,
) -> Result<Scan, CheckpointError> {
    let mut scan = Scan::default();
    let entries = match std::fs::read_dir(job_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(scan),
        Err(e) => return Err(io(job_dir)(e)),
    };
    let mut runs: Vec<((u64, u64), PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(job_dir))?;
        let order = entry.file_name().to_str().and_then(run_order);
        if let Some(order) = order.filter(|_| entry.path().is_dir()) {
            runs.push((order, entry.path()));
        }
    }
    runs.sort_unstable_by(|a, b| b.cmp(a));
    scan.runs = runs.iter().map(|(_, p)| p.clone()).collect();
    for (_, run) in &runs {
        for id in completed(run) {
            let dir = checkpoint_dir(run, id);
            match load_dir_of(&dir, Some(id), uids, allow_non_restored, fetch) {
                Ok(loaded) => {
                    scan.latest = Some(Latest { dir, loaded });
                    return Ok(scan);
                }
                // A store that fails to answer fails the restore: an older checkpoint is for
                // files that are damaged or gone, not for a store that is down.
                Err(e @ CheckpointError::Store { .. }) => return Err(e),
                Err(e) if e.is_unreadable() => {
                    tracing::warn!(checkpoint = %dir.display(), error = %e, "checkpoint unreadable; trying an older one");
                    scan.skipped.push((dir, e));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(scan)
}

/// Whether `uid` is one of the job's operators, or the channel state of one
/// (`<uid>#in<input>`).
fn known(uids: &[String], uid: &str) -> bool {
    let owner = uid.split_once("#in").map_or(uid, |(o, _)| o);
    uids.iter().any(|u| u == owner)
}

/// Every state of a checkpoint: (uid, subtask) -> payload.
pub(crate) type States = std::collections::HashMap<(String, usize), Vec<u8>>;

/// The states of incremental checkpoints not yet read: (uid, subtask) -> chain.
pub(crate) type Chains = std::collections::HashMap<(String, usize), Chained>;

/// What a restore loaded of a checkpoint: its states, those of incremental checkpoints left
/// as their chains (read when the job is deployed, each new subtask's key groups only where
/// the parallelism changed).
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) checkpoint: u64,
    pub(crate) states: States,
    pub(crate) chains: Chains,
}

impl Loaded {
    fn new(checkpoint: u64) -> Self {
        Loaded {
            checkpoint,
            ..Default::default()
        }
    }

    /// Reads the state file `file` (of `uid`'s `subtask`) of the checkpoint in `dir`.
    fn read(
        &mut self,
        dir: &Path,
        file: &str,
        uid: &str,
        subtask: usize,
        fetch: Fetch<'_>,
    ) -> Result<(), CheckpointError> {
        let (env, chain) = read_envelope_at(dir, self.checkpoint, file, uid, subtask, fetch)?;
        let key = (uid.to_owned(), subtask);
        match chain {
            Some(chain) => self.chains.insert(key, chain).map(drop),
            None => self.states.insert(key, env.payload).map(drop),
        };
        Ok(())
    }
}

/// The newest complete checkpoint under `root` whose files all read back, with its states
/// for the operators in `uids` (others are logged and ignored). An unreadable checkpoint
/// (corrupted or partial file) is skipped with a warning, falling back to an older one.
pub(crate) fn load_latest(root: &Path, uids: &[String]) -> Option<Loaded> {
    load_latest_below(root, uids, u64::MAX)
}

/// [`load_latest`] among the checkpoints older than `below` (the newest could not be read
/// when the job was deployed).
pub(crate) fn load_latest_below(root: &Path, uids: &[String], below: u64) -> Option<Loaded> {
    for id in completed(root).into_iter().filter(|id| *id < below) {
        match load(root, id, uids) {
            Ok(loaded) => {
                tracing::info!(checkpoint = id, "restoring checkpoint");
                return Some(loaded);
            }
            Err(e) => {
                tracing::warn!(checkpoint = id, error = %e, "checkpoint unreadable; falling back to an older one")
            }
        }
    }
    None
}

/// The states of checkpoint `id` for the operators in `uids`.
pub(crate) fn load(root: &Path, id: u64, uids: &[String]) -> Result<Loaded, CheckpointError> {
    let meta = read_metadata(root, id)?;
    let mut loaded = Loaded::new(id);
    for (uid, files) in &meta.states {
        if !known(uids, uid) {
            tracing::warn!(
                checkpoint = id,
                uid,
                "state of an operator the job does not have; ignored"
            );
            continue;
        }
        let dir = checkpoint_dir(root, id);
        for (subtask, file) in files {
            loaded.read(&dir, file, uid, *subtask, &local)?;
        }
    }
    Ok(loaded)
}
