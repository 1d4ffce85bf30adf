//! Incremental checkpoints of a keyed operator subtask: the thread that writes its runs and
//! keeps its chain.
//!
//! Each keyed subtask that checkpoints incrementally has one such thread beside it
//! ([`ChainWriter`]). At a barrier the operator hands it, in chunks while it goes on with
//! its records, copies of the entries it changed since its previous checkpoint (a delta; see
//! `checkpoint::copy`); a chain starts from nothing, so the first delta of an instance holds every
//! key it has (a restored instance logs its restored keys as changed). Sometimes the operator
//! hands its whole state instead (`full`: a chain that broke, or a state with timers). The
//! thread encodes them, writes them as one sorted run
//! (`checkpoint::runs`) under `shared/<uid>-<subtask>/` of the job's run directory, and
//! answers the checkpoint's state write with the chain to reference: the last base and every
//! delta since. Once the deltas add up to the base's size (or the chain is long), a thread of
//! its own merges the chain into a new base, which takes the place of the runs it merged at the
//! next checkpoint after it is done: a restore reads a bounded chain, the bytes written stay
//! within about twice what changed, and checkpoints go on while a large state is merged.
//!
//! A chain never depends on a checkpoint completing: a delta follows the operator's previous
//! delta whatever became of that checkpoint, and the files it needs are referenced by its own
//! state file. A run that cannot be written fails its checkpoint and every delta after it,
//! until the operator hands everything again ([`ChainWriter::needs_base`]).
//!
//! It does not own what is copied and when (the keyed operator and `checkpoint::copy`), nor
//! deleting runs no checkpoint references (`store`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use super::runs::{self, RunRef};
use crate::state::changes::KeyedDelta;

/// Work for the chain's thread: encoding entries into the delta under way.
pub(crate) type Encode = Box<dyn FnOnce(&mut KeyedDelta) -> Result<(), String> + Send>;

/// A chain longer than this is merged into a new base whatever its size.
const MAX_CHAIN: usize = 64;

/// A checkpoint's entries are written as runs of at most about this many encoded bytes each
/// (sorted in memory, then written): what the thread holds at once, whatever the copy's size.
const SEGMENT_BYTES: usize = 16 << 20;

/// Chunks handed and not yet taken in beyond which the operator waits before copying more:
/// what the copy holds in chunks at once.
const MAX_IN_FLIGHT: usize = 4;

enum Cmd {
    /// Checkpoint `id`'s state follows; its runs go under `root`.
    Begin {
        id: u64,
        root: PathBuf,
    },
    Encode(Encode),
    /// The state of checkpoint `id` is all handed: write it (a base if `full`).
    Seal {
        id: u64,
        root: PathBuf,
        full: bool,
    },
}

/// What a checkpoint's state file references for one keyed subtask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chain {
    /// The base and the deltas after it, oldest first.
    pub(crate) runs: Vec<RunRef>,
    /// Bytes written for this checkpoint (its run, and a base merged since the last one).
    pub(crate) written: u64,
}

impl Chain {
    /// Bytes of every run the checkpoint references (what restoring it reads).
    pub(crate) fn size(&self) -> u64 {
        self.runs.iter().map(|r| r.len).sum()
    }
}

/// The answers of the chain's thread, by checkpoint id, and whether it has stopped.
#[derive(Default)]
struct Answers {
    done: BTreeMap<u64, Result<Chain, String>>,
    closed: bool,
}

type Shared = Arc<(Mutex<Answers>, Condvar)>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Answers> {
    s.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// The operator's handle on its chain's thread. Dropping it ends the thread once it has done
/// what it was given.
pub(crate) struct ChainWriter {
    tx: mpsc::Sender<Cmd>,
    answers: Shared,
    needs_base: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    /// The newest checkpoint whose state was all handed (sealed).
    sealed: Arc<AtomicU64>,
    /// Deltas the thread appended and emptied, for the operator to encode into again (their
    /// buffers go back and forth instead of being allocated and freed for every chunk).
    spares: Arc<Mutex<Vec<KeyedDelta>>>,
}

/// The chain of one checkpoint, taken when its state write asks: waits for the operator to
/// finish handing it, or gives up when `abandoned` says the subtask is going.
pub(crate) struct ChainPart {
    id: u64,
    answers: Shared,
    sealed: Arc<AtomicU64>,
}

impl std::fmt::Debug for ChainPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChainPart({})", self.id)
    }
}

