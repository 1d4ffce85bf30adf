//! The object-store side of [`super::Remote`]: the client (object_store's, on a small
//! runtime of its own), keys of local paths, puts in parts, fetches in chunks, ordered
//! deletes. It does not decide what to put or delete ([`super`] and the checkpoint store do).

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

/// Never gives up waiting.
pub(crate) fn patient() -> bool {
    false
}

/// Runs `fut` on the storage runtime and waits for it (from any thread, async or not:
/// it blocks on a channel, never enters the runtime), or until `give_up()` (checked every
/// 50 ms): then the call is left to finish on its own and `Err` says so.
fn wait<T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
    give_up: &dyn Fn() -> bool,
) -> Result<T, String> {
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(v) => return Ok(v),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if give_up() => {
                return Err("given up: the subtask is stopping".into())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the object-store runtime dropped a call".into())
            }
        }
    }
}

/// `part` of a key as the local file name it stands for (object_store escapes some
/// characters, such as `#` of channel-state files, as `%XX`).
fn decode(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let s = String::from_utf8(out).ok()?;
    (!s.is_empty() && s != "." && s != ".." && !s.contains('/')).then_some(s)
}

/// Files larger than this are put in parts of this size, and objects are fetched in
/// chunks (never whole in memory).
const PART: usize = 16 << 20;

/// Parts being put at once.
const PARTS_IN_FLIGHT: usize = 4;

/// Puts the file `f` as `key` in parts ([`PART`] bytes, [`PARTS_IN_FLIGHT`] at once); an
/// upload that fails is aborted (the store keeps no part of it).
async fn put_in_parts(
    store: Arc<dyn ObjectStore>,
    key: Key,
    mut f: std::fs::File,
) -> Result<(), String> {
    use std::io::Read;
    let upload = store.put_multipart(&key).await.map_err(|e| e.to_string())?;
    let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
    let mut buf = vec![0u8; PART];
    let written: Result<(), String> = async {
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| format!("reading the file: {e}"))?;
            if n == 0 {
                return Ok(());
            }
            w.wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| e.to_string())?;
            w.write(&buf[..n]);
        }
    }
    .await;
    match written {
        Ok(()) => w.finish().await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => {
            let _ = w.abort().await;
            Err(e)
        }
    }
}

/// Gets `key` into the file `tmp` chunk by chunk (fsynced); `Ok(false)` if the store does
/// not have it.
async fn get_to_file(store: Arc<dyn ObjectStore>, key: Key, tmp: PathBuf) -> Result<bool, String> {
    use futures::StreamExt;
    use std::io::Write;
    let got = match store.get(&key).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let mut out = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut chunks = got.into_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        out.write_all(&chunk)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
    }
    out.sync_all()
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    Ok(true)
}

/// Deletes the files under the local directory `dir` that `listed` does not hold (the store
/// is the authority), each `_metadata` first: a checkpoint gone from the store never looks
/// complete here.
fn delete_unlisted(dir: &Path, listed: impl Fn(&Path) -> bool) -> Result<(), CheckpointError> {
    let mut stale = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if !listed(&path) {
                stale.push(path);
            }
        }
    }
    stale.sort_by_key(|p| p.file_name().is_none_or(|n| n != "_metadata"));
    for path in stale {
        if let Err(source) = std::fs::remove_file(&path) {
            return Err(CheckpointError::Io { path, source });
        }
    }
    Ok(())
}

/// What the store holds under a directory (local path -> size), for a restore to fetch the
/// files it reads: [`Remote::mirror_lazily`].
pub(crate) struct Listing {
    remote: Arc<Remote>,
    listed: std::collections::HashMap<PathBuf, u64>,
    /// How many objects were fetched.
    fetched: std::sync::atomic::AtomicUsize,
}

impl Listing {
    /// Makes sure the local file `path` is the store's, fetching it if the store has it and
    /// the local copy lacks it (or holds it with another size: a checkpoint's files never
    /// change under their name). A file the store does not have is left for the reader to
    /// find missing; an object gone since the listing too.
    pub(crate) fn fetch(&self, path: &Path) -> Result<(), CheckpointError> {
        let Some(&size) = self.listed.get(path) else {
            return Ok(());
        };
        if std::fs::metadata(path).is_ok_and(|m| m.len() == size) {
            return Ok(());
        }
        if self.remote.fetch_file(path)? {
            self.fetched
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            tracing::warn!(url = %self.remote.url, path = %path.display(), "an object went while it was fetched: skipped");
        }
        Ok(())
    }

