//! The blackhole sink: what a query emitted, kept as a count and an order-independent
//! checksum, exactly once under checkpoints (the suite's `'connector' = 'blackhole'` keeps
//! nothing; a checksum lets a benchmark run show it computed the right results).

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use std::sync::{Arc, Mutex, MutexGuard};
use weir::error::SinkError;
use weir::sink::{Sink, SinkContext};
use weir::stream::{DataStream, SinkStream};
use weir::Data;

/// A stable 64-bit hash of `t` (the same in every run of the same build): FxHash of its
/// `Hash` form, then a 64-bit finalizer so that sums of hashes spread over all bits.
///
/// ```
/// use weir_nexmark::record_hash;
/// assert_eq!(record_hash(&(1u64, "a")), record_hash(&(1u64, "a")));
/// assert_ne!(record_hash(&1u64), record_hash(&2u64));
/// ```
pub fn record_hash<T: Hash + ?Sized>(t: &T) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    t.hash(&mut h);
    // splitmix64's finalizer.
    let mut z = h.finish().wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A count of results and the wrapping sum of their [`record_hash`]es: equal for two
/// multisets of results exactly when they are (but for hash collisions), in any order.
///
/// ```
/// use weir_nexmark::BlackholeTotals;
/// let a = BlackholeTotals::of(&[1u64, 2, 3]);
/// let b = BlackholeTotals::of(&[3u64, 1, 2]);
/// assert_eq!(a, b);
/// assert_eq!(a.results, 3);
/// assert_ne!(a, BlackholeTotals::of(&[1u64, 2, 2]));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlackholeTotals {
    /// Results counted.
    pub results: u64,
    /// The wrapping sum of their hashes.
    pub checksum: u64,
}

impl BlackholeTotals {
    /// The totals of `items`.
    ///
    /// ```
    /// let t = weir_nexmark::BlackholeTotals::of(&["x".to_string()]);
    /// assert_eq!(t.results, 1);
    /// ```
    pub fn of<'a, T: Hash + 'a>(items: impl IntoIterator<Item = &'a T>) -> Self {
        let mut t = BlackholeTotals::default();
        for x in items {
            t.add(x);
        }
        t
    }

    /// Counts one more result.
    ///
    /// ```
    /// let mut t = weir_nexmark::BlackholeTotals::default();
    /// t.add(&7u64);
    /// assert_eq!(t, weir_nexmark::BlackholeTotals::of(&[7u64]));
    /// ```
    #[inline]
    pub fn add<T: Hash + ?Sized>(&mut self, x: &T) {
        self.results += 1;
        self.checksum = self.checksum.wrapping_add(record_hash(x));
    }

    /// Adds `other`'s results to these.
    ///
    /// ```
    /// use weir_nexmark::BlackholeTotals;
    /// let mut t = BlackholeTotals::of(&[1u64]);
    /// t.merge(BlackholeTotals::of(&[2u64]));
    /// assert_eq!(t, BlackholeTotals::of(&[1u64, 2]));
    /// ```
    pub fn merge(&mut self, other: BlackholeTotals) {
        self.results += other.results;
        self.checksum = self.checksum.wrapping_add(other.checksum);
    }
}

/// A sink that drops every record and keeps their [`BlackholeTotals`], over all its
/// subtasks. With checkpoints on, a subtask's totals since a checkpoint count only once that
/// checkpoint completes (two-phase commit, as the collect sink), so a job that restarts from a
/// checkpoint still counts every result once.
///
/// ```
/// use weir_nexmark::{Blackhole, BlackholeTotals};
///
/// let env = weir::Env::new();
/// let hole = Blackhole::new();
/// hole.attach(env.generate(1_000, |i| i).set_parallelism(2));
/// env.execute("blackhole-doc").unwrap();
/// assert_eq!(hole.totals(), BlackholeTotals::of(&(0..1_000u64).collect::<Vec<_>>()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Blackhole {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    totals: BlackholeTotals,
    /// (subtask, checkpoint) transactions already counted: commits are idempotent.
    committed: HashSet<(usize, u64)>,
}

