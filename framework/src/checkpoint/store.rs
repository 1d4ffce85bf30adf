//! Checkpoint files.
//!
//! Layout under the checkpoint directory: `chk-<id>/<uid>-<subtask>.state` per operator
//! subtask with state, and `chk-<id>/_metadata` written last by the coordinator. Every file is
//! written to a temporary name, fsynced, then renamed, so a reader sees a whole file or none; a
//! checkpoint directory without `_metadata` is incomplete and never restored. Each state file is
//! a CBOR [`SnapshotEnvelope`] carrying its format version, operator uid, subtask, checkpoint id
//! and key-group range, so a misplaced or corrupted file is detected, not misread.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the envelope format.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// One operator subtask's state in one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEnvelope {
    /// Envelope format version.
    pub format_version: u32,
    /// Operator uid.
    pub uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Key groups covered (keyed operators).
    pub key_groups: Option<(usize, usize)>,
    /// The operator's own encoding of its state.
    pub payload: Vec<u8>,
}

/// What `_metadata` records: which file holds which operator subtask's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointMetadata {
    pub(crate) format_version: u32,
    pub(crate) checkpoint_id: u64,
    pub(crate) job: String,
    /// uid -> subtask -> file name (relative to the checkpoint directory).
    pub(crate) states: BTreeMap<String, BTreeMap<usize, String>>,
    /// uid -> parallelism when taken.
    pub(crate) parallelism: BTreeMap<String, usize>,
    /// Total bytes of the state files.
    pub(crate) size: u64,
}

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// File I/O failed.
    #[error("checkpoint I/O on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file is not what it should be (corrupted, partial, misplaced).
    #[error("checkpoint file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Checks that `dir` can be created and written: creates it (and its parents), writes a
/// probe file into it and removes it. The OS error says why not.
pub(crate) fn probe_writable(dir: &Path) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".weir-probe-{}-{seq}", std::process::id()));
    let written = File::create(&probe).and_then(|mut f| f.write_all(b"probe"));
    let removed = std::fs::remove_file(&probe);
    written.and(removed)
}

/// The directory of checkpoint `id`.
pub(crate) fn checkpoint_dir(root: &Path, id: u64) -> PathBuf {
    root.join(format!("chk-{id}"))
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes one state file; returns its name and size.
pub(crate) fn write_state(
    root: &Path,
    env: &SnapshotEnvelope,
) -> Result<(String, u64), CheckpointError> {
    let name = format!("{}-{}.state", env.uid, env.subtask);
    let path = checkpoint_dir(root, env.checkpoint_id).join(&name);
    let mut bytes = Vec::new();
    ciborium::into_writer(env, &mut bytes).map_err(|e| CheckpointError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })?;
    write_atomic(&path, &bytes)?;
    Ok((name, bytes.len() as u64))
}

/// Reads and checks one state file.
pub(crate) fn read_state(
    root: &Path,
    id: u64,
    name: &str,
    uid: &str,
    subtask: usize,
) -> Result<SnapshotEnvelope, CheckpointError> {
    read_state_at(&checkpoint_dir(root, id), id, name, uid, subtask)
}

/// Reads and checks one state file of the checkpoint (or savepoint) in `dir`.
pub(crate) fn read_state_at(
    dir: &Path,
    id: u64,
    name: &str,
    uid: &str,
    subtask: usize,
) -> Result<SnapshotEnvelope, CheckpointError> {
    let path = dir.join(name);
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let env: SnapshotEnvelope =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| CheckpointError::Invalid {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let invalid = |message: String| CheckpointError::Invalid {
        path: path.clone(),
        message,
    };
    if env.format_version != FORMAT_VERSION {
        return Err(invalid(format!(
            "format version {} (this build reads {FORMAT_VERSION})",
            env.format_version
        )));
    }
    if env.uid != uid || env.subtask != subtask || env.checkpoint_id != id {
        return Err(invalid(format!(
            "holds {}/{} of checkpoint {}, expected {uid}/{subtask} of {id}",
            env.uid, env.subtask, env.checkpoint_id
        )));
    }
    Ok(env)
}

/// Writes `_metadata`, which makes the checkpoint complete.
pub(crate) fn write_metadata(
    root: &Path,
    meta: &CheckpointMetadata,
) -> Result<(), CheckpointError> {
    let path = checkpoint_dir(root, meta.checkpoint_id).join("_metadata");
    let mut bytes = Vec::new();
    ciborium::into_writer(meta, &mut bytes).map_err(|e| CheckpointError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })?;
    write_atomic(&path, &bytes)
}

/// Reads `_metadata` of checkpoint `id`.
pub(crate) fn read_metadata(root: &Path, id: u64) -> Result<CheckpointMetadata, CheckpointError> {
    read_metadata_at(&checkpoint_dir(root, id))
}

