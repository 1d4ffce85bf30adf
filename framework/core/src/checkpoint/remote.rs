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
/// when it is a path; when it is a URL, its local copy under `local_directory`, with every
/// object fetched that the copy lacks.
pub(crate) fn fetched(
    dir: &Path,
    cfg: &super::CheckpointConfig,
) -> Result<PathBuf, CheckpointError> {
    if !is_url(dir) {
        return Ok(dir.to_owned());
    }
    let remote = Remote::open(dir, &cfg.local_directory, &cfg.storage_options)?;
    let n = remote.fetch_tree(remote.local())?;
    tracing::info!(url = %remote.url(), local = %remote.local().display(), fetched = n, "fetched from the object store");
    Ok(remote.local().to_owned())
}

/// Checks that a savepoint can go to `dir` (a path, or a URL: it is probed with a small
/// object put and deleted).
pub(crate) fn probe_savepoint_dir(dir: &Path, cfg: &super::CheckpointConfig) -> Result<(), String> {
    if !is_url(dir) {
        return super::store::probe_writable(dir).map_err(|e| e.to_string());
    }
    let remote =
        Remote::open(dir, &cfg.local_directory, &cfg.storage_options).map_err(|e| e.to_string())?;
    super::store::probe_writable(remote.local()).map_err(|e| e.to_string())?;
    remote.probe(remote.local()).map_err(|e| e.to_string())
}

/// Copies complete checkpoint `id` under `root` to the savepoint directory `dest`: a path,
/// or a URL (copied to its local copy, then put on the store file by file, `_metadata`
/// last, so that only a whole savepoint is one).
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
    let local = remote.local().to_owned();
    if remote.exists(&local.join("_metadata"))? {
        return Err(CheckpointError::Invalid {
            path: dest.to_owned(),
            message: "a savepoint is already there; choose another directory".into(),
        });
    }
    // The local copy is only a cache: a stale one (an earlier savepoint there, deleted on
    // the store) goes.
    match std::fs::remove_dir_all(&local) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(CheckpointError::Invalid {
                path: local,
                message: format!("cannot clear the savepoint's local copy: {e}"),
            })
        }
    }
    super::store::copy_to(root, id, &local)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&local)
        .map_err(|e| CheckpointError::Invalid {
            path: local.clone(),
            message: format!("cannot read the savepoint's local copy: {e}"),
        })?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort_by_key(|p| p.file_name().is_some_and(|n| n == "_metadata"));
    for file in files {
        remote.upload(&file)?;
    }
    Ok(())
}

#[cfg(feature = "object-store")]
pub(crate) use imp::Remote;

#[cfg(not(feature = "object-store"))]
pub(crate) use stub::Remote;

#[cfg(feature = "object-store")]
mod imp {
    use std::collections::HashSet;
    use std::future::Future;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Duration;

