//! The disk state backend's store: one keyed subtask's states in an embedded LSM store
//! (fjall), the keys in use cached in memory, decoded, up to a budget.
//!
//! Layout: a state is stored under its key group (4 bytes, big-endian) followed by its key's
//! CBOR, so the store's order is by key group and one group's keys are contiguous (what a
//! snapshot grouped by key group, and a read of a key-group range, need). The value is the
//! change log's generation the entry was last logged in (8 bytes) followed by the state's
//! CBOR: an entry that a checkpoint's copy has still to take keeps saying so while it is out
//! of the cache (see `checkpoint::copy`).
//!
//! The cache is authoritative: a cached key's stored value may be older. A miss loads the
//! key (or starts it from `Default`); past the budget, about an eighth of the cache is
//! written back in one batch and dropped. The store is a working copy, never fsynced:
//! durability is the checkpoints' (which write Weir's own portable format, whatever the
//! backend), and the directory is deleted when the subtask ends.
//!
//! This module owns the store and the cache; not the change log (`state::changes`), nor how
//! snapshots are laid out (the keyed operator's).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxBuildHasher;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::backend::DiskBackend;
use super::changes::{ChangeLog, Generation};
use super::Tracked;

/// Entries written back per batch at most (a batch is built in memory first).
const WRITE_BATCH: usize = 4096;
/// Entries written between two calls of a flush's `tick`.
const TICK_EVERY: usize = 64;

/// One keyed subtask's states on disk.
pub(crate) struct DiskEntries<K, S> {
    /// The keys in use, decoded: authoritative over the store.
    pub(crate) cache: HashMap<K, Tracked<S>, FxBuildHasher>,
    /// Most entries the cache holds before some are written back.
    capacity: usize,
    /// Bytes the cache may use.
    budget: usize,
    /// What one cached entry costs, estimated from the entries written back.
    entry_bytes: usize,
    db: fjall::Database,
    keys: fjall::Keyspace,
    max_parallelism: usize,
    /// Keys with a state, cached or stored.
    count: usize,
    /// Restored entries not yet written (written a batch at a time).
    restored: Vec<(Vec<u8>, Vec<u8>)>,
    /// Scratch for a key's stored form.
    key_buf: Vec<u8>,
    /// The first error of the store, reported by the operator at its next step.
    error: Option<String>,
}

impl<K, S> std::fmt::Debug for DiskEntries<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskEntries")
            .field("cached", &self.cache.len())
            .field("capacity", &self.capacity)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

/// A key's stored form: its key group, big-endian, then its CBOR.
fn stored_key<K: Serialize>(group: usize, key: &K, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.extend_from_slice(&(group as u32).to_be_bytes());
    ciborium::into_writer(key, &mut *out).map_err(|e| format!("cannot encode a key: {e}"))
}

/// A state's stored form: the generation it was logged in, then its CBOR.
fn stored_value<S: Serialize>(t: &Tracked<S>) -> Result<Vec<u8>, String> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(&t.logged.get().to_le_bytes());
    ciborium::into_writer(&t.state, &mut v).map_err(|e| format!("cannot encode a state: {e}"))?;
    Ok(v)
}

fn decode_value<S: DeserializeOwned>(bytes: &[u8]) -> Result<Tracked<S>, String> {
    let (logged, state) = bytes
        .split_first_chunk::<8>()
        .ok_or("a stored state shorter than its header")?;
    let state = ciborium::from_reader(state).map_err(|e| format!("cannot decode a state: {e}"))?;
    Ok(Tracked {
        state,
        logged: std::cell::Cell::new(Generation::from_le_bytes(*logged)),
    })
}

fn decode_key<K: DeserializeOwned>(bytes: &[u8]) -> Result<K, String> {
    let key = bytes
        .get(4..)
        .ok_or("a stored key shorter than its group")?;
    ciborium::from_reader(key).map_err(|e| format!("cannot decode a key: {e}"))
}