impl ChainPart {
    /// The chain, once written; an error names why there is none.
    pub(crate) fn wait(self, abandoned: &dyn Fn() -> bool) -> Result<Chain, String> {
        let mut a = lock(&self.answers);
        loop {
            if let Some(r) = a.done.remove(&self.id) {
                return r;
            }
            if a.closed {
                return Err("the operator stopped before its state was written".into());
            }
            // A state all handed is written whatever becomes of the subtask (the thread goes on
            // until it is done); one not handed yet never will be.
            if abandoned() && self.sealed.load(Ordering::Acquire) < self.id {
                return Err("the subtask stopped before its state was copied".into());
            }
            a = self
                .answers
                .1
                .wait_timeout(a, Duration::from_millis(20))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl ChainWriter {
    /// Starts the chain's thread of operator `uid`'s subtask `subtask`.
    pub(crate) fn start(uid: &str, subtask: usize) -> Result<Self, String> {
        static NONCE: AtomicU64 = AtomicU64::new(0);
        let (tx, rx) = mpsc::channel();
        let answers: Shared = Default::default();
        let needs_base = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let thread = ChainThread {
            dir: format!("shared/{uid}-{subtask}"),
            // Files of an earlier instance of this subtask (a restart) keep their names.
            nonce: format!(
                "{}-{}",
                std::process::id(),
                NONCE.fetch_add(1, Ordering::Relaxed)
            ),
            delta: KeyedDelta::default(),
            current: None,
            segments: Vec::new(),
            failed: None,
            chain: Vec::new(),
            broken: false,
            base_len: 0,
            deltas_len: 0,
            merged: 0,
            merging: None,
            merges: 0,
            answers: answers.clone(),
            needs_base: needs_base.clone(),
            in_flight: in_flight.clone(),
        };
        std::thread::Builder::new()
            .name("weir-state-runs".into())
            .spawn(move || thread.run(rx))
            .map_err(|e| format!("cannot start the state writer thread: {e}"))?;
        Ok(ChainWriter {
            tx,
            answers,
            needs_base,
            in_flight,
            sealed: Arc::new(AtomicU64::new(0)),
            spares: Arc::default(),
        })
    }

    /// An empty delta to encode a chunk into (one the thread gave back, if there is one).
    pub(crate) fn spare(&self) -> KeyedDelta {
        self.spares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Hands entries the operator encoded (or why it could not) to the checkpoint's run
    /// under way; the delta comes back emptied ([`spare`](Self::spare)).
    pub(crate) fn hand(&self, part: Result<KeyedDelta, String>) {
        let spares = self.spares.clone();
        self.encode(Box::new(move |d| {
            let mut part = part?;
            let appended = d.append(&part);
            part.clear();
            let mut spares = spares.lock().unwrap_or_else(|p| p.into_inner());
            if spares.len() <= MAX_IN_FLIGHT {
                spares.push(part);
            }
            appended
        }));
    }

    /// Checkpoint `id`'s state follows (its runs under `root`).
    pub(crate) fn begin(&self, id: u64, root: &Path) {
        let _ = self.tx.send(Cmd::Begin {
            id,
            root: root.to_owned(),
        });
    }

    /// Whether enough chunks wait to be encoded that the operator should copy no more now.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT
    }

    /// Whether the next checkpoint must hand the whole state: a run could not be written.
    pub(crate) fn needs_base(&self) -> bool {
        self.needs_base.load(Ordering::Acquire)
    }

    /// Has `f` encode entries into the checkpoint's run under way.
    pub(crate) fn encode(&self, f: Encode) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // The thread stops only when this handle goes.
        let _ = self.tx.send(Cmd::Encode(f));
    }

    /// Checkpoint `id`'s state is all handed (`full`: everything, a new chain): write its run
    /// under `root`.
    pub(crate) fn seal(&mut self, id: u64, root: &Path, full: bool) {
        if full {
            self.needs_base.store(false, Ordering::Release);
        }
        self.sealed.fetch_max(id, Ordering::AcqRel);
        let _ = self.tx.send(Cmd::Seal {
            id,
            root: root.to_owned(),
            full,
        });
    }

    /// The chain of checkpoint `id`, for its state write to wait on.
    pub(crate) fn part(&self, id: u64) -> ChainPart {
        ChainPart {
            id,
            answers: self.answers.clone(),
            sealed: self.sealed.clone(),
        }
    }
}

struct ChainThread {
    /// `shared/<uid>-<subtask>`.
    dir: String,
    nonce: String,
    /// The entries being handed, not yet written.
    delta: KeyedDelta,
    /// The checkpoint being handed, and where its runs go.
    current: Option<(u64, PathBuf)>,
    /// Its runs written so far (each at most about `SEGMENT_BYTES`).
    segments: Vec<RunRef>,
    /// Why the state being handed cannot be written.
    failed: Option<String>,
    chain: Vec<RunRef>,
    /// A run could not be written: deltas fail until a full run.
    broken: bool,
    base_len: u64,
    deltas_len: u64,
    /// Bytes of a base merged since the last answer.
    merged: u64,
    /// A merge under way, and how many were started.
    merging: Option<Merging>,
    merges: u64,
    answers: Shared,
    needs_base: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
}

impl ChainThread {
    fn run(mut self, rx: mpsc::Receiver<Cmd>) {
        // However the thread ends, a state write waiting on it is told.
        struct Closing(Shared);
        impl Drop for Closing {
            fn drop(&mut self) {
                lock(&self.0).closed = true;
                self.0 .1.notify_all();
            }
        }
        let _closing = Closing(self.answers.clone());
        while let Ok(cmd) = rx.recv() {
            match cmd {
                Cmd::Begin { id, root } => {
                    self.current = Some((id, root));
                    self.segments.clear();
                    self.failed = None;
                    self.delta.clear();
                }
                Cmd::Encode(f) => {
                    if self.failed.is_none() {
                        // A state's `Serialize` that panics fails this checkpoint, named, and
                        // leaves the thread (and the operator's copies) going.
                        let delta = &mut self.delta;
                        let encoded =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                                f(delta)
                            }));
                        match encoded {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                self.failed = Some(format!("cannot encode the state: {e}"))
                            }
                            Err(p) => {
                                self.failed = Some(format!(
                                    "encoding the state panicked: {}",
                                    crate::error::panic_message(&*p)
                                ))
                            }
                        }
                    }
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    if self.delta.bytes.len() >= SEGMENT_BYTES {
                        self.write_segment();
                    }
                }
                Cmd::Seal { id, root, full } => {
                    let answer = self.seal(id, &root, full);
                    let ok = answer.is_ok();
                    {
                        let mut a = lock(&self.answers);
                        a.done.insert(id, answer);
                        // Answers nobody took (a checkpoint abandoned) do not pile up.
                        while a.done.len() > 16 {
                            a.done.pop_first();
                        }
                    }
                    self.answers.1.notify_all();
                    if ok {
                        self.maybe_materialize(&root);
                    }
                }
            }
        }
    }

    /// Writes the entries handed so far as one run of the checkpoint being handed.
    fn write_segment(&mut self) {
        let written = match (&self.failed, &self.current) {
            (Some(_), _) => None,
            (None, None) => Some(Err("state handed outside a checkpoint".to_owned())),
            (None, Some((id, root))) => {
                let n = self.segments.len();
                let file = format!("{}/{id}-{}-{n}.run", self.dir, self.nonce);
                Some(runs::write(root, &file, &self.delta))
            }
        };
        match written {
            Some(Ok(run)) => self.segments.push(run),
            Some(Err(e)) => self.failed = Some(e),
            None => {}
        }
        // The buffers are kept for the next segment: the thread's memory stays one segment.
        self.delta.clear();
    }

    fn seal(&mut self, id: u64, root: &Path, full: bool) -> Result<Chain, String> {
        if self.current.as_ref().is_none_or(|(c, _)| *c != id) {
            // Handed without a beginning (cannot happen but through a bug): written whole.
            self.current = Some((id, root.to_owned()));
        }
        if self.segments.is_empty() || !self.delta.index.is_empty() || self.delta.own.is_some() {
            self.write_segment();
        }
        self.current = None;
        let segments = std::mem::take(&mut self.segments);
        if let Some(e) = self.failed.take() {
            return Err(self.broken(e));
        }
        if !full && self.broken {
            return Err(
                "an earlier state run of this operator was not written: its next checkpoint writes its whole state".into(),
            );
        }
        self.take_merge(id, root);
        if full {
            self.needs_base.store(false, Ordering::Release);
            self.broken = false;
            self.chain.clear();
        }
        let len: u64 = segments.iter().map(|r| r.len).sum();
        if self.chain.is_empty() {
            // The first runs of a chain are its base.
            self.base_len = len;
            self.deltas_len = 0;
        } else {
            self.deltas_len += len;
        }
        let written = len + std::mem::take(&mut self.merged);
        self.chain.extend(segments);
        Ok(Chain {
            runs: self.chain.clone(),
            written,
        })
    }

    /// The chain cannot go on: deltas fail until the operator hands a base.
    fn broken(&mut self, reason: String) -> String {
        self.broken = true;
        self.chain.clear();
        self.needs_base.store(true, Ordering::Release);
        reason
    }

    /// Starts merging the chain into a new base, on a thread of its own, once its deltas
    /// outweigh its base or it is long (and no merge is under way).
    fn maybe_materialize(&mut self, root: &Path) {
        let due = self.chain.len() > 1
            && (self.deltas_len >= self.base_len || self.chain.len() > MAX_CHAIN);
        if !due || self.merging.is_some() {
            return;
        }
        self.merges += 1;
        // Named so that retention never takes it for a run of a checkpoint (it is named for
        // the checkpoint that first references it when it takes its place).
        let file = format!("{}/merging-{}-{}.run", self.dir, self.nonce, self.merges);
        let (root, prefix) = (root.to_owned(), self.chain.clone());
        let inputs = prefix.clone();
        let handle = std::thread::Builder::new()
            .name("weir-state-merge".into())
            .spawn(move || runs::materialize(&root, &inputs, &file));
        match handle {
            Ok(handle) => self.merging = Some(Merging { prefix, handle }),
            Err(e) => tracing::warn!(error = %e, "cannot start merging a state chain"),
        }
    }

    /// A merge that has finished takes the place of the runs it merged, named for checkpoint
    /// `id` (the first to reference it; in progress, so retention keeps it).
    fn take_merge(&mut self, id: u64, root: &Path) {
        if !self
            .merging
            .as_ref()
            .is_some_and(|m| m.handle.is_finished())
        {
            return;
        }
        let Some(Merging { prefix, handle }) = self.merging.take() else {
            return;
        };
        let merged = match handle.join() {
            Ok(Ok(base)) => base,
            Ok(Err(e)) => {
                // The chain stays as it was, and is merged again later.
                tracing::warn!(error = %e, "cannot merge a state chain into a new base");
                return;
            }
            Err(_) => {
                tracing::warn!("merging a state chain panicked");
                return;
            }
        };
        // The chain may have started again meanwhile (a full copy, a broken chain).
        if !self.chain.starts_with(&prefix) {
            let _ = std::fs::remove_file(root.join(&merged.file));
            return;
        }
        let file = format!("{}/{id}-{}-m{}.base", self.dir, self.nonce, self.merges);
        let moved = std::fs::rename(root.join(&merged.file), root.join(&file))
            .and_then(|()| crate::checkpoint::store::sync_dir(&root.join(&self.dir)));
        if let Err(e) = moved {
            tracing::warn!(error = %e, "cannot put a merged state base in place");
            return;
        }
        let base = RunRef { file, ..merged };
        self.chain.splice(..prefix.len(), [base.clone()]);
        self.base_len = base.len;
        self.deltas_len = self.chain[1..].iter().map(|r| r.len).sum();
        self.merged += base.len;
    }
}

