//! Storage faults: the files of checkpoints under a directory fail to be written, with the I/O
//! error of a full or read-only disk, for as many checkpoints as a test says, from the moment
//! it says so (after checkpoint `n` completed, say: an event, not a time).
//!
//! The checkpoint store asks [`write_fault`] before it writes each file of a checkpoint
//! directory (`chk-<id>`: the subtasks' state files and the coordinator's `_metadata`). A
//! checkpoint is *doomed* when its first file is written while a [`StorageFaults`] of an
//! enclosing directory still has checkpoints to fail; every file of a doomed checkpoint fails.
//! A checkpoint that wrote a file before [`StorageFaults::fail_next`] was called is never
//! doomed, so `fail_next(k)` fails exactly the next `k` checkpoints, whatever was in flight.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// What is wrong with the disk of a [`StorageFaults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskTrouble {
    /// No space left on the device (`ENOSPC`): the temporary file is created and half of it
    /// written, then the write fails, as on a disk that just filled up.
    Full,
    /// A read-only file system (`EROFS`): creating the file fails.
    ReadOnly,
}

impl DiskTrouble {
    /// The error the operating system gives.
    pub(crate) fn error(self) -> io::Error {
        #[cfg(unix)]
        {
            // ENOSPC and EROFS: the same numbers on Linux, macOS and the BSDs.
            io::Error::from_raw_os_error(match self {
                DiskTrouble::Full => 28,
                DiskTrouble::ReadOnly => 30,
            })
        }
        #[cfg(not(unix))]
        {
            match self {
                DiskTrouble::Full => {
                    io::Error::new(io::ErrorKind::StorageFull, "no space left on device")
                }
                DiskTrouble::ReadOnly => {
                    io::Error::new(io::ErrorKind::ReadOnlyFilesystem, "read-only file system")
                }
            }
        }
    }
}

/// Checkpoint directories remembered as written to, per [`StorageFaults`] (older ones are
/// forgotten: a job writes one checkpoint at a time, a few at most).
const REMEMBERED: usize = 256;

/// Makes the checkpoints written under a directory fail as on a full or read-only disk (see
/// the module documentation): for a test of what a job does when its checkpoint storage
/// fails mid-run. Clones share the faults; they apply to every job whose checkpoint
/// directory is `dir` or under it, while one clone is alive.
///
/// ```
/// use std::time::Duration;
/// use weir_testing::{wait_for_checkpoint, DiskTrouble, StorageFaults};
/// let dir = std::env::temp_dir().join(format!("weir-doc-storage-{}", std::process::id()));
/// let disk = StorageFaults::new(&dir, DiskTrouble::Full);
/// let mut cfg = weir::EnvConfig::default();
/// cfg.checkpoint.interval = Some(Duration::from_millis(10));
/// cfg.checkpoint.directory = dir.clone();
/// cfg.checkpoint.tolerable_failed_checkpoints = 2;
/// cfg.stderr_warnings = false;
/// let env = weir::Env::with_config(cfg);
/// env.generate(u64::MAX, |i| i).add_sink("paced", |_| Ok(weir_testing::PacedSink::new(1e5)));
/// let job = env.start("storage-doc").unwrap();
/// wait_for_checkpoint(&job, 1, Duration::from_secs(30)).unwrap();
/// disk.fail_next(2);
/// // The two checkpoints fail (tolerated), then the disk has room again.
/// let stats = wait_for_checkpoint(&job, 2, Duration::from_secs(30)).unwrap();
/// assert_eq!(disk.failed_checkpoints().len(), 2);
/// assert!(stats.number_of_failed_checkpoints >= 2 && stats.num_restarts == 0);
/// job.cancel();
/// let _ = job.wait();
/// let _ = std::fs::remove_dir_all(&dir);
/// ```
#[derive(Debug, Clone)]
pub struct StorageFaults {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    /// `dir` canonicalized, if it existed when the faults were made.
    canonical: Option<PathBuf>,
    trouble: DiskTrouble,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Checkpoints still to doom.
    budget: u64,
    /// Checkpoint directories that had a file written (or tried), newest last.
    seen: VecDeque<PathBuf>,
    /// Doomed checkpoint directories whose writes fail.
    doomed: Vec<PathBuf>,
    /// Every checkpoint doomed so far, in order: (directory, id).
    failed: Vec<(PathBuf, u64)>,
    /// Writes failed so far.
    failed_writes: u64,
}