/// Removes the stores that processes no longer running left under `directory` (killed
/// before they could delete theirs): a store's directory name ends in `-<pid>-<n>`. Only
/// where `/proc` tells which processes run; a failure to remove is left for the next sweep.
fn sweep_dead(directory: &std::path::Path) {
    let proc = std::path::Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.rsplit('-');
        let (Some(n), Some(pid)) = (parts.next(), parts.next()) else {
            continue;
        };
        if n.parse::<u64>().is_err() {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn store_error(e: fjall::Error) -> String {
    format!("disk state store: {e}")
}

impl<K, S> DiskEntries<K, S> {
    /// Keys with a state.
    pub(crate) fn len(&self) -> usize {
        self.count
    }
}

impl<K, S> DiskEntries<K, S>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    S: Clone + Serialize + DeserializeOwned,
{
    /// A new, empty store for subtask `subtask` of operator `uid`, in a directory of its own
    /// under `cfg.directory`.
    pub(crate) fn open(
        cfg: &DiskBackend,
        uid: &str,
        subtask: usize,
        max_parallelism: usize,
    ) -> Result<Self, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name: String = uid
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(64)
            .collect();
        let dir = cfg.directory.join(format!(
            "{name}-{subtask}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&cfg.directory)
            .map_err(|e| format!("cannot create {}: {e}", cfg.directory.display()))?;
        sweep_dead(&cfg.directory);
        let _ = std::fs::remove_dir_all(&dir);
        let db = fjall::Database::builder(&dir)
            .temporary(true)
            .manual_journal_persist(true)
            .worker_threads(1)
            .cache_size((cfg.memory_budget / 8) as u64)
            .open()
            .map_err(|e| format!("cannot open a disk state store in {}: {e}", dir.display()))?;
        let memtable = (cfg.memory_budget / 8).max(1 << 20) as u64;
        let keys = db
            .keyspace("state", || {
                // Filter and index blocks pinned in memory at every level (RocksDB's
                // `pin_l0_filter_and_index_blocks_in_cache` and more): with a small block
                // cache, a point read otherwise loads and checksums a table's whole filter
                // block (about 90 us per read at 1M keys and a 16 MiB budget: 11k reads/s).
                // They cost about 10 bits per key.
                fjall::KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .filter_block_pinning_policy(fjall::config::PinningPolicy::all(true))
                    .index_block_pinning_policy(fjall::config::PinningPolicy::all(true))
            })
            .map_err(store_error)?;
        let budget = cfg.memory_budget / 4 * 3;
        let entry_bytes = Self::overhead() + 16;
        Ok(DiskEntries {
            cache: HashMap::default(),
            capacity: (budget / entry_bytes).max(64),
            budget,
            entry_bytes,
            db,
            keys,
            max_parallelism,
            count: 0,
            restored: Vec::new(),
            key_buf: Vec::new(),
            error: None,
        })
    }

    /// A cached entry's size beside its state's heap: the key, the entry, the map's slot.
    fn overhead() -> usize {
        std::mem::size_of::<(K, Tracked<S>)>() + 8
    }

    /// Notes the store's first error; the operator fails with it at its next step.
    pub(crate) fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
    }

    /// The store's first error since the last call.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    /// `key`'s stored entry, if it has one.
    pub(crate) fn stored(&mut self, key: &K) -> Result<Option<Tracked<S>>, String> {
        self.write_restored()?;
        let group = crate::key_group::key_group_of(key, self.max_parallelism);
        stored_key(group, key, &mut self.key_buf)?;
        match self.keys.get(&self.key_buf).map_err(store_error)? {
            Some(v) => decode_value(&v).map(Some),
            None => Ok(None),
        }
    }

    /// `key`'s entry to put in the cache: its stored one, or a new one from `new` (logged as
    /// written now by `changes`).
    pub(crate) fn load(
        &mut self,
        key: &K,
        changes: &mut ChangeLog<K>,
        new: impl FnOnce() -> S,
    ) -> Result<Tracked<S>, String> {
        match self.stored(key)? {
            Some(t) => Ok(t),
            None => {
                self.count += 1;
                Ok(Tracked {
                    state: new(),
                    logged: std::cell::Cell::new(changes.inserted(key)),
                })
            }
        }
    }

    /// Caches `key`'s entry (not cached), writing some others back first if the cache is
    /// full.
    pub(crate) fn insert(&mut self, key: K, t: Tracked<S>) {
        if self.cache.len() >= self.capacity {
            if let Err(e) = self.write_back() {
                self.fail(e);
            }
        }
        self.cache.insert(key, t);
    }

    /// Writes about an eighth of the cache back to the store and drops it from the cache.
    fn write_back(&mut self) -> Result<(), String> {
        let n = self.cache.len() - self.capacity / 8 * 7;
        let mut taken = 0;
        let out: Vec<(K, Tracked<S>)> = self
            .cache
            .extract_if(|_, _| {
                taken += 1;
                taken <= n
            })
            .collect();
        let mut encoded = 0usize;
        for chunk in out.chunks(WRITE_BATCH) {
            let mut batch = self.db.batch();
            for (k, t) in chunk {
                encoded += self.put(&mut batch, k, t)?;
            }
            batch.commit().map_err(store_error)?;
        }
        if !out.is_empty() {
            // The decoded state takes about as much as its encoding, plus the entry itself.
            let per = Self::overhead() + encoded / out.len();
            self.entry_bytes = (self.entry_bytes * 3 + per) / 4;
            self.capacity = (self.budget / self.entry_bytes.max(1)).max(64);
        }
        Ok(())
    }

    /// Adds `key`'s entry to `batch` in its stored form; the encoded value's length.
    fn put(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        key: &K,
        t: &Tracked<S>,
    ) -> Result<usize, String> {
        let mut stored = Vec::new();
        let group = crate::key_group::key_group_of(key, self.max_parallelism);
        stored_key(group, key, &mut stored)?;
        let value = stored_value(t)?;
        let len = value.len();
        batch.insert(&self.keys, stored, value);
        Ok(len)
    }

    /// Writes every cached entry to the store (they stay cached), and the restored ones.
    pub(crate) fn flush(&mut self) -> Result<(), String> {
        self.flush_saying(&|| {})
    }

    /// [`flush`](Self::flush), calling `tick` every few entries written (encoding them may
    /// take a while: a backed-up primary must say it works meanwhile).
    fn flush_saying(&mut self, tick: &dyn Fn()) -> Result<(), String> {
        self.write_restored()?;
        let mut batch = self.db.batch();
        let mut n = 0;
        for (k, t) in &self.cache {
            self.put(&mut batch, k, t)?;
            n += 1;
            if n % TICK_EVERY == 0 {
                tick();
            }
            if n % WRITE_BATCH == 0 {
                std::mem::replace(&mut batch, self.db.batch())
                    .commit()
                    .map_err(store_error)?;
            }
        }
        batch.commit().map_err(store_error)
    }

    /// Calls `f` with every key and state, by key group ascending (one group's keys
    /// together).
    pub(crate) fn for_each(
        &mut self,
        mut f: impl FnMut(&K, &S) -> Result<(), String>,
        tick: &dyn Fn(),
    ) -> Result<(), String> {
        self.flush_saying(tick)?;
        for kv in self.keys.iter() {
            let (k, v) = kv.into_inner().map_err(store_error)?;
            let key: K = decode_key(&k)?;
            let t: Tracked<S> = decode_value(&v)?;
            f(&key, &t.state)?;
        }
        Ok(())
    }

    /// Loads every key into the cache, which stops writing back (the end of the input:
    /// `end_of_input` is given every key's state).
    pub(crate) fn load_all(&mut self) -> Result<(), String> {
        self.flush()?;
        self.capacity = usize::MAX;
        for kv in self.keys.iter() {
            let (k, v) = kv.into_inner().map_err(store_error)?;
            let key: K = decode_key(&k)?;
            if let std::collections::hash_map::Entry::Vacant(e) = self.cache.entry(key) {
                e.insert(decode_value(&v)?);
            }
        }
        Ok(())
    }

    /// Adds a restored entry (written to the store a batch at a time, not cached).
    pub(crate) fn restore(&mut self, key: K, state: S) {
        let group = crate::key_group::key_group_of(&key, self.max_parallelism);
        let mut k = Vec::new();
        let encoded =
            stored_key(group, &key, &mut k).and_then(|()| stored_value(&Tracked::new(state, 0)));
        match encoded {
            Ok(v) => {
                self.restored.push((k, v));
                self.count += 1;
            }
            Err(e) => self.fail(e),
        }
        if self.restored.len() >= WRITE_BATCH {
            if let Err(e) = self.write_restored() {
                self.fail(e);
            }
        }
    }

    fn write_restored(&mut self) -> Result<(), String> {
        if self.restored.is_empty() {
            return Ok(());
        }
        let mut batch = self.db.batch();
        for (k, v) in self.restored.drain(..) {
            batch.insert(&self.keys, k, v);
        }
        batch.commit().map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(budget: usize, dir: &std::path::Path) -> DiskEntries<u64, String> {
        let cfg = DiskBackend {
            directory: dir.to_owned(),
            memory_budget: budget,
        };
        DiskEntries::open(&cfg, "op/1", 0, 128).expect("opens")
    }

    fn temp(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("weir-disk-test-{tag}-{}", std::process::id()))
    }

    #[test]
    fn entries_written_back_past_the_budget_come_back_as_they_were() {
        let dir = temp("back");
        let mut d = open(1 << 20, &dir);
        let mut log = ChangeLog::default();
        for k in 0..50_000u64 {
            let mut t = d.load(&k, &mut log, String::new).expect("loads");
            t.state = format!("value of {k}");
            d.insert(k, t);
        }
        assert!(d.take_error().is_none());
        assert!(d.cache.len() < 50_000, "the cache kept to its budget");
        assert_eq!(d.len(), 50_000);
        for k in (0..50_000u64).step_by(997) {
            let cached = d.cache.get(&k).map(|t| t.state.clone());
            let state = match cached {
                Some(s) => s,
                None => d.stored(&k).expect("reads").expect("stored").state,
            };
            assert_eq!(state, format!("value of {k}"));
        }
        let mut seen = Vec::new();
        let mut last_group = 0;
        let each = |k: &u64, s: &String| {
            let g = crate::key_group::key_group_of(k, 128);
            assert!(g >= last_group, "by key group ascending");
            last_group = g;
            assert_eq!(s, &format!("value of {k}"));
            seen.push(*k);
            Ok(())
        };
        let ticks = std::cell::Cell::new(0);
        d.for_each(each, &|| ticks.set(ticks.get() + 1))
            .expect("iterates");
        assert!(ticks.get() > 0, "it said it works while it flushed");
        seen.sort_unstable();
        assert_eq!(seen, (0..50_000).collect::<Vec<_>>());
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stores_of_processes_that_are_gone_are_swept_and_live_ones_kept() {
        let dir = temp("sweep");
        // No process has pid u32::MAX - 1 (Linux pids stay below 2^22).
        let dead = dir.join(format!("op-0-{}-3", u32::MAX - 1));
        let live = dir.join(format!("op-0-{}-0", std::process::id()));
        let other = dir.join("not-a-store");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d).expect("creates");
        }
        let d = open(1 << 20, &dir);
        assert!(!dead.exists(), "a dead process's store is swept");
        assert!(live.exists() && other.exists(), "the rest is kept");
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn restored_entries_are_read_back_and_counted() {
        let dir = temp("restore");
        let mut d = open(1 << 20, &dir);
        for k in 0..10_000u64 {
            d.restore(k, k.to_string());
        }
        assert_eq!(d.len(), 10_000);
        let t = d.stored(&9_999).expect("reads").expect("stored");
        assert_eq!(t.state, "9999");
        let mut log = ChangeLog::default();
        let t = d.load(&20_000, &mut log, || "new".into()).expect("loads");
        assert_eq!(t.state, "new");
        assert_eq!(d.len(), 10_001);
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
