//! Checkpoint files.
//!
//! Layout under the checkpoint directory: `<job>/<run>/chk-<id>/<uid>-<subtask>.state` per
//! operator subtask with state, and `chk-<id>/_metadata` written last by the coordinator. Every
//! file is written to a temporary name, fsynced, then renamed, so a reader sees a whole file or
//! none; a checkpoint directory without `_metadata` is incomplete and never restored. Each
//! state file is a CBOR [`SnapshotEnvelope`] carrying its format version, operator uid,
//! subtask, checkpoint id and key-group range, so a misplaced or corrupted file is detected,
//! not misread.
//!
//! # Durability
//!
//! A checkpoint counts as complete only once everything it consists of is on stable storage,
//! directory entries included: each subtask fsyncs its state files before renaming them (one
//! fsync per file); before `_metadata` is written the coordinator fsyncs the checkpoint's
//! directory (the state files' renames) and the run directory (the `chk-<id>` entry), then
//! writes `_metadata` to a temporary file, fsyncs it, renames it and fsyncs the checkpoint
//! directory again ([`write_metadata`]). A directory this module creates has its entry fsynced
//! in its parent ([`create_dir_durable`]). An fsync that fails fails the checkpoint. Nothing is
//! fsynced per record.
//!
//! # Restoring the latest checkpoint of earlier runs
//!
//! [`find_latest`] scans the run directories of a job (`<directory>/<job>/run-*/`) for the
//! newest complete checkpoint whose files all read back (see
//! [`RestoreLatest`](super::RestoreLatest)).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use super::runs::RunRef;

use crate::fault::DiskTrouble;

mod load;
mod retention;

pub(crate) use load::{find_latest, load_dir, load_latest, load_latest_below, Chains, Loaded};
pub(crate) use retention::{completed, copy_to, retain};

/// Version of the envelope format.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// One operator subtask's state in one checkpoint.
///
/// A file with a field this build does not know is invalid, not read around: a damaged field
/// name (`payload_crc32` with a flipped bit) would otherwise drop the checksum and let a
/// damaged payload through as a file of an earlier version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The operator's own encoding of its state (one CBOR byte string; files of earlier
    /// versions hold an array of integers, which reads as well).
    #[serde(with = "payload_bytes")]
    pub payload: Vec<u8>,
    /// CRC-32 of `payload`, checked on read (absent in files of earlier versions, which are
    /// read unchecked).
    #[serde(default)]
    pub payload_crc32: Option<u32>,
    /// An incremental checkpoint's state: the runs that hold it, under the job run's
    /// directory, oldest first (`payload` is then empty). Reading the file merges them into
    /// the payload; a savepoint never has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Vec<RunRef>>,
}

/// A state file's bytes for `payload` (of operator `op`, subtask 0, checkpoint 1), as a
/// checkpoint writes them: for the `state` criterion bench (`weir::__bench`), not an API.
#[doc(hidden)]
pub fn state_file_bytes(payload: Vec<u8>) -> Result<Vec<u8>, String> {
    let payload_crc32 = Some(crc32fast::hash(&payload));
    crate::checkpoint::encode(&SnapshotEnvelope {
        format_version: FORMAT_VERSION,
        uid: "op".into(),
        subtask: 0,
        checkpoint_id: 1,
        key_groups: Some((0, 128)),
        payload,
        payload_crc32,
        chain: None,
    })
}

/// [`SnapshotEnvelope::payload`] as one CBOR byte string. Serde's default for `Vec<u8>` is an
/// array of integers: about 5 ns and up to 2 bytes per byte of state, on the checkpoint's
/// writer thread, and as long again to read. Either form reads (ciborium gives a byte string
/// to a sequence too, so builds before this one read the new form).
mod payload_bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub(super) fn serialize<S: Serializer>(payload: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(payload)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte string, or an array of bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}

/// What `_metadata` records: which file holds which operator subtask's state. Unknown fields
/// make it invalid (see [`SnapshotEnvelope`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointMetadata {
    pub(crate) format_version: u32,
    pub(crate) checkpoint_id: u64,
    pub(crate) job: String,
    /// uid -> subtask -> file name (relative to the checkpoint directory).
    pub(crate) states: BTreeMap<String, BTreeMap<usize, String>>,
    /// uid -> parallelism when taken.
    pub(crate) parallelism: BTreeMap<String, usize>,
    /// uid -> key-group table (key group -> subtask) when taken, of the operators whose key
    /// groups were assigned by load; the others' were by count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) key_groups: BTreeMap<String, Vec<u32>>,
    /// Total bytes of the state files.
    pub(crate) size: u64,
    /// The runs (`shared/..`) that incremental state files of this checkpoint reference:
    /// what retention must keep while the checkpoint is retained.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) runs: Vec<String>,
    /// CRC-32 of this metadata encoded without it, checked on read (absent in files of
    /// earlier versions).
    #[serde(default)]
    pub(crate) crc32: Option<u32>,
}