/// Every live [`StorageFaults`], and whether there is any (the store's fast path).
static REGISTRY: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());
static ANY: AtomicBool = AtomicBool::new(false);

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only this module's bookkeeping is behind these locks, consistent at every point.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StorageFaults {
    /// Faults of kind `trouble` for the checkpoints under `dir` (a job's
    /// `CheckpointConfig::directory`, or a directory above it); none fail until
    /// [`fail_next`](Self::fail_next).
    pub fn new(dir: impl Into<PathBuf>, trouble: DiskTrouble) -> Self {
        let dir = dir.into();
        let inner = Arc::new(Inner {
            canonical: dir.canonicalize().ok(),
            dir,
            trouble,
            state: Mutex::new(State::default()),
        });
        let mut registry = locked(&REGISTRY);
        registry.retain(|w| w.strong_count() > 0);
        registry.push(Arc::downgrade(&inner));
        ANY.store(true, Ordering::SeqCst);
        StorageFaults { inner }
    }

    /// Fails the next `checkpoints` checkpoints: those whose first file is written from now
    /// on (`u64::MAX`: every one, until [`heal`](Self::heal)).
    ///
    /// ```
    /// use weir_testing::{DiskTrouble, StorageFaults};
    /// let disk = StorageFaults::new("/tmp/weir-doc-fail-next", DiskTrouble::ReadOnly);
    /// disk.fail_next(3);
    /// assert_eq!(disk.pending(), 3);
    /// disk.heal();
    /// assert_eq!(disk.pending(), 0);
    /// ```
    pub fn fail_next(&self, checkpoints: u64) {
        let mut s = locked(&self.inner.state);
        s.budget = s.budget.saturating_add(checkpoints);
    }

    /// The disk is fine again: no further checkpoint fails, and the files still to be written
    /// of a checkpoint that failed are written (it has failed already).
    pub fn heal(&self) {
        let mut s = locked(&self.inner.state);
        s.budget = 0;
        s.doomed.clear();
    }

    /// How many more checkpoints will fail.
    pub fn pending(&self) -> u64 {
        locked(&self.inner.state).budget
    }

    /// The ids of the checkpoints failed so far, in the order their first file failed.
    pub fn failed_checkpoints(&self) -> Vec<u64> {
        locked(&self.inner.state)
            .failed
            .iter()
            .map(|(_, id)| *id)
            .collect()
    }

    /// How many file writes failed so far.
    pub fn failed_writes(&self) -> u64 {
        locked(&self.inner.state).failed_writes
    }

    /// Whether `dir` is under this fault's directory.
    fn covers(&self, dir: &Path) -> bool {
        dir.starts_with(&self.inner.dir)
            || self
                .inner
                .canonical
                .as_ref()
                .is_some_and(|c| dir.starts_with(c))
    }

    /// A write into checkpoint directory `chk` (checkpoint `id`): whether it fails.
    fn write(&self, chk: &Path, id: u64) -> bool {
        let mut s = locked(&self.inner.state);
        let fails = if s.doomed.iter().any(|d| d == chk) {
            true
        } else if s.seen.iter().any(|d| d == chk) {
            false
        } else {
            if s.seen.len() == REMEMBERED {
                s.seen.pop_front();
            }
            s.seen.push_back(chk.to_owned());
            let doom = s.budget > 0;
            if doom {
                s.budget -= 1;
                s.doomed.push(chk.to_owned());
                s.failed.push((chk.to_owned(), id));
                // Doomed directories of earlier checkpoints get no more writes.
                if s.doomed.len() > REMEMBERED {
                    s.doomed.remove(0);
                }
            }
            doom
        };
        if fails {
            s.failed_writes += 1;
        }
        fails
    }
}