/// A merge of a chain's first runs under way.
struct Merging {
    prefix: Vec<RunRef>,
    handle: std::thread::JoinHandle<Result<RunRef, String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(d: &mut KeyedDelta, from: u64, to: u64, tag: &str) -> Result<(), String> {
        for k in from..to {
            d.push((k % 8) as usize, &k, Some(&(k, format!("{tag}{k}"))))?;
        }
        Ok(())
    }

    type Payload = Vec<(usize, Vec<(u64, String)>)>;

    fn restored(root: &Path, chain: &Chain) -> Vec<(u64, String)> {
        let p: Payload =
            crate::checkpoint::decode(&runs::payload(root, &chain.runs).expect("reads"))
                .expect("decodes");
        let mut all: Vec<_> = p.into_iter().flat_map(|(_, e)| e).collect();
        all.sort();
        all
    }

    #[test]
    fn deltas_follow_a_base_and_merge_into_a_new_one() {
        let root = std::env::temp_dir().join(format!("weir-chain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut w = ChainWriter::start("op", 0).expect("starts");
        assert!(!w.needs_base(), "a chain starts from nothing");
        w.encode(Box::new(|d| entries(d, 0, 100, "a")));
        w.seal(1, &root, false);
        let c1 = w.part(1).wait(&|| false).expect("a base");
        assert_eq!(c1.runs.len(), 1);
        assert!(!w.needs_base());
        w.encode(Box::new(|d| entries(d, 0, 10, "b")));
        w.seal(2, &root, false);
        let c2 = w.part(2).wait(&|| false).expect("a delta");
        assert_eq!(c2.runs.len(), 2);
        assert!(c2.written < c1.written / 5, "{c2:?} {c1:?}");
        let mut expected: Vec<(u64, String)> = (0..100)
            .map(|k| (k, format!("{}{k}", if k < 10 { "b" } else { "a" })))
            .collect();
        assert_eq!(restored(&root, &c2), expected);
        // Deltas that add up to the base's size make the next checkpoint reference a base.
        for id in 3..20 {
            w.encode(Box::new(move |d| entries(d, 10, 20, &format!("c{id}-"))));
            w.seal(id, &root, false);
            let c = w.part(id).wait(&|| false).expect("a delta");
            // Merged on a thread of its own: bounded, whenever the merge lands.
            assert!(
                c.runs.len() <= 20,
                "the chain stays bounded: {}",
                c.runs.len()
            );
        }
        let last = w.part(19);
        w.encode(Box::new(|d| entries(d, 99, 100, "z")));
        w.seal(20, &root, false);
        let c = w.part(20).wait(&|| false).expect("a delta");
        drop(last);
        for (k, v) in expected.iter_mut() {
            if (10..20).contains(k) {
                *v = format!("c19-{k}");
            }
            if *k == 99 {
                *v = "z99".into();
            }
        }
        assert_eq!(restored(&root, &c), expected);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_run_that_cannot_be_written_fails_until_a_base() {
        let root = std::env::temp_dir().join(format!("weir-chain-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("creates");
        let mut w = ChainWriter::start("op", 0).expect("starts");
        w.encode(Box::new(|d| entries(d, 0, 10, "a")));
        w.seal(1, &root, true);
        w.part(1).wait(&|| false).expect("a base");
        // `shared` made a file: nothing can be written under it.
        std::fs::remove_dir_all(root.join("shared")).expect("removes");
        std::fs::write(root.join("shared"), b"x").expect("writes");
        w.encode(Box::new(|d| entries(d, 0, 1, "b")));
        w.seal(2, &root, false);
        assert!(w.part(2).wait(&|| false).is_err());
        std::fs::remove_file(root.join("shared")).expect("removes");
        w.encode(Box::new(|d| entries(d, 0, 1, "c")));
        w.seal(3, &root, false);
        let err = w
            .part(3)
            .wait(&|| false)
            .expect_err("a delta after a lost run");
        assert!(err.contains("whole state"), "{err}");
        assert!(w.needs_base());
        w.encode(Box::new(|d| entries(d, 0, 10, "d")));
        w.seal(4, &root, true);
        let c = w.part(4).wait(&|| false).expect("a base heals the chain");
        assert_eq!(restored(&root, &c).len(), 10);
        // A part whose checkpoint is never handed gives up when told to.
        assert!(w.part(5).wait(&|| true).is_err());
        drop(w);
        let _ = std::fs::remove_dir_all(&root);
    }
}