impl CheckpointMetadata {
    /// The metadata of checkpoint `id` of job `j`, for tests: `states`, `size` bytes, `runs`.
    #[cfg(test)]
    pub(crate) fn of(
        id: u64,
        states: BTreeMap<String, BTreeMap<usize, String>>,
        size: u64,
        runs: Vec<String>,
    ) -> Self {
        CheckpointMetadata {
            format_version: FORMAT_VERSION,
            checkpoint_id: id,
            job: "j".into(),
            states,
            parallelism: BTreeMap::new(),
            key_groups: BTreeMap::new(),
            size,
            runs,
            crc32: None,
        }
    }

    /// The CBOR of this metadata without its checksum.
    fn unsummed_bytes(&self) -> Result<Vec<u8>, String> {
        let mut plain = self.clone();
        plain.crc32 = None;
        let mut bytes = Vec::new();
        ciborium::into_writer(&plain, &mut bytes).map_err(|e| e.to_string())?;
        Ok(bytes)
    }
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
    /// A readable checkpoint or savepoint does not fit the job (state of an operator it does
    /// not have, another parallelism): an older one would not fit either.
    #[error("checkpoint {path} does not fit the job: {message}")]
    Incompatible {
        /// The checkpoint or savepoint directory.
        path: PathBuf,
        /// What does not fit.
        message: String,
    },
    /// The object store a checkpoint directory is on refused or failed a call.
    #[error("object store {url}: cannot {op} `{key}`: {message}")]
    Store {
        /// The checkpoint directory's URL.
        url: String,
        /// What was being done: put, get, list, delete.
        op: &'static str,
        /// The object (or prefix).
        key: String,
        /// What the store (or its client) said.
        message: String,
    },
}

impl CheckpointError {
    /// A call to the object store a checkpoint directory is on failed.
    #[cfg_attr(not(feature = "object-store"), allow(dead_code))]
    pub(crate) fn store(
        url: &str,
        op: &'static str,
        key: impl std::fmt::Display,
        source: impl std::fmt::Display,
    ) -> Self {
        CheckpointError::Store {
            url: url.to_owned(),
            op,
            key: key.to_string(),
            message: source.to_string(),
        }
    }

    /// Whether the checkpoint is unreadable (I/O, corrupted or partial files), so an older one
    /// may be tried; `false` when it was read and does not fit the job.
    pub fn is_unreadable(&self) -> bool {
        !matches!(self, CheckpointError::Incompatible { .. })
    }
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

/// The id of the checkpoint directory `dir` (`.../chk-{id}`).
pub(crate) fn checkpoint_id_of(dir: &Path) -> Option<u64> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("chk-")?
        .parse()
        .ok()
}

/// Fsyncs the directory `dir`: the entries created, renamed or removed in it become durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing parents, and fsyncs the parent of every directory it
/// created, so the new entries survive a power loss. A directory that exists costs nothing.
pub fn create_dir_durable(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|a| !a.exists()).collect();
    std::fs::create_dir_all(dir)?;
    // Top down: a parent's entry is durable before its children's.
    for created in missing.iter().rev() {
        match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent)?,
            _ => sync_dir(Path::new("."))?,
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file that is fsynced, then renamed. The
/// rename is durable only once the directory is fsynced (the caller's, see [`write_atomic`]).
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("tmp");
    // A storage fault injected by a test (`weir_testing::StorageFaults`) fails the write as
    // the disk would.
    let injected = crate::fault::write_fault(path);
    if let Some(trouble @ DiskTrouble::ReadOnly) = injected {
        return Err(io(&tmp)(trouble.error()));
    }
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        if let Some(trouble) = injected {
            // A full disk: what fits is written, then the write fails.
            let _ = f.write_all(&bytes[..bytes.len() / 2]);
            return Err(io(&tmp)(trouble.error()));
        }
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Writes `bytes` to `path` atomically and durably: temp file, fsync, rename, fsync of the
/// directory (created durably if need be).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir_durable(dir).map_err(io(dir))?;
    write_synced(path, bytes)?;
    sync_dir(dir).map_err(io(dir))
}

/// Decodes a file that must be exactly one CBOR value: bytes left over mean a damaged length
/// (a map that lost entries, its checksum among them), not a shorter valid file.
fn decode_whole<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut rest = bytes;
    let value = ciborium::from_reader(&mut rest).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes after the end of its contents: the file is corrupted",
            rest.len()
        ));
    }
    Ok(value)
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
    // The directory is fsynced once for all subtasks, by the coordinator (`write_metadata`).
    let dir = checkpoint_dir(root, env.checkpoint_id);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    write_synced(&path, &bytes)?;
    Ok((name, bytes.len() as u64))
}