    /// Objects fetched so far, and objects listed.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.fetched.load(std::sync::atomic::Ordering::Relaxed),
            self.listed.len(),
        )
    }
}

/// A checkpoint directory on an object store, mirrored by a local directory.
pub(crate) struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    /// The URL's path: every key starts with it.
    prefix: Key,
    /// The local copy: a file `local/a/b` is the object `prefix/a/b`.
    local: PathBuf,
    /// Runs already put by this process (a run is put once: its name is unique and its
    /// content never changes); an entry goes when its object is deleted.
    uploaded: Mutex<HashSet<PathBuf>>,
    /// Deletions that failed, tried again with the next ones.
    pending: Mutex<Vec<PathBuf>>,
    /// The thread that deletes off the controller's thread ([`Remote::delete_later`]).
    cleaner: Mutex<Option<std::sync::mpsc::Sender<Cleanup>>>,
}

/// Work for the cleaning thread.
enum Cleanup {
    Delete(Vec<PathBuf>),
    /// Answered once everything sent before is done.
    Flush(std::sync::mpsc::SyncSender<()>),
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("local", &self.local)
            .finish()
    }
}

fn bad_url(url: &Path, message: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Invalid {
        path: url.to_owned(),
        message: message.to_string(),
    }
}

impl Remote {
    /// The object store of `url`, mirrored under `local_directory` (see
    /// [`super::local_copy_of`]). Credentials come from the environment and `options`.
    pub(crate) fn open(
        url: &Path,
        local_directory: &Path,
        options: &[(String, String)],
    ) -> Result<Arc<Remote>, CheckpointError> {
        super::check_url(url).map_err(|m| bad_url(url, m))?;
        let s = url.to_string_lossy().into_owned();
        let parsed: url::Url = s
            .parse()
            .map_err(|e| bad_url(url, format!("not a URL: {e}")))?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed)
            .map_err(|e| bad_url(url, format!("not a store URL: {e}")))?;
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
                        .map_err(|e| bad_url(url, format!("checkpoint.storage_options `{k}`: {e}")))
                })
                .collect()
        }
        let setup =
            |what: &str, e: object_store::Error| bad_url(url, format!("cannot set up {what}: {e}"));
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(&s);
                for (k, v) in keys(url, options)? {
                    b = b.with_config(k, v);
                }
                Arc::new(b.with_retry(retry).build().map_err(|e| setup("S3", e))?)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(&s);
                for (k, v) in keys(url, options)? {
                    b = b.with_config(k, v);
                }
                Arc::new(b.with_retry(retry).build().map_err(|e| setup("GCS", e))?)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(&s);
                for (k, v) in keys(url, options)? {
                    b = b.with_config(k, v);
                }
                Arc::new(
                    b.with_retry(retry)
                        .build()
                        .map_err(|e| setup("Azure storage", e))?,
                )
            }
            // Durable (files and directories fsynced) and tidy (empty directories go).
            ObjectStoreScheme::Local => Arc::new(
                object_store::local::LocalFileSystem::new()
                    .with_fsync(true)
                    .with_automatic_cleanup(true),
            ),
            other => {
                return Err(bad_url(
                    url,
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
            pending: Mutex::new(Vec::new()),
            cleaner: Mutex::new(None),
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
        let rel = local.strip_prefix(&self.local).map_err(|_| {
            CheckpointError::store(
                &self.url,
                "map",
                local.display(),
                "not under the local copy",
            )
        })?;
        let mut key = self.prefix.clone();
        for part in rel.components() {
            key = key.join(part.as_os_str().to_string_lossy().as_ref());
        }
        Ok(key)
    }

    /// The local path of object `key` (`None`: not under the prefix, or a name no local
    /// file can have).
    fn local_of(&self, key: &Key) -> Option<PathBuf> {
        let mut out = self.local.clone();
        for part in key.prefix_match(&self.prefix)? {
            out.push(decode(part.as_ref())?);
        }
        Some(out)
    }

    fn failed<T>(
        &self,
        op: &'static str,
        key: &Key,
    ) -> impl FnOnce(String) -> Result<T, CheckpointError> + '_ {
        let key = key.to_string();
        move |e| Err(CheckpointError::store(&self.url, op, key, e))
    }

    /// Puts the local file `file` (whole) on the store as the object of local path `as_`
    /// (the same path, or where a staged copy goes).
    fn put(
        &self,
        file: &Path,
        as_: &Path,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), CheckpointError> {
        let key = self.key(as_)?;
        let io = |source| CheckpointError::Io {
            path: file.to_owned(),
            source,
        };
        let len = std::fs::metadata(file).map_err(io)?.len();
        let (store, k) = (self.store.clone(), key.clone());
        let put = if len <= PART as u64 {
            let bytes = std::fs::read(file).map_err(io)?;
            let put = async move {
                let put = store.put(&k, bytes.into()).await;
                put.map(|_| ()).map_err(|e| e.to_string())
            };
            wait(put, give_up)
        } else {
            // A large file goes in parts, read a part at a time: memory stays at a few
            // parts whatever the state's size (and S3 takes more than 5 GiB this way).
            let f = std::fs::File::open(file).map_err(io)?;
            wait(put_in_parts(store, k, f), give_up)
        };
        match put {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) | Err(e) => self.failed("put", &key)(e),
        }
    }

    /// Puts the local file `local` on the store.
    pub(crate) fn upload(
        &self,
        local: &Path,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), CheckpointError> {
        self.put(local, local, give_up)
    }

    /// Puts the local file `file` as the object of local path `as_`.
    pub(crate) fn upload_as(&self, file: &Path, as_: &Path) -> Result<(), CheckpointError> {
        self.put(file, as_, &patient)
    }

    /// [`Self::upload`] a run, unless this process already put it.
    pub(crate) fn upload_once(
        &self,
        local: &Path,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), CheckpointError> {
        if lock(&self.uploaded).contains(local) {
            return Ok(());
        }
        self.put(local, local, give_up)?;
        lock(&self.uploaded).insert(local.to_owned());
        Ok(())
    }

    /// Puts `bytes` as the object of local path `local` without waiting: `done` gets the
    /// outcome, on a storage thread.
    pub(crate) fn put_then(
        &self,
        local: &Path,
        bytes: Vec<u8>,
        done: impl FnOnce(Result<(), CheckpointError>) + Send + 'static,
    ) {
        let key = match self.key(local) {
            Ok(k) => k,
            Err(e) => return done(Err(e)),
        };
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return done(Err(CheckpointError::store(&self.url, "put", key, e))),
        };
        let (store, url) = (self.store.clone(), self.url.clone());
        rt.spawn(async move {
            let r = store.put(&key, bytes.into()).await;
            done(
                r.map(|_| ())
                    .map_err(|e| CheckpointError::store(&url, "put", key, e)),
            );
        });
    }

    /// [`Self::delete`] on a thread of its own, in order, so that the caller (the
    /// controller, between heartbeats) does not wait for the store.
    pub(crate) fn delete_later(self: &Arc<Self>, gone: Vec<PathBuf>) {
        let mut cleaner = lock(&self.cleaner);
        if cleaner.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Cleanup>();
            let me = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("weir-storage-cleanup".into())
                .spawn(move || {
                    for work in rx {
                        match work {
                            Cleanup::Delete(gone) => {
                                if let Some(remote) = me.upgrade() {
                                    remote.delete(&gone);
                                }
                            }
                            Cleanup::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                });
            match started {
                Ok(_) => *cleaner = Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "no thread to delete on the object store: deleting here");
                    drop(cleaner);
                    return self.delete(&gone);
                }
            }
        }
        if let Some(tx) = cleaner.as_ref() {
            if let Err(e) = tx.send(Cleanup::Delete(gone)) {
                let Cleanup::Delete(gone) = e.0 else { return };
                drop(cleaner);
                self.delete(&gone);
            }
        }
    }

    /// Waits until what [`Self::delete_later`] was given is done.
    pub(crate) fn settle(&self) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let sent = lock(&self.cleaner)
            .as_ref()
            .is_some_and(|c| c.send(Cleanup::Flush(tx)).is_ok());
        if sent {
            let _ = rx.recv();
        }
    }

    /// Whether the object of local path `local` exists on the store.
    pub(crate) fn exists(&self, local: &Path) -> Result<bool, CheckpointError> {
        let key = self.key(local)?;
        let (store, k) = (self.store.clone(), key.clone());
        match wait(async move { store.head(&k).await }, &patient) {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(false),
            Ok(Err(e)) => self.failed("look up", &key)(e.to_string()),
            Err(e) => self.failed("look up", &key)(e),
        }
    }

    /// Puts a small probe object under `local` and deletes it: a bad bucket, endpoint or
    /// credentials fail the job's start, naming the store's answer.
    pub(crate) fn probe(&self, local: &Path) -> Result<(), CheckpointError> {
        let key = self.key(&local.join(".weir-probe"))?;
        let (store, k) = (self.store.clone(), key.clone());
        let probe = async move {
            store.put(&k, b"weir".to_vec().into()).await?;
            store.delete(&k).await
        };
        match wait(probe, &patient) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => self.failed("put and delete", &key)(e.to_string()),
            Err(e) => self.failed("put and delete", &key)(e),
        }
    }

    /// The objects under local directory `dir`, as local paths with their sizes.
    fn list(&self, dir: &Path) -> Result<Vec<(PathBuf, u64)>, CheckpointError> {
        let key = self.key(dir)?;
        let (store, k) = (self.store.clone(), key.clone());
        let listed = wait(
            async move { store.list(Some(&k)).try_collect::<Vec<_>>().await },
            &patient,
        );
        let metas = match listed {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return self.failed("list", &key)(e.to_string()),
            Err(e) => return self.failed("list", &key)(e),
        };
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let local = self.local_of(&m.location);
                if local.is_none() {
                    tracing::warn!(url = %self.url, key = %m.location, "an object no local file can stand for: left alone");
                }
                Some((local?, m.size))
            })
            .collect())
    }

    /// Gets the object of local path `local` into that file (whole or not at all:
    /// through a temporary file, fsynced and renamed); `Ok(false)` if the store does not
    /// have it.
    pub(crate) fn fetch_file(&self, local: &Path) -> Result<bool, CheckpointError> {
        let key = self.key(local)?;
        if let Some(parent) = local.parent() {
            store::create_dir_durable(parent).map_err(|source| CheckpointError::Io {
                path: parent.to_owned(),
                source,
            })?;
        }
        let mut tmp = local.as_os_str().to_owned();
        tmp.push(".fetching");
        let tmp = PathBuf::from(tmp);
        let (store, k, t) = (self.store.clone(), key.clone(), tmp.clone());
        let got = match wait(get_to_file(store, k, t), &patient) {
            Ok(Ok(got)) => got,
            Ok(Err(e)) | Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return self.failed("get", &key)(e);
            }
        };
        if got {
            std::fs::rename(&tmp, local).map_err(|source| CheckpointError::Io {
                path: local.to_owned(),
                source,
            })?;
            if let Some(parent) = local.parent() {
                let _ = store::sync_dir(parent);
            }
        }
        Ok(got)
    }

    /// Makes the local copy of directory `dir` agree with the store without fetching what a
    /// restore may not need: deletes local files the store does not have (`_metadata`
    /// first), fetches every `_metadata` the copy lacks, and returns the listing, through
    /// which a restore fetches the files of the checkpoints it reads ([`Listing::fetch`]):
    /// the newest readable one's, not every checkpoint's of the job's runs.
    pub(crate) fn mirror_lazily(self: &Arc<Self>, dir: &Path) -> Result<Listing, CheckpointError> {
        let objects = self.list(dir)?;
        let listed: std::collections::HashMap<PathBuf, u64> = objects.into_iter().collect();
        delete_unlisted(dir, |p| listed.contains_key(p))?;
        let listing = Listing {
            remote: self.clone(),
            listed,
            fetched: Default::default(),
        };
        for path in listing.listed.keys() {
            if path.file_name().is_some_and(|n| n == "_metadata") {
                listing.fetch(path)?;
            }
        }
        Ok(listing)
    }

    /// Makes the local copy of directory `dir` what the store holds: fetches every object
    /// the copy lacks (or holds with another size: a checkpoint's files never change under
    /// their name), `_metadata` last, and deletes local files the store does not have (a
    /// checkpoint deleted there is not restored from here). Returns how many objects it
    /// fetched. An object deleted between the listing and its fetch is skipped (the
    /// restore then finds its checkpoint incomplete and takes an older one).
    pub(crate) fn fetch_tree(&self, dir: &Path) -> Result<usize, CheckpointError> {
        let mut objects = self.list(dir)?;
        let listed: HashSet<&Path> = objects.iter().map(|(p, _)| p.as_path()).collect();
        delete_unlisted(dir, |p| listed.contains(p))?;
        // `_metadata` last: a checkpoint whose files are not all here yet never looks
        // complete.
        objects.sort_by_key(|(p, _)| p.file_name().is_some_and(|n| n == "_metadata"));
        let mut fetched = 0;
        for (path, size) in objects {
            if std::fs::metadata(&path).is_ok_and(|m| m.len() == size) {
                continue;
            }
            if self.fetch_file(&path)? {
                fetched += 1;
            } else {
                tracing::warn!(url = %self.url, path = %path.display(), "an object went while it was fetched: skipped");
            }
        }
        Ok(fetched)
    }

    /// Deletes on the store what was deleted locally (`gone`: checkpoint directories and
    /// run files), and what earlier calls could not: each checkpoint's `_metadata` before
    /// its other files, and the runs only once every `_metadata` went, so that a failure
    /// or a crash in the middle never leaves a complete checkpoint missing a file. What
    /// fails is logged and tried again at the next call.
    pub(crate) fn delete(&self, gone: &[PathBuf]) {
        let mut todo = std::mem::take(&mut *lock(&self.pending));
        todo.extend(gone.iter().cloned());
        todo.sort();
        todo.dedup();
        let mut retry = Vec::new();
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for path in todo {
            // A run file (`.run`, `.base`) is deleted as it is; a directory (`chk-<id>`, a
            // job run's) is listed first.
            if path.extension().is_some() {
                files.push(path);
                continue;
            }
            match self.list(&path) {
                Ok(objects) if objects.is_empty() => files.push(path),
                Ok(objects) => dirs.push((path, objects)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list what to delete on the object store; tried again later");
                    retry.push(path);
                }
            }
        }
        let mut every_metadata_gone = true;
        for (dir, objects) in dirs {
            let (metadata, rest): (Vec<_>, Vec<_>) = objects
                .into_iter()
                .map(|(p, _)| p)
                .partition(|p| p.file_name().is_some_and(|n| n == "_metadata"));
            if !metadata.iter().all(|p| self.delete_one(p)) {
                every_metadata_gone = false;
                retry.push(dir);
                continue;
            }
            if !rest.iter().all(|p| self.delete_one(p)) {
                retry.push(dir);
            }
        }
        for file in files {
            if !every_metadata_gone || !self.delete_one(&file) {
                retry.push(file);
            }
        }
        lock(&self.pending).extend(retry);
    }

    /// Deletes the object of local path `path` (gone already counts); whether it is gone.
    fn delete_one(&self, path: &Path) -> bool {
        let Ok(key) = self.key(path) else {
            return false;
        };
        let (store, k) = (self.store.clone(), key.clone());
        let res = wait(async move { store.delete(&k).await }, &patient);
        match res {
            Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => {
                lock(&self.uploaded).remove(path);
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(url = %self.url, key = %key, error = %e, "cannot delete a checkpoint object; tried again later");
                false
            }
            Err(e) => {
                tracing::warn!(url = %self.url, key = %key, error = %e, "cannot delete a checkpoint object; tried again later");
                false
            }
        }
    }
}

