//! Checkpoint directories on object stores (`s3://`, `gs://`, `az://`, `file://` URLs).
//!
//! Owns the mirror of a local checkpoint directory on an object store: which local path is
//! which object, uploading a file, fetching a tree of objects into the local directory,
//! deleting what retention deleted locally. It does not own the checkpoint format, retention
//! or what a checkpoint references ([`store`](super::store) decides those, over the local
//! copy).
//!
//! # How a remote checkpoint directory works
//!
//! Checkpoints are written as they always are, to a local directory (the checkpoint config's
//! `local_directory`, under `<scheme>/<bucket>/<path>` of the URL), and every file is also put
//! on the object store under the same relative name:
//!
//! - each subtask puts its state file and the runs of incremental state it wrote (each run
//!   once) before it acknowledges the checkpoint, off the data path;
//! - the controller puts `_metadata` last: a checkpoint is complete only once every file it
//!   references is on the store. A `_metadata` that cannot be put is removed locally too and
//!   the checkpoint fails (counted, tolerated as configured);
//! - what retention deletes locally (old checkpoints, runs no checkpoint references) is then
//!   deleted on the store, a checkpoint's `_metadata` before its state files: a crash in the
//!   middle leaves unreferenced objects, never a complete checkpoint missing a file.
//!
//! A job restoring from a remote directory (another process, another machine, its local disk
//! gone) first fetches the job's objects into its local directory (files already there with
//! the same size are kept: fast local recovery), then restores from the local copy as usual.
//!
//! Credentials and endpoints come from the usual environment variables of each store
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP`; `GOOGLE_SERVICE_ACCOUNT`; `AZURE_STORAGE_ACCOUNT_NAME`,
//! `AZURE_STORAGE_ACCOUNT_KEY`, ...), as object_store's builders read them.
//!
//! The object-store client is async; its calls run on a small runtime of their own
//! ("weir-storage" threads) and the callers (state writers, the controller) wait for them.

use std::path::{Path, PathBuf};

use super::store::CheckpointError;

/// URL schemes a checkpoint directory may have.
pub(crate) const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "file"];

/// Whether `dir` is a URL (`<scheme>://...`), not a local path.
pub(crate) fn is_url(dir: &Path) -> bool {
    let Some(s) = dir.to_str() else { return false };
    s.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// Checks a directory setting that is a URL: a scheme Weir reads, and a build that has the
/// `object-store` feature. `Err` names what is wrong.
pub(crate) fn check_url(dir: &Path) -> Result<(), String> {
    let s = dir.to_string_lossy();
    let scheme = s.split_once("://").map_or("", |(s, _)| s);
    if !SCHEMES.contains(&scheme) {
        return Err(format!(
            "`{s}`: the scheme `{scheme}` is not one of {} (or give a local path)",
            SCHEMES.join(", ")
        ));
    }
    if cfg!(not(feature = "object-store")) {
        return Err(format!(
            "`{s}` is on an object store: this build of weir lacks its `object-store` feature"
        ));
    }
    Ok(())
}

/// Where a URL's local copy lives under `local_directory`: `<scheme>/<host>/<path>`.
#[cfg_attr(not(feature = "object-store"), allow(dead_code))]
pub(crate) fn local_copy_of(url: &Path, local_directory: &Path) -> PathBuf {
    let s = url.to_string_lossy();
    let (scheme, rest) = s.split_once("://").unwrap_or(("local", &s));
    let mut out = local_directory.join(scheme);
    for part in rest
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
    {
        out.push(part);
    }
    out
}

/// The local directory to read a savepoint or checkpoint directory `dir` from: `dir` itself
/// when it is a path; when it is a URL, its local copy under the config's `local_directory`,
/// made afresh from the store (a savepoint's name may have been used before). A checkpoint
/// directory of incremental checkpoints (`.../chk-<id>`) also gets the runs it references,
/// from `shared/` beside it.
pub(crate) fn fetched(
    dir: &Path,
    cfg: &super::CheckpointConfig,
) -> Result<PathBuf, CheckpointError> {
    if !is_url(dir) {
        return Ok(dir.to_owned());
    }
    let remote = Remote::open(dir, &cfg.local_directory, &cfg.storage_options)?;
    let local = remote.local().to_owned();
    match std::fs::remove_dir_all(&local) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(CheckpointError::Io {
                path: local,
                source,
            })
        }
    }
    let n = remote.fetch_tree(&local)?;
    let runs = super::store::read_metadata_at(&local)
        .map(|m| m.runs)
        .unwrap_or_default();
    if !runs.is_empty() {
        // The runs are named relative to the job run's directory: the URL's parent.
        let s = dir.to_string_lossy();
        let parent = s
            .trim_end_matches('/')
            .rsplit_once('/')
            .map_or(&*s, |(p, _)| p);
        let up = Remote::open(
            Path::new(parent),
            &cfg.local_directory,
            &cfg.storage_options,
        )?;
        for run in &runs {
            let path = up.local().join(run);
            if !path.is_file() && !up.fetch_file(&path)? {
                return Err(CheckpointError::Invalid {
                    path: dir.to_owned(),
                    message: format!("the run {run} it references is not on the store"),
                });
            }
        }
    }
    tracing::info!(url = %remote.url(), local = %local.display(), fetched = n, runs = runs.len(), "fetched from the object store");
    Ok(local)
}