/// Reads `_metadata` of the checkpoint (or savepoint) in `dir`.
pub(crate) fn read_metadata_at(dir: &Path) -> Result<CheckpointMetadata, CheckpointError> {
    let path = dir.join("_metadata");
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    ciborium::from_reader(bytes.as_slice()).map_err(|e| CheckpointError::Invalid {
        path,
        message: e.to_string(),
    })
}

/// Ids of the checkpoint directories under `root` that have `_metadata`, newest first.
pub(crate) fn completed(root: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_prefix("chk-")?.parse().ok()?;
            e.path().join("_metadata").is_file().then_some(id)
        })
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

/// Deletes completed checkpoints beyond the newest `keep`, and incomplete ones older than the
/// newest completed.
pub(crate) fn retain(root: &Path, keep: usize) {
    let done = completed(root);
    let Some(&newest) = done.first() else { return };
    let keep: std::collections::HashSet<u64> = done.iter().take(keep).copied().collect();
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("chk-"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if !keep.contains(&id) && id < newest {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "cannot delete an old checkpoint");
            }
        }
    }
}

/// Copies complete checkpoint `id` to `dest` (a savepoint: never deleted by retention).
pub(crate) fn copy_to(root: &Path, id: u64, dest: &Path) -> Result<(), CheckpointError> {
    if dest.join("_metadata").exists() {
        return Err(CheckpointError::Invalid {
            path: dest.to_owned(),
            message: "a savepoint is already there; choose another directory".into(),
        });
    }
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    let src = checkpoint_dir(root, id);
    let mut names: Vec<_> = std::fs::read_dir(&src)
        .map_err(io(&src))?
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "_metadata")
        .collect();
    // `_metadata` last, as for a checkpoint: only a whole savepoint is complete.
    names.push("_metadata".into());
    for name in names {
        let from = src.join(&name);
        let bytes = std::fs::read(&from).map_err(io(&from))?;
        write_atomic(&dest.join(&name), &bytes)?;
    }
    Ok(())
}

/// The states of the savepoint (or checkpoint directory) `dir`, matched to the job's
/// operators by uid. State of an operator the job does not have is an error unless
/// `allow_non_restored` (then it is logged and dropped); a parallelism other than the job's
/// is an error (state redistribution comes with rescaling).
pub(crate) fn load_dir(
    dir: &Path,
    uids: &[String],
    parallelism: &[usize],
    allow_non_restored: bool,
) -> Result<(u64, States), CheckpointError> {
    let meta = read_metadata_at(dir)?;
    let invalid = |message: String| CheckpointError::Invalid {
        path: dir.to_owned(),
        message,
    };
    let mut states = States::new();
    for (uid, files) in &meta.states {
        let owner = uid.split_once("#in").map_or(uid.as_str(), |(o, _)| o);
        let Some(pos) = uids.iter().position(|u| u == owner) else {
            if allow_non_restored {
                tracing::warn!(uid, "savepoint state of an operator the job does not have: dropped (allow_non_restored_state)");
                continue;
            }
            return Err(invalid(format!(
                "it holds state of operator `{uid}`, which the job does not have (set allow_non_restored_state to drop it)"
            )));
        };
        let had = meta.parallelism.get(uid).copied().unwrap_or(files.len());
        if had != parallelism[pos] {
            return Err(invalid(format!(
                "operator `{uid}` had parallelism {had} in the savepoint and has {} now; rescaling state is not supported yet",
                parallelism[pos]
            )));
        }
        for (subtask, file) in files {
            let env = read_state_at(dir, meta.checkpoint_id, file, uid, *subtask)?;
            states.insert((uid.clone(), *subtask), env.payload);
        }
    }
    Ok((meta.checkpoint_id, states))
}

/// Whether `uid` is one of the job's operators, or the channel state of one
/// (`<uid>#in<input>`).
fn known(uids: &[String], uid: &str) -> bool {
    let owner = uid.split_once("#in").map_or(uid, |(o, _)| o);
    uids.iter().any(|u| u == owner)
}

/// Every state of a checkpoint: (uid, subtask) -> payload.
pub(crate) type States = std::collections::HashMap<(String, usize), Vec<u8>>;

/// The newest complete checkpoint under `root` whose files all read back, with its states
/// for the operators in `uids` (others are logged and ignored). An unreadable checkpoint
/// (corrupted or partial file) is skipped with a warning, falling back to an older one.
pub(crate) fn load_latest(root: &Path, uids: &[String]) -> Option<(u64, States)> {
    for id in completed(root) {
        match load(root, id, uids) {
            Ok(states) => {
                tracing::info!(checkpoint = id, "restoring checkpoint");
                return Some((id, states));
            }
            Err(e) => {
                tracing::warn!(checkpoint = id, error = %e, "checkpoint unreadable; falling back to an older one")
            }
        }
    }
    tracing::warn!(root = %root.display(), "no readable complete checkpoint: starting from the beginning");
    None
}