/// Locks one of the client's own mutexes, recovering the data if a thread panicked holding it.
///
/// The client is not one of the concurrency cores the loom models explore, so it uses std's
/// mutex directly rather than the `sync` shim (whose types are loom's under `--cfg weir_loom`).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_name_and_its_key_go_both_ways() {
        let dir = std::env::temp_dir().join(format!("weir-remote-keys-{}", std::process::id()));
        let url = PathBuf::from(format!("file://{}", dir.join("store").display()));
        let r = Remote::open(&url, &dir.join("local"), &[]).unwrap();
        for name in [
            "count#in0-1.state",
            "a%b~c*d?.run",
            "plain-0.state",
            "x y[1]{2}|",
        ] {
            let local = r.local().join("job").join("run-1").join("chk-3").join(name);
            let key = r.key(&local).unwrap();
            assert_eq!(
                r.local_of(&key).as_deref(),
                Some(local.as_path()),
                "{name} as {key}"
            );
        }
        assert_eq!(decode("%2E%2E"), None, "`..` is not a local name");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A remote on a file:// store in a fresh temporary directory (returned, to remove).
    fn file_remote(name: &str) -> (PathBuf, Arc<Remote>) {
        let dir = std::env::temp_dir().join(format!("weir-remote-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let url = PathBuf::from(format!("file://{}", dir.join("store").display()));
        let r = Remote::open(&url, &dir.join("local"), &[]).unwrap();
        (dir, r)
    }

    #[test]
    fn a_file_larger_than_a_part_goes_in_parts_and_comes_back_whole() {
        let (dir, r) = file_remote("parts");
        let file = r.local().join("run-1").join("shared").join("big.run");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let bytes: Vec<u8> = (0..PART * 2 + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&file, &bytes).unwrap();
        r.upload(&file, &patient).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(r.fetch_tree(r.local()).unwrap(), 1);
        assert!(
            std::fs::read(&file).unwrap() == bytes,
            "the file came back changed"
        );
        // Gone from the store: gone from the local copy at the next fetch.
        r.delete(std::slice::from_ref(&file));
        assert_eq!(r.fetch_tree(r.local()).unwrap(), 0);
        assert!(!file.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_restore_fetches_the_files_of_the_checkpoint_it_reads_not_the_older_ones() {
        use crate::checkpoint::store::{self, CheckpointMetadata, SnapshotEnvelope};
        use std::collections::BTreeMap;
        let (dir, r) = file_remote("lazy");
        let job = r.local().join("job");
        let run = job.join("run-1000-1-0");
        let mut files = Vec::new();
        for id in [1u64, 2] {
            let payload = vec![id as u8; 100];
            let env = SnapshotEnvelope {
                format_version: store::FORMAT_VERSION,
                uid: "count".into(),
                subtask: 0,
                checkpoint_id: id,
                key_groups: None,
                payload_crc32: Some(crc32fast::hash(&payload)),
                payload,
                chain: None,
            };
            let (name, size) = store::write_state(&run, &env).unwrap();
            let states = BTreeMap::from([(
                "count".to_string(),
                BTreeMap::from([(0usize, name.clone())]),
            )]);
            store::write_metadata(&run, &CheckpointMetadata::of(id, states, size, Vec::new()))
                .unwrap();
            let chk = store::checkpoint_dir(&run, id);
            files.push((chk.join(&name), chk.join("_metadata")));
        }
        for (state, meta) in &files {
            r.upload(state, &patient).unwrap();
            r.upload(meta, &patient).unwrap();
        }
        std::fs::remove_dir_all(r.local()).unwrap();
        let listing = r.mirror_lazily(&job).unwrap();
        assert!(
            files.iter().all(|(_, meta)| meta.is_file()),
            "every _metadata"
        );
        assert!(
            files.iter().all(|(state, _)| !state.exists()),
            "no state file yet"
        );
        let fetch = |p: &Path| listing.fetch(p);
        let scan = store::find_latest(&job, &["count".to_string()], false, &fetch).unwrap();
        let latest = scan.latest.expect("a checkpoint");
        assert_eq!(latest.loaded.checkpoint, 2);
        assert_eq!(
            latest.loaded.states[&("count".to_string(), 0)],
            vec![2u8; 100]
        );
        assert!(
            files[1].0.is_file(),
            "the newest checkpoint's state file was fetched"
        );
        assert!(!files[0].0.exists(), "the older one's was not");
        assert_eq!(listing.counts(), (3, 4));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