/// Whether the write of `file` (a file of a checkpoint directory `chk-<id>`) is to fail, and
/// how: the store asks before it writes each file of a checkpoint. `None` when no
/// [`StorageFaults`] covers the file (at the cost of one atomic load when there is none).
pub(crate) fn write_fault(file: &Path) -> Option<DiskTrouble> {
    if !ANY.load(Ordering::SeqCst) {
        return None;
    }
    let chk = file.parent()?;
    let id: u64 = chk
        .file_name()?
        .to_str()?
        .strip_prefix("chk-")?
        .parse()
        .ok()?;
    let live: Vec<StorageFaults> = {
        let mut registry = locked(&REGISTRY);
        registry.retain(|w| w.strong_count() > 0);
        if registry.is_empty() {
            ANY.store(false, Ordering::SeqCst);
        }
        registry
            .iter()
            .filter_map(Weak::upgrade)
            .map(|inner| StorageFaults { inner })
            .collect()
    };
    // Every fault covering the file keeps its account; the first that fails says how.
    let mut trouble = None;
    for fault in live.iter().filter(|f| f.covers(chk)) {
        if fault.write(chk, id) {
            trouble = trouble.or(Some(fault.inner.trouble));
        }
    }
    let trouble = trouble?;
    tracing::warn!(file = %file.display(), checkpoint = id, ?trouble, "injecting a storage fault");
    Some(trouble)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_checkpoints_fail_whole_and_one_in_flight_does_not() {
        let root = std::env::temp_dir().join(format!("weir-storage-unit-{}", std::process::id()));
        let disk = StorageFaults::new(&root, DiskTrouble::Full);
        let file =
            |id: u64, name: &str| root.join("job/run-1").join(format!("chk-{id}")).join(name);
        // Checkpoint 1 is in flight (a file written) when the faults are armed.
        assert_eq!(write_fault(&file(1, "a-0.state")), None);
        disk.fail_next(2);
        assert_eq!(
            write_fault(&file(1, "a-1.state")),
            None,
            "in flight: not doomed"
        );
        assert_eq!(write_fault(&file(1, "_metadata")), None);
        assert_eq!(write_fault(&file(2, "a-0.state")), Some(DiskTrouble::Full));
        assert_eq!(
            write_fault(&file(2, "_metadata")),
            Some(DiskTrouble::Full),
            "all of it"
        );
        assert_eq!(write_fault(&file(3, "_metadata")), Some(DiskTrouble::Full));
        assert_eq!(write_fault(&file(4, "a-0.state")), None, "room again");
        assert_eq!(disk.failed_checkpoints(), vec![2, 3]);
        assert_eq!(disk.failed_writes(), 3);
        // Elsewhere, and outside checkpoint directories: never.
        disk.fail_next(u64::MAX);
        assert_eq!(write_fault(Path::new("/elsewhere/chk-9/_metadata")), None);
        assert_eq!(write_fault(&root.join("savepoint/_metadata")), None);
        assert_eq!(write_fault(&file(5, "_metadata")), Some(DiskTrouble::Full));
        disk.heal();
        assert_eq!(write_fault(&file(5, "a-0.state")), None, "healed");
        assert_eq!(write_fault(&file(6, "a-0.state")), None);
        assert!(DiskTrouble::Full
            .error()
            .to_string()
            .contains("No space left"));
        drop(disk);
        assert_eq!(
            write_fault(&file(7, "_metadata")),
            None,
            "gone with its last clone"
        );
    }
}