impl Blackhole {
    /// A blackhole with nothing counted.
    ///
    /// ```
    /// assert_eq!(weir_nexmark::Blackhole::new().totals().results, 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends `stream` in this blackhole (a sink named `blackhole`).
    ///
    /// ```
    /// let env = weir::Env::new();
    /// let hole = weir_nexmark::Blackhole::new();
    /// hole.attach(env.generate(10, |i| i * 2)).uid("sink");
    /// env.execute("attach-doc").unwrap();
    /// assert_eq!(hole.totals().results, 10);
    /// ```
    pub fn attach<T: Data + Hash>(&self, stream: DataStream<T>) -> SinkStream {
        let shared = self.shared.clone();
        stream.add_sink("blackhole", move |cx: &SinkContext| {
            Ok(BlackholeInstance {
                shared: shared.clone(),
                subtask: cx.subtask,
                transactional: cx.checkpointing,
                staged: BlackholeTotals::default(),
                pending: BTreeMap::new(),
            })
        })
    }

    /// What was counted so far (committed, with checkpoints on).
    ///
    /// ```
    /// assert_eq!(weir_nexmark::Blackhole::new().totals(), Default::default());
    /// ```
    pub fn totals(&self) -> BlackholeTotals {
        lock(&self.shared).totals
    }
}

/// One subtask of a [`Blackhole`].
struct BlackholeInstance {
    shared: Arc<Mutex<Shared>>,
    subtask: usize,
    transactional: bool,
    /// Since the last checkpoint barrier.
    staged: BlackholeTotals,
    /// Pre-committed per checkpoint, not yet known complete.
    pending: BTreeMap<u64, BlackholeTotals>,
}

impl BlackholeInstance {
    fn commit_up_to(&mut self, id: u64) {
        let ready: Vec<u64> = self.pending.range(..=id).map(|(k, _)| *k).collect();
        let mut shared = lock(&self.shared);
        for k in ready {
            if let Some(t) = self.pending.remove(&k) {
                if shared.committed.insert((self.subtask, k)) {
                    shared.totals.merge(t);
                }
            }
        }
    }

    fn encode_error(message: String) -> SinkError {
        SinkError::Encode {
            path: "<blackhole>".into(),
            message,
        }
    }
}

impl<T: Hash + Send + 'static> Sink<T> for BlackholeInstance {
    #[inline]
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        for x in batch.drain(..) {
            self.staged.add(&x);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if !self.transactional {
            let staged = std::mem::take(&mut self.staged);
            lock(&self.shared).totals.merge(staged);
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        if !self.transactional {
            return Ok(None);
        }
        let staged = std::mem::take(&mut self.staged);
        self.pending.insert(checkpoint, staged);
        let state: Vec<(u64, BlackholeTotals)> =
            self.pending.iter().map(|(k, v)| (*k, *v)).collect();
        weir::checkpoint::encode(&state)
            .map(Some)
            .map_err(Self::encode_error)
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if !self.transactional {
            return Ok(());
        }
        if checkpoint == weir::checkpoint::FINAL_COMMIT {
            let staged = std::mem::take(&mut self.staged);
            self.pending.insert(checkpoint, staged);
        }
        self.commit_up_to(checkpoint);
        Ok(())
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.staged = BlackholeTotals::default();
        self.pending.clear();
        let Some(state) = restored else {
            return Ok(());
        };
        let pending: Vec<(u64, BlackholeTotals)> =
            weir::checkpoint::decode(state).map_err(Self::encode_error)?;
        self.pending.extend(pending);
        // The restored checkpoint is complete: everything it set aside is committed.
        self.commit_up_to(u64::MAX - 1);
        Ok(())
    }
}

/// The shared totals' lock; a panicking sink leaves them whole (each update is one
/// statement), so a poisoned lock is taken as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