/// Reads and checks one state file.
#[cfg(test)]
pub(crate) fn read_state(
    root: &Path,
    id: u64,
    name: &str,
    uid: &str,
    subtask: usize,
) -> Result<SnapshotEnvelope, CheckpointError> {
    read_state_at(&checkpoint_dir(root, id), id, name, uid, subtask)
}

/// Reads and checks one state file of the checkpoint (or savepoint) in `dir`; an incremental
/// state's chain is read and merged into its payload.
pub(crate) fn read_state_at(
    dir: &Path,
    id: u64,
    name: &str,
    uid: &str,
    subtask: usize,
) -> Result<SnapshotEnvelope, CheckpointError> {
    let (mut env, chain) = read_envelope_at(dir, id, name, uid, subtask, &local)?;
    if let Some(chain) = chain {
        env.payload = chain.payload().map_err(|e| CheckpointError::Invalid {
            path: dir.join(name),
            message: e,
        })?;
        env.payload_crc32 = Some(crc32fast::hash(&env.payload));
    }
    Ok(env)
}

/// An incremental state not yet read: the chain of runs that holds it, under the directory
/// of its job run. A restore reads it whole ([`Chained::payload`]), or a new subtask reads
/// the key groups of its range only ([`Chained::payload_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chained {
    pub(crate) root: PathBuf,
    pub(crate) runs: Vec<RunRef>,
}

impl Chained {
    /// The keyed snapshot payload the chain holds.
    pub(crate) fn payload(&self) -> Result<Vec<u8>, String> {
        super::runs::payload(&self.root, &self.runs)
            .map_err(|m| format!("cannot read its incremental state: {m}"))
    }

    /// The payload of the key groups `range` (and the operator's own fields): only the runs'
    /// blocks that hold them are read.
    pub(crate) fn payload_of(&self, range: std::ops::Range<usize>) -> Result<Vec<u8>, String> {
        let g = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        super::runs::payload_of(&self.root, &self.runs, g(range.start)..g(range.end))
            .map_err(|m| format!("cannot read its incremental state: {m}"))
    }
}

/// Makes a file about to be read present locally: a restore from an object store fetches it
/// ([`remote::Listing::fetch`](super::remote::Listing::fetch)); [`local`] for files that are
/// only local.
pub(crate) type Fetch<'a> = &'a dyn Fn(&Path) -> Result<(), CheckpointError>;

/// The [`Fetch`] of local files: nothing to do.
pub(crate) fn local(_: &Path) -> Result<(), CheckpointError> {
    Ok(())
}

/// Reads and checks one state file of the checkpoint (or savepoint) in `dir`, leaving an
/// incremental state's chain unread (its runs' lengths and index checksums are checked: a
/// chain with a run missing or damaged is unreadable now, not at deployment). The envelope's
/// payload is then empty.
pub(crate) fn read_envelope_at(
    dir: &Path,
    id: u64,
    name: &str,
    uid: &str,
    subtask: usize,
    fetch: Fetch<'_>,
) -> Result<(SnapshotEnvelope, Option<Chained>), CheckpointError> {
    let path = dir.join(name);
    fetch(&path)?;
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let env: SnapshotEnvelope =
        decode_whole(&bytes).map_err(|message| CheckpointError::Invalid {
            path: path.clone(),
            message,
        })?;
    let invalid = |message: String| CheckpointError::Invalid {
        path: path.clone(),
        message,
    };
    if let Some(expected) = env.payload_crc32 {
        let found = crc32fast::hash(&env.payload);
        if found != expected {
            return Err(invalid(format!(
                "the state's checksum is {found:08x}, the file says {expected:08x}: the file is corrupted"
            )));
        }
    }
    if env.format_version != FORMAT_VERSION {
        return Err(invalid(format!(
            "format version {} (this build reads {FORMAT_VERSION}): written by another version of Weir",
            env.format_version
        )));
    }
    if env.uid != uid || env.subtask != subtask || env.checkpoint_id != id {
        return Err(invalid(format!(
            "holds {}/{} of checkpoint {}, expected {uid}/{subtask} of {id}",
            env.uid, env.subtask, env.checkpoint_id
        )));
    }
    let mut env = env;
    let Some(runs) = env.chain.take() else {
        return Ok((env, None));
    };
    // The runs live beside the checkpoint directories, in the job run's directory.
    let root = dir
        .parent()
        .ok_or_else(|| invalid("an incremental state outside a job run's directory".into()))?;
    for r in &runs {
        fetch(&root.join(&r.file))?;
    }
    super::runs::verify(root, &runs)
        .map_err(|m| invalid(format!("cannot read its incremental state: {m}")))?;
    Ok((
        env,
        Some(Chained {
            root: root.to_owned(),
            runs,
        }),
    ))
}