    use futures::TryStreamExt;
    use object_store::path::Path as Key;
    use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, RetryConfig};

    use super::super::store;
    use super::CheckpointError;

    /// The runtime object-store calls run on.
    fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
        static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
        RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("weir-storage")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the object-store runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    /// Runs `fut` on the storage runtime and waits for it (from any thread, async or not).
    fn wait<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
        let rt = runtime()?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| "the object-store runtime dropped a call".to_owned())
    }

    /// A checkpoint directory on an object store, mirrored by a local directory.
    pub(crate) struct Remote {
        url: String,
        store: Arc<dyn ObjectStore>,
        /// The URL's path: every key starts with it.
        prefix: Key,
        /// The local copy: a file `local/a/b` is the object `prefix/a/b`.
        local: PathBuf,
        /// Local paths already put (runs are put once; a state file or `_metadata` once).
        uploaded: Mutex<HashSet<PathBuf>>,
    }

    impl std::fmt::Debug for Remote {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Remote")
                .field("url", &self.url)
                .field("local", &self.local)
                .finish()
        }
    }

    fn remote_err(path: &Path, what: &str, e: impl std::fmt::Display) -> CheckpointError {
        CheckpointError::Invalid {
            path: path.to_owned(),
            message: format!("{what}: {e}"),
        }
    }

    impl Remote {
        /// The object store of `url`, mirrored under `local_directory` (see
        /// [`super::local_copy_of`]). Credentials come from the environment.
        pub(crate) fn open(
            url: &Path,
            local_directory: &Path,
            options: &[(String, String)],
        ) -> Result<Arc<Remote>, CheckpointError> {
            super::check_url(url).map_err(|m| remote_err(url, "bad checkpoint URL", m))?;
            let s = url.to_string_lossy().into_owned();
            let parsed: url::Url = s.parse().map_err(|e| remote_err(url, "not a URL", e))?;
            let (scheme, prefix) = ObjectStoreScheme::parse(&parsed)
                .map_err(|e| remote_err(url, "not a store URL", e))?;
            // Bounded retries: a store that keeps failing fails the checkpoint (counted and
            // tolerated as configured) instead of holding it for minutes.
            let retry = RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(30),
                ..RetryConfig::default()
            };
            // An option the store does not know is an error naming it, not ignored.
            fn keys<K: std::str::FromStr>(
                url: &Path,
                options: &[(String, String)],
            ) -> Result<Vec<(K, String)>, CheckpointError>
            where
                K::Err: std::fmt::Display,
            {
                options
                    .iter()
                    .map(|(k, v)| {
                        k.to_ascii_lowercase()
                            .parse::<K>()
                            .map(|k| (k, v.clone()))
                            .map_err(|e| {
                                remote_err(url, &format!("checkpoint.storage_options `{k}`"), e)
                            })
                    })
                    .collect()
            }
            let store: Arc<dyn ObjectStore> = match scheme {
                ObjectStoreScheme::AmazonS3 => {
                    let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(&s);
                    for (k, v) in keys(url, options)? {
                        b = b.with_config(k, v);
                    }
                    let b = b.with_retry(retry).build();
                    Arc::new(b.map_err(|e| remote_err(url, "cannot set up S3", e))?)
                }
                ObjectStoreScheme::GoogleCloudStorage => {
                    let mut b =
                        object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(&s);
                    for (k, v) in keys(url, options)? {
                        b = b.with_config(k, v);
                    }
                    let b = b.with_retry(retry).build();
                    Arc::new(b.map_err(|e| remote_err(url, "cannot set up GCS", e))?)
                }
                ObjectStoreScheme::MicrosoftAzure => {
                    let mut b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(&s);
                    for (k, v) in keys(url, options)? {
                        b = b.with_config(k, v);
                    }
                    let b = b.with_retry(retry).build();
                    Arc::new(b.map_err(|e| remote_err(url, "cannot set up Azure storage", e))?)
                }
                ObjectStoreScheme::Local => Arc::new(object_store::local::LocalFileSystem::new()),
                other => {
                    return Err(remote_err(
                        url,
                        "bad checkpoint URL",
                        format!("{other:?} is not a store checkpoints can go to"),
                    ))
                }
            };
            Ok(Arc::new(Remote {
                local: super::local_copy_of(url, local_directory),
                url: s,
                store,
                prefix,
                uploaded: Mutex::new(HashSet::new()),
            }))
        }

        /// The local directory that mirrors the URL.
        pub(crate) fn local(&self) -> &Path {
            &self.local
        }

        /// The URL, for messages.
        pub(crate) fn url(&self) -> &str {
            &self.url
        }

        /// The object of local path `local` (under [`Self::local`]).
        fn key(&self, local: &Path) -> Result<Key, CheckpointError> {
            let rel = local
                .strip_prefix(&self.local)
                .map_err(|_| remote_err(local, "not under the local copy", self.local.display()))?;
            let mut key = self.prefix.clone();
            for part in rel.components() {
                key = key.join(part.as_os_str().to_string_lossy().as_ref());
            }
            Ok(key)
        }

        /// The local path of object `key`.
        fn local_of(&self, key: &Key) -> Option<PathBuf> {
            let mut out = self.local.clone();
            for part in key.prefix_match(&self.prefix)? {
                let part = part.as_ref();
                if part == "." || part == ".." {
                    return None;
                }
                out.push(part);
            }
            Some(out)
        }

        /// Puts the local file `local` (whole) on the store.
        pub(crate) fn upload(&self, local: &Path) -> Result<(), CheckpointError> {
            let key = self.key(local)?;
            let bytes = std::fs::read(local).map_err(|e| remote_err(local, "cannot read", e))?;
            let store = self.store.clone();
            wait(async move { store.put(&key, bytes.into()).await })
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map_err(|e| remote_err(local, &format!("cannot put it on {}", self.url), e))?;
            crate::sync::lock(&self.uploaded).insert(local.to_owned());
            Ok(())
        }

        /// [`Self::upload`], unless this process already put `local`.
        pub(crate) fn upload_once(&self, local: &Path) -> Result<(), CheckpointError> {
            if crate::sync::lock(&self.uploaded).contains(local) {
                return Ok(());
            }
            self.upload(local)
        }

        /// Whether the object of local path `local` exists on the store.
        pub(crate) fn exists(&self, local: &Path) -> Result<bool, CheckpointError> {
            let key = self.key(local)?;
            let store = self.store.clone();
            match wait(async move { store.head(&key).await }) {
                Ok(Ok(_)) => Ok(true),
                Ok(Err(object_store::Error::NotFound { .. })) => Ok(false),
                Ok(Err(e)) => Err(remote_err(
                    local,
                    &format!("cannot look on {}", self.url),
                    e,
                )),
                Err(e) => Err(remote_err(
                    local,
                    &format!("cannot look on {}", self.url),
                    e,
                )),
            }
        }

        /// Puts a small probe object under `local` and deletes it: a bad bucket, endpoint or
        /// credentials fail the job's start, naming the store's answer.
        pub(crate) fn probe(&self, local: &Path) -> Result<(), CheckpointError> {
            let key = self.key(&local.join(".weir-probe"))?;
            let store = self.store.clone();
            wait(async move {
                store.put(&key, b"weir".to_vec().into()).await?;
                store.delete(&key).await
            })
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(|e| remote_err(local, &format!("cannot write to {}", self.url), e))
        }

        /// The objects under local directory `dir`, as local paths with their sizes.
        fn list(&self, dir: &Path) -> Result<Vec<(PathBuf, u64)>, CheckpointError> {
            let key = self.key(dir)?;
            let store = self.store.clone();
            let metas = wait(async move { store.list(Some(&key)).try_collect::<Vec<_>>().await })
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map_err(|e| remote_err(dir, &format!("cannot list {}", self.url), e))?;
            Ok(metas
                .into_iter()
                .filter_map(|m| Some((self.local_of(&m.location)?, m.size)))
                .collect())
        }

        /// Fetches every object under local directory `dir` that the local copy lacks (or
        /// holds with another size); returns how many were fetched. A fetched file is
        /// written whole or not at all.
        pub(crate) fn fetch_tree(&self, dir: &Path) -> Result<usize, CheckpointError> {
            let mut fetched = 0;
            let mut objects = self.list(dir)?;
            // `_metadata` last: a checkpoint whose files are not all here yet never looks
            // complete locally.
            objects.sort_by_key(|(p, _)| p.file_name().is_some_and(|n| n == "_metadata"));
            for (path, size) in objects {
                if std::fs::metadata(&path).is_ok_and(|m| m.len() == size) {
                    crate::sync::lock(&self.uploaded).insert(path);
                    continue;
                }
                let key = self.key(&path)?;
                let store = self.store.clone();
                let bytes = wait(async move { store.get(&key).await?.bytes().await })
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map_err(|e| {
                        remote_err(&path, &format!("cannot get it from {}", self.url), e)
                    })?;
                if let Some(parent) = path.parent() {
                    store::create_dir_durable(parent)
                        .map_err(|e| remote_err(parent, "cannot create", e))?;
                }
                store::write_atomic(&path, &bytes)?;
                crate::sync::lock(&self.uploaded).insert(path);
                fetched += 1;
            }
            Ok(fetched)
        }

        /// Deletes the objects of local paths `gone` (deleted locally): `_metadata` objects
        /// first, so that a crash in the middle never leaves a complete checkpoint missing a
        /// file. A directory deletes everything under it. Failures are logged: what is left
        /// is unreferenced, and goes with its run.
        pub(crate) fn delete(&self, gone: &[PathBuf]) {
            let mut keys = Vec::new();
            for path in gone {
                let listed = self.list(path).unwrap_or_default();
                if listed.is_empty() {
                    keys.push(path.clone());
                }
                keys.extend(listed.into_iter().map(|(p, _)| p));
            }
            keys.sort_by_key(|p| p.file_name().is_none_or(|n| n != "_metadata"));
            for path in keys {
                let Ok(key) = self.key(&path) else { continue };
                let store = self.store.clone();
                let res = wait(async move { store.delete(&key).await }).and_then(|r| match r {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e.to_string()),
                });
                match res {
                    Ok(()) => {
                        crate::sync::lock(&self.uploaded).remove(&path);
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), url = %self.url, error = %e, "cannot delete a checkpoint object")
                    }
                }
            }
        }
    }
}