/// Checks that a savepoint can go to `dir` (a path, or a URL: it is probed with a small
/// object put and deleted).
pub(crate) fn probe_savepoint_dir(dir: &Path, cfg: &super::CheckpointConfig) -> Result<(), String> {
    if !is_url(dir) {
        return super::store::probe_writable(dir).map_err(|e| e.to_string());
    }
    let remote =
        Remote::open(dir, &cfg.local_directory, &cfg.storage_options).map_err(|e| e.to_string())?;
    remote.probe(remote.local()).map_err(|e| e.to_string())
}

/// Copies complete checkpoint `id` under `root` to the savepoint directory `dest`: a path,
/// or a URL (copied to a staging directory of its own under `local_directory`, then put on
/// the store file by file, `_metadata` last, so that only a whole savepoint is one).
pub(crate) fn save_to(
    root: &Path,
    id: u64,
    dest: &Path,
    cfg: &super::CheckpointConfig,
) -> Result<(), CheckpointError> {
    if !is_url(dest) {
        return super::store::copy_to(root, id, dest);
    }
    let remote = Remote::open(dest, &cfg.local_directory, &cfg.storage_options)?;
    if remote.exists(&remote.local().join("_metadata"))? {
        return Err(CheckpointError::Invalid {
            path: dest.to_owned(),
            message: "a savepoint is already there; choose another directory".into(),
        });
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let staging = cfg.local_directory.join(".staging").join(format!(
        "{}-{}-{id}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        super::store::copy_to(root, id, &staging)?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(&staging)
            .map_err(|source| CheckpointError::Io {
                path: staging.clone(),
                source,
            })?
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort_by_key(|p| p.file_name().is_some_and(|n| n == "_metadata"));
        for file in files {
            let Some(name) = file.file_name() else {
                continue;
            };
            remote.upload_as(&file, &remote.local().join(name))?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

#[cfg(feature = "object-store")]
pub(crate) use client::{Listing, Remote};

#[cfg(not(feature = "object-store"))]
pub(crate) use stub::{Listing, Remote};

#[cfg(feature = "object-store")]
mod client;

#[cfg(not(feature = "object-store"))]
mod stub;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url(Path::new("s3://bucket/checkpoints")));
        assert!(is_url(Path::new("file:///tmp/x")));
        assert!(!is_url(Path::new("/tmp/s3:/x")));
        assert!(!is_url(Path::new("relative/dir")));
        assert!(check_url(Path::new("ftp://host/x"))
            .unwrap_err()
            .contains("`ftp` is not one of"));
        assert_eq!(
            local_copy_of(Path::new("s3://bucket/a/../b"), Path::new("/l")),
            Path::new("/l/s3/bucket/a/b")
        );
    }
}