/// The states of checkpoint `id` for the operators in `uids`.
pub(crate) fn load(root: &Path, id: u64, uids: &[String]) -> Result<States, CheckpointError> {
    let meta = read_metadata(root, id)?;
    let mut states = States::new();
    for (uid, files) in &meta.states {
        if !known(uids, uid) {
            tracing::warn!(
                checkpoint = id,
                uid,
                "state of an operator the job does not have; ignored"
            );
            continue;
        }
        for (subtask, file) in files {
            let env = read_state(root, id, file, uid, *subtask)?;
            states.insert((uid.clone(), *subtask), env.payload);
        }
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weir-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn state_files_round_trip_and_are_checked() {
        let root = tmp("roundtrip");
        let env = SnapshotEnvelope {
            format_version: FORMAT_VERSION,
            uid: "count".into(),
            subtask: 1,
            checkpoint_id: 7,
            key_groups: Some((64, 128)),
            payload: vec![1, 2, 3],
        };
        let (name, size) = write_state(&root, &env).unwrap();
        assert!(size > 3);
        assert_eq!(read_state(&root, 7, &name, "count", 1).unwrap(), env);
        let wrong = read_state(&root, 7, &name, "count", 0).unwrap_err();
        assert!(wrong.to_string().contains("expected count/0"), "{wrong}");
        std::fs::write(checkpoint_dir(&root, 7).join(&name), b"\xff\x00garbage").unwrap();
        assert!(matches!(
            read_state(&root, 7, &name, "count", 1),
            Err(CheckpointError::Invalid { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn checkpoint_with_state(root: &Path, id: u64, payload: &[u8]) {
        let env = SnapshotEnvelope {
            format_version: FORMAT_VERSION,
            uid: "count".into(),
            subtask: 0,
            checkpoint_id: id,
            key_groups: None,
            payload: payload.to_vec(),
        };
        let (name, size) = write_state(root, &env).unwrap();
        let mut states = BTreeMap::new();
        states.insert("count".to_string(), BTreeMap::from([(0usize, name)]));
        write_metadata(
            root,
            &CheckpointMetadata {
                format_version: FORMAT_VERSION,
                checkpoint_id: id,
                job: "j".into(),
                states,
                parallelism: BTreeMap::new(),
                size,
            },
        )
        .unwrap();
    }

    #[test]
    fn a_corrupted_or_partial_checkpoint_falls_back_to_the_previous_one() {
        let root = tmp("fallback");
        let uids = vec!["count".to_string()];
        checkpoint_with_state(&root, 1, b"one");
        checkpoint_with_state(&root, 2, b"two");
        assert_eq!(load_latest(&root, &uids).unwrap().0, 2);
        // Corrupt checkpoint 2's state file: it is skipped, 1 is restored.
        let file = checkpoint_dir(&root, 2).join("count-0.state");
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
        let (id, states) = load_latest(&root, &uids).unwrap();
        assert_eq!(id, 1);
        assert_eq!(states[&("count".to_string(), 0)], b"one".to_vec());
        // A partial _metadata is not complete either.
        let meta = checkpoint_dir(&root, 1).join("_metadata");
        std::fs::write(&meta, b"\xa1").unwrap();
        assert!(load_latest(&root, &uids).is_none());
        // State of an operator the job no longer has is ignored, not an error.
        checkpoint_with_state(&root, 3, b"three");
        let (id, states) = load_latest(&root, &["other".to_string()]).unwrap();
        assert_eq!((id, states.len()), (3, 0));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn only_checkpoints_with_metadata_are_complete_and_retention_keeps_the_newest() {
        let root = tmp("retain");
        for id in 1..=4 {
            let meta = CheckpointMetadata {
                format_version: FORMAT_VERSION,
                checkpoint_id: id,
                job: "j".into(),
                states: BTreeMap::new(),
                parallelism: BTreeMap::new(),
                size: 0,
            };
            if id != 3 {
                write_metadata(&root, &meta).unwrap();
            } else {
                std::fs::create_dir_all(checkpoint_dir(&root, id)).unwrap();
            }
        }
        assert_eq!(completed(&root), vec![4, 2, 1]);
        retain(&root, 2);
        assert_eq!(completed(&root), vec![4, 2]);
        assert!(
            !checkpoint_dir(&root, 3).exists(),
            "incomplete and older: deleted"
        );
        assert_eq!(read_metadata(&root, 4).unwrap().checkpoint_id, 4);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