#[cfg(not(feature = "object-store"))]
mod stub {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::CheckpointError;

    /// Without the `object-store` feature no remote can exist ([`Remote::open`] fails).
    #[derive(Debug)]
    pub(crate) struct Remote {
        never: std::convert::Infallible,
    }

    impl Remote {
        pub(crate) fn open(
            url: &Path,
            _: &Path,
            _: &[(String, String)],
        ) -> Result<Arc<Remote>, CheckpointError> {
            Err(CheckpointError::Invalid {
                path: url.to_owned(),
                message: super::check_url(url)
                    .err()
                    .unwrap_or_else(|| "object stores need the `object-store` feature".into()),
            })
        }
        pub(crate) fn local(&self) -> &Path {
            match self.never {}
        }
        pub(crate) fn url(&self) -> &str {
            match self.never {}
        }
        pub(crate) fn upload(&self, _: &Path) -> Result<(), CheckpointError> {
            match self.never {}
        }
        pub(crate) fn upload_once(&self, _: &Path) -> Result<(), CheckpointError> {
            match self.never {}
        }
        pub(crate) fn probe(&self, _: &Path) -> Result<(), CheckpointError> {
            match self.never {}
        }
        pub(crate) fn exists(&self, _: &Path) -> Result<bool, CheckpointError> {
            match self.never {}
        }
        pub(crate) fn fetch_tree(&self, _: &Path) -> Result<usize, CheckpointError> {
            match self.never {}
        }
        pub(crate) fn delete(&self, _: &[PathBuf]) {
            match self.never {}
        }
    }
}

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