/// Writes `_metadata`, which makes the checkpoint complete, once the subtasks' state files are
/// durable: fsyncs the checkpoint directory (their renames) and `root` (the checkpoint
/// directory's entry; `root` itself is made with [`create_dir_durable`]), then writes
/// `_metadata` atomically and fsyncs the checkpoint directory again. When it returns `Ok`, the
/// checkpoint survives a power loss (as far as the storage keeps what fsync promised).
pub(crate) fn write_metadata(
    root: &Path,
    meta: &CheckpointMetadata,
) -> Result<(), CheckpointError> {
    let bytes = metadata_bytes(root, meta)?;
    write_metadata_bytes(root, meta.checkpoint_id, &bytes)
}

/// `_metadata` of `meta` as it is written (with its checksum).
pub(crate) fn metadata_bytes(
    root: &Path,
    meta: &CheckpointMetadata,
) -> Result<Vec<u8>, CheckpointError> {
    let path = checkpoint_dir(root, meta.checkpoint_id).join("_metadata");
    let encode_err = |message: String| CheckpointError::Invalid {
        path: path.clone(),
        message,
    };
    let mut summed = meta.clone();
    summed.crc32 = Some(crc32fast::hash(&meta.unsummed_bytes().map_err(encode_err)?));
    let mut bytes = Vec::new();
    ciborium::into_writer(&summed, &mut bytes).map_err(|e| encode_err(e.to_string()))?;
    Ok(bytes)
}

/// Writes `_metadata` (`bytes`, see [`metadata_bytes`]) of checkpoint `id` under `root`,
/// durably (see the module doc).
pub(crate) fn write_metadata_bytes(
    root: &Path,
    id: u64,
    bytes: &[u8],
) -> Result<(), CheckpointError> {
    let dir = checkpoint_dir(root, id);
    let path = dir.join("_metadata");
    create_dir_durable(root).map_err(io(root))?;
    // A checkpoint without state files has no directory yet.
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    sync_dir(&dir).map_err(io(&dir))?;
    sync_dir(root).map_err(io(root))?;
    write_synced(&path, bytes)?;
    sync_dir(&dir).map_err(io(&dir))
}

/// Reads `_metadata` of checkpoint `id`.
pub(crate) fn read_metadata(root: &Path, id: u64) -> Result<CheckpointMetadata, CheckpointError> {
    read_metadata_at(&checkpoint_dir(root, id))
}

/// Reads `_metadata` of the checkpoint (or savepoint) in `dir`.
pub(crate) fn read_metadata_at(dir: &Path) -> Result<CheckpointMetadata, CheckpointError> {
    let path = dir.join("_metadata");
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let meta: CheckpointMetadata =
        decode_whole(&bytes).map_err(|message| CheckpointError::Invalid {
            path: path.clone(),
            message,
        })?;
    if let Some(expected) = meta.crc32 {
        let found = meta
            .unsummed_bytes()
            .map(|b| crc32fast::hash(&b))
            .map_err(|message| CheckpointError::Invalid {
                path: path.clone(),
                message,
            })?;
        if found != expected {
            return Err(CheckpointError::Invalid {
                path,
                message: format!(
                    "the metadata's checksum is {found:08x}, the file says {expected:08x}: the file is corrupted"
                ),
            });
        }
    }
    if meta.format_version != FORMAT_VERSION {
        return Err(CheckpointError::Invalid {
            path,
            message: format!(
                "format version {} (this build reads {FORMAT_VERSION}): written by another version of Weir",
                meta.format_version
            ),
        });
    }
    Ok(meta)
}

/// Each operator's parallelism when the checkpoint in `dir` was taken, as its metadata
/// records it (empty if it cannot be read: the states then tell).
pub(crate) fn recorded_parallelism(dir: &Path) -> std::collections::HashMap<String, usize> {
    read_metadata_at(dir)
        .map(|m| m.parallelism.into_iter().collect())
        .unwrap_or_default()
}

/// The key-group tables the metadata in `dir` records (uid -> table), of the operators whose
/// key groups were assigned by load.
pub(crate) fn recorded_key_groups(
    dir: &Path,
) -> std::collections::HashMap<String, std::sync::Arc<[u32]>> {
    read_metadata_at(dir)
        .map(|m| {
            m.key_groups
                .into_iter()
                .map(|(uid, t)| (uid, t.into()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
