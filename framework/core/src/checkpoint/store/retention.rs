//! The checkpoints of a run directory as a whole: which are complete, deleting those beyond
//! the retained ones (and the incremental runs no complete checkpoint references), and copying
//! one out as a savepoint. Not the writing or reading of one checkpoint's files (the parent
//! module), nor restoring from them (`load`).

use std::path::{Path, PathBuf};

use super::{
    checkpoint_dir, create_dir_durable, io, read_metadata, read_metadata_at, read_state_at,
    write_atomic, CheckpointError,
};

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
/// newest completed; returns what it deleted (checkpoint directories, run files), for the
/// object store's copy to follow.
pub(crate) fn retain(root: &Path, keep: usize) -> Vec<PathBuf> {
    let mut deleted = Vec::new();
    let done = completed(root);
    let Some(&newest) = done.first() else {
        return deleted;
    };
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
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => deleted.push(entry.path()),
                Err(e) => {
                    tracing::warn!(path = %entry.path().display(), error = %e, "cannot delete an old checkpoint")
                }
            }
        }
    }
    collect_runs(root, newest, &mut deleted);
    deleted
}

/// Deletes the runs of incremental checkpoints (`shared/<uid>-<subtask>/<id>-..`) that no
/// complete checkpoint left under `root` references, of checkpoints up to `newest` (the newest
/// complete one): a run of a checkpoint in progress is kept, and a crash in the middle leaves
/// only unreferenced runs for the next collection.
fn collect_runs(root: &Path, newest: u64, deleted: &mut Vec<PathBuf>) {
    let shared = root.join("shared");
    let Ok(dirs) = std::fs::read_dir(&shared) else {
        return;
    };
    let mut referenced = std::collections::HashSet::new();
    for id in completed(root) {
        match read_metadata(root, id) {
            Ok(meta) => referenced.extend(meta.runs),
            // What an unreadable checkpoint references is not known: keep everything.
            Err(_) => return,
        }
    }
    for dir in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.flatten() {
            let name = file.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(run_id) = name.split('-').next().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            let rel = format!("shared/{}/{name}", dir.file_name().to_string_lossy());
            if run_id <= newest && !referenced.contains(&rel) {
                match std::fs::remove_file(file.path()) {
                    Ok(()) => deleted.push(file.path()),
                    Err(e) => {
                        tracing::warn!(path = %file.path().display(), error = %e, "cannot delete an unreferenced state run")
                    }
                }
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
    create_dir_durable(dest).map_err(io(dest))?;
    let src = checkpoint_dir(root, id);
    let mut names: Vec<_> = std::fs::read_dir(&src)
        .map_err(io(&src))?
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "_metadata")
        .collect();
    // `_metadata` last, as for a checkpoint: only a whole savepoint is complete.
    names.push("_metadata".into());
    // A savepoint is self-contained: an incremental state is written whole.
    let meta = read_metadata_at(&src)?;
    let mut states = std::collections::HashMap::new();
    for (uid, files) in &meta.states {
        for (subtask, file) in files {
            states.insert(std::ffi::OsString::from(file), (uid, *subtask));
        }
    }
    for name in names {
        let from = src.join(&name);
        let encode_err = |e: String| CheckpointError::Invalid {
            path: from.clone(),
            message: e,
        };
        let bytes = match states.get(&name) {
            Some((uid, subtask)) if !meta.runs.is_empty() => {
                let env = read_state_at(&src, id, &name.to_string_lossy(), uid, *subtask)?;
                crate::checkpoint::encode(&env).map_err(encode_err)?
            }
            _ if name == "_metadata" && !meta.runs.is_empty() => {
                let mut own = meta.clone();
                own.runs.clear();
                own.crc32 = Some(crc32fast::hash(&own.unsummed_bytes().map_err(encode_err)?));
                crate::checkpoint::encode(&own).map_err(encode_err)?
            }
            _ => std::fs::read(&from).map_err(io(&from))?,
        };
        write_atomic(&dest.join(&name), &bytes)?;
    }
    Ok(())
}
