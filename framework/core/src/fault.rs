//! Fault injection, the mechanism (users meet it through the `weir-testing` crate): make operator `uid`
//! (subtask `i`, or any) fail at its `K`-th record (0-based, counted per operator instance in the current run) by
//! panicking, hanging, or stopping its arbiter thread — or at its snapshot of a checkpoint
//! ([`FaultPoint`]). Each fault fires once per plan, even
//! across restarts; a hung subtask is released (it then panics) when its job stops or
//! restarts, so no thread is left hanging after a test. Checkpoint storage fails on demand
//! with [`StorageFaults`] (module `storage`).
//!
//! ```
//! use weir_testing::{Fault, FaultKind, FaultPlan};
//! let plan = FaultPlan::new(vec![Fault::new("flat_map", FaultKind::Panic, 500_000)]);
//! let mut cfg = weir::EnvConfig::default();
//! cfg.faults = plan.clone();
//! assert_eq!(plan.fired(), 0);
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

thread_local! {
    /// This thread's arbiter was stopped by an injected fault.
    static ARBITER_STOPPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether an injected fault stopped this thread's arbiter: its subtasks take no more work
/// (a stopped arbiter's loop polls its tasks a few more times before it ends, and a subtask
/// with its input queued could otherwise finish in those polls, which a dead thread never
/// would).
pub(crate) fn arbiter_stopping() -> bool {
    ARBITER_STOPPING.with(|s| s.get())
}

mod storage;

pub(crate) use storage::write_fault;
pub use storage::{DiskTrouble, StorageFaults};

/// How an injected fault fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Panic in user code.
    Panic,
    /// Stop answering: the subtask blocks its thread (caught by the heartbeat timeout).
    Hang,
    /// Stop the arbiter thread the subtask runs on (every subtask on it is lost).
    StopArbiter,
    /// Block the thread this long, then go on as if nothing happened: a primary that was
    /// declared dead (and fenced) wakes up and keeps emitting, which must change nothing.
    Pause(Duration),
}

/// Where in its operator instance's work a [`Fault`] fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultPoint {
    /// Before a batch of records: the one that holds record `at_record` (the default).
    Record,
    /// When the instance snapshots its state at a checkpoint barrier, before it acknowledges
    /// the checkpoint: the sources upstream have taken their snapshots (and acknowledged),
    /// the sinks downstream have not. `at_record` is not used; with
    /// [`Fault::after_checkpoints`], the first snapshot once that many checkpoints completed.
    /// Operators and sinks (not sources).
    Snapshot,
    /// As [`Snapshot`](Self::Snapshot), at the snapshot of a checkpoint whose states are
    /// handed over in memory: a live rescale's (`JobMonitor::rescale`) or a fast restart's
    /// (`JobMonitor::replace`).
    HandOver,
}

/// One fault.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The operator's uid.
    pub uid: String,
    /// The subtask, or any.
    pub subtask: Option<usize>,
    /// Fire at this record (0-based) of the operator instance.
    pub at_record: u64,
    /// How.
    pub kind: FaultKind,
    /// Fire only once this many checkpoints of the job have completed (then at the first
    /// batch at or after `at_record`): a fault tied to an event, not to how fast the job ran.
    pub after_checkpoints: Option<u64>,
    /// Fire only once this many backups of the instance's subtask have been started (then at
    /// the first batch at or after `at_record`): see [`Fault::after_backups_started`].
    pub after_backups_started: Option<u64>,
    /// Where it fires: at a record (the default) or at a checkpoint's snapshot.
    pub point: FaultPoint,
    /// Fires only in a promoted backup (an instance that took over from its failed primary).
    pub in_promoted: bool,
    fired: Arc<AtomicBool>,
}

impl Fault {
    /// A fault of `uid` (any subtask) at record `at_record`.
    pub fn new(uid: &str, kind: FaultKind, at_record: u64) -> Self {
        Fault {
            uid: uid.to_owned(),
            subtask: None,
            at_record,
            kind,
            after_checkpoints: None,
            after_backups_started: None,
            point: FaultPoint::Record,
            in_promoted: false,
            fired: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Fires at the operator instance's snapshot of a checkpoint instead of at a record
    /// ([`FaultPoint::Snapshot`]): during the checkpoint, between the sources' acknowledgements
    /// and the sinks'. With [`after_checkpoints`](Self::after_checkpoints)`(n)`, at the first
    /// snapshot once `n` checkpoints completed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_testing::{wait_for_checkpoint, Fault, FaultKind, FaultPlan};
    /// weir_testing::quiet_injected_panics();
    /// let plan = FaultPlan::new(vec![Fault::new("double", FaultKind::Panic, 0).at_snapshot().after_checkpoints(1)]);
    /// let mut cfg = weir::EnvConfig::default();
    /// cfg.checkpoint.interval = Some(Duration::from_millis(10));
    /// cfg.faults = plan.clone();
    /// let env = weir::Env::with_config(cfg);
    /// env.generate(u64::MAX, |i| i).map(|x: u64| x * 2).uid("double").discard();
    /// let job = env.start("at-snapshot-doc").unwrap();
    /// // Checkpoint 1 completes; the next one fails at the map's snapshot: the job restores 1.
    /// let deadline = std::time::Instant::now() + Duration::from_secs(30);
    /// while job.checkpoint_stats().and_then(|s| s.last_restored_checkpoint_id).is_none() {
    ///     assert!(std::time::Instant::now() < deadline);
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert_eq!(plan.fired(), 1);
    /// job.cancel();
    /// let _ = job.wait();
    /// ```
    pub fn at_snapshot(mut self) -> Self {
        self.point = FaultPoint::Snapshot;
        self
    }

    /// Fires at the operator instance's snapshot of a checkpoint whose states are handed over
    /// in memory ([`FaultPoint::HandOver`]): during a live rescale or a fast restart, before
    /// it changed anything.
    pub fn at_hand_over(mut self) -> Self {
        self.point = FaultPoint::HandOver;
        self
    }

    /// Fires only once `n` checkpoints of the job have completed: at the first batch at or
    /// after `at_record` from then on (so the job restores a checkpoint, however fast or slow
    /// the machine is).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_testing::{Fault, FaultKind, FaultPlan};
    /// let plan = FaultPlan::new(vec![Fault::new("double", FaultKind::Panic, 0).after_checkpoints(2)]);
    /// let mut cfg = weir::EnvConfig::default();
    /// cfg.checkpoint.interval = Some(Duration::from_millis(10));
    /// cfg.faults = plan.clone();
    /// weir_testing::quiet_injected_panics();
    /// let env = weir::Env::with_config(cfg);
    /// env.generate(u64::MAX, |i| i)
    ///     .map(|x: u64| x * 2)
    ///     .uid("double")
    ///     .discard();
    /// let job = env.start("after-checkpoints-doc").unwrap();
    /// let deadline = std::time::Instant::now() + Duration::from_secs(30);
    /// // The fault fires once checkpoint 1 completed, so the restart restores a checkpoint.
    /// while job.checkpoint_stats().and_then(|s| s.last_restored_checkpoint_id).is_none() {
    ///     assert!(std::time::Instant::now() < deadline);
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert_eq!(plan.fired(), 1);
    /// job.cancel();
    /// let _ = job.wait();
    /// ```
    pub fn after_checkpoints(mut self, n: u64) -> Self {
        self.after_checkpoints = Some(n);
        self
    }

    /// Fires only once `n` backups of the subtask have been started: the framework counts a
    /// start each time it attaches a backup to a subtask of a backed-up operator — the first
    /// when the job deploys it, then one for each failed backup it replaces and one for the
    /// backup it starts after each promotion (over the plan's whole life, restarts included:
    /// a restart-all deploys a first backup again). From then on the fault fires at the first
    /// batch at or after `at_record`. Use it on the backed-up operator's uid (the one given a
    /// backup policy), or on its backups' (`<uid>.backup`: a fault of the `n`-th backup, at
    /// its batch `at_record`); on any other operator's the count stays 0. With `n = 2` and a fault
    /// that fails the backup, the primary fails only once the failed backup was replaced,
    /// however fast or slow the machine.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_testing::{Fault, FaultKind, FaultPlan};
    /// weir_testing::quiet_injected_panics();
    /// // The backup of `double` subtask 0 fails at its batch 3; its primary once the backup
    /// // that replaced it is attached (the second backup started), and that one is promoted.
    /// let plan = FaultPlan::new(vec![
    ///     Fault::new("double.backup", FaultKind::Panic, 3).in_subtask(0),
    ///     Fault::new("double", FaultKind::Panic, 0).in_subtask(0).after_backups_started(2),
    /// ]);
    /// let mut cfg = weir::EnvConfig::default();
    /// cfg.checkpoint.interval = Some(Duration::from_millis(10));
    /// cfg.faults = plan.clone();
    /// let env = weir::Env::with_config(cfg);
    /// env.generate(u64::MAX, |i| i)
    ///     .map(|x: u64| x * 2)
    ///     .uid("double")
    ///     .with_backup()
    ///     .discard();
    /// let job = env.start("after-backups-started-doc").unwrap();
    /// let deadline = std::time::Instant::now() + Duration::from_secs(30);
    /// let sum = |f: fn(&weir::BackupMetrics) -> u64| job.backup_metrics().iter().map(f).sum::<u64>();
    /// while plan.fired() < 2 || sum(|m| m.promotions) == 0 {
    ///     assert!(std::time::Instant::now() < deadline);
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(sum(|m| m.backup_replacements) >= 1);
    /// job.cancel();
    /// let _ = job.wait();
    /// ```
    pub fn after_backups_started(mut self, n: u64) -> Self {
        self.after_backups_started = Some(n);
        self
    }

    /// Fires only in a promoted backup: the instance that took over from a failed primary
    /// counts the records of its subtask on from the state it took over, so a fault at the
    /// record where its primary failed fires while it replays the buffered records.
    ///
    /// ```
    /// use weir_testing::{Fault, FaultKind};
    /// // The primary of `count` subtask 0 fails at record 500, and its backup again while it
    /// // replays that record.
    /// let faults = vec![
    ///     Fault::new("count", FaultKind::Panic, 500).in_subtask(0),
    ///     Fault::new("count", FaultKind::Panic, 500).in_subtask(0).in_promoted(),
    /// ];
    /// assert!(faults[1].in_promoted && !faults[0].in_promoted);
    /// ```
    pub fn in_promoted(mut self) -> Self {
        self.in_promoted = true;
        self
    }

    /// Only in subtask `i`.
    pub fn in_subtask(mut self, i: usize) -> Self {
        self.subtask = Some(i);
        self
    }
}

/// The faults of a job (shared with it: [`fired`](Self::fired) can be read while it runs).
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    faults: Arc<Vec<Fault>>,
    released: Arc<AtomicBool>,
    /// Checkpoints the job has completed (for [`Fault::after_checkpoints`]).
    checkpoints: Arc<AtomicU64>,
    /// Backups started per backed-up subtask, by uid and subtask (for
    /// [`Fault::after_backups_started`]); a probe holds its subtask's counter.
    backups: BackupStarts,
}

/// Backups started, per (uid, subtask) of a backed-up operator.
type BackupStarts = Arc<Mutex<HashMap<(String, usize), Arc<AtomicU64>>>>;

impl PartialEq for FaultPlan {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.faults, &other.faults)
    }
}

impl FaultPlan {
    /// A plan of `faults`.
    pub fn new(faults: Vec<Fault>) -> Self {
        FaultPlan {
            faults: Arc::new(faults),
            released: Arc::new(AtomicBool::new(false)),
            checkpoints: Arc::new(AtomicU64::new(0)),
            backups: Arc::default(),
        }
    }

    /// The job completed a checkpoint (the controller tells the plan).
    pub(crate) fn checkpoint_completed(&self) {
        self.checkpoints.fetch_add(1, Ordering::SeqCst);
    }

    /// A backup of subtask `subtask` of `uid` was started (attached to its inputs): the
    /// backup group tells the plan.
    pub(crate) fn backup_started(&self, uid: &str, subtask: usize) {
        if !self.faults.is_empty() {
            self.backups_of(uid, subtask).fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The counter of backups started for subtask `subtask` of `uid`.
    fn backups_of(&self, uid: &str, subtask: usize) -> Arc<AtomicU64> {
        let mut backups = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        backups
            .entry((uid.to_owned(), subtask))
            .or_default()
            .clone()
    }

    /// How many faults have fired.
    pub fn fired(&self) -> usize {
        self.faults
            .iter()
            .filter(|f| f.fired.load(Ordering::SeqCst))
            .count()
    }

    /// Whether the plan is empty.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// Whether the job running with this plan has released its hung subtasks (it is stopping
    /// or restarting): a fault of your own that hangs should wait for this, as
    /// [`FaultKind::Hang`] does, so it never holds up the job's end.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Releases the plan's hung subtasks (they then panic): the job calls this when it stops
    /// or restarts; a test may call it to free a hang of its own.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Re-arms the release flag for a new run.
    pub(crate) fn rearm(&self) {
        self.released.store(false, Ordering::SeqCst);
    }

    /// The faults that apply to one instance of a source, sink or backup (never promoted).
    pub(crate) fn for_instance(&self, uid: &str, subtask: usize) -> Option<FaultProbe> {
        self.for_operator(uid, subtask, false)
    }

    /// The faults that apply to one operator instance; `promoted`: a promoted backup, to
    /// which the faults [`in_promoted`](Fault::in_promoted) apply too.
    pub(crate) fn for_operator(
        &self,
        uid: &str,
        subtask: usize,
        promoted: bool,
    ) -> Option<FaultProbe> {
        let mine: Vec<Fault> = self
            .faults
            .iter()
            .filter(|f| f.uid == uid && f.subtask.is_none_or(|s| s == subtask))
            .filter(|f| promoted || !f.in_promoted)
            .cloned()
            .collect();
        (!mine.is_empty()).then(|| FaultProbe {
            faults: mine,
            seen: 0,
            released: self.released.clone(),
            checkpoints: self.checkpoints.clone(),
            // A backup's faults (`<uid>.backup`) count its subtask's backups too.
            backups: self.backups_of(uid.strip_suffix(".backup").unwrap_or(uid), subtask),
        })
    }
}

/// The faults of one operator instance, checked once per batch.
#[derive(Debug)]
pub(crate) struct FaultProbe {
    faults: Vec<Fault>,
    seen: u64,
    released: Arc<AtomicBool>,
    checkpoints: Arc<AtomicU64>,
    /// Backups started for this instance's subtask.
    backups: Arc<AtomicU64>,
}

impl FaultProbe {
    /// The probe of an instance that takes over after `seen` records of its subtask (a
    /// promoted backup): faults keep counting the subtask's input records.
    pub(crate) fn starting_at(mut self, seen: u64) -> Self {
        self.seen = seen;
        self
    }

    /// Called before a batch of `n` records: fires a fault that falls in it.
    pub(crate) fn before_batch(&mut self, n: usize) {
        let (from, to) = (self.seen, self.seen + n as u64);
        self.seen = to;
        for f in &self.faults {
            if f.point != FaultPoint::Record {
                continue;
            }
            let due = if f.after_checkpoints.is_none() && f.after_backups_started.is_none() {
                f.at_record >= from && f.at_record < to
            } else {
                f.at_record < to && self.armed(f)
            };
            if due {
                self.fire(f, "record");
            }
        }
    }

    /// Called when the instance snapshots its state for a checkpoint (`hand_over`: one whose
    /// states are handed over in memory): fires a snapshot fault that is due.
    pub(crate) fn at_snapshot(&self, hand_over: bool) {
        for f in &self.faults {
            let point = match f.point {
                FaultPoint::Record => false,
                FaultPoint::Snapshot => true,
                FaultPoint::HandOver => hand_over,
            };
            if point && self.armed(f) {
                self.fire(f, "snapshot");
            }
        }
    }

    /// Whether the events `f` waits for have happened ([`Fault::after_checkpoints`],
    /// [`Fault::after_backups_started`]).
    fn armed(&self, f: &Fault) -> bool {
        f.after_checkpoints
            .is_none_or(|n| self.checkpoints.load(Ordering::SeqCst) >= n)
            && f.after_backups_started
                .is_none_or(|n| self.backups.load(Ordering::SeqCst) >= n)
    }

    /// Fires `f` unless it has fired: a panic or a hang do not return.
    fn fire(&self, f: &Fault, at: &str) {
        if f.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(uid = %f.uid, record = f.at_record, point = ?f.point, kind = ?f.kind, "injecting a fault");
        match f.kind {
            FaultKind::Panic => match f.point {
                FaultPoint::Record => panic!(
                    "injected fault: operator `{}` panics at record {}",
                    f.uid, f.at_record
                ),
                _ => panic!("injected fault: operator `{}` panics at its {at}", f.uid),
            },
            FaultKind::Hang => {
                while !self.released.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                panic!("injected hang of `{}` released", f.uid);
            }
            FaultKind::StopArbiter => {
                // The arbiter's loop ends once it looks at its commands again (it may poll
                // its tasks a few dozen more times first): every actor on it is then
                // dropped and reported lost. Until then nothing on it takes more input (see
                // `arbiter_stopping`), as nothing would on a thread that died.
                ARBITER_STOPPING.with(|s| s.set(true));
                actix_rt::Arbiter::current().stop();
            }
            FaultKind::Pause(d) => std::thread::sleep(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault after `n` backups started waits for the `n`-th start of its own subtask's
    /// backup, then fires at the next batch at or after its record.
    #[test]
    fn after_backups_started_waits_for_the_subtasks_backup_starts() {
        let plan = FaultPlan::new(vec![Fault::new("op", FaultKind::Pause(Duration::ZERO), 10)
            .in_subtask(0)
            .after_backups_started(2)]);
        let mut probe = plan.for_operator("op", 0, false).expect("a fault of op 0");
        plan.backup_started("op", 0);
        plan.backup_started("op", 1);
        plan.backup_started("other", 0);
        probe.before_batch(64);
        assert_eq!(plan.fired(), 0, "one backup of subtask 0 started");
        plan.backup_started("op", 0);
        probe.before_batch(64);
        assert_eq!(plan.fired(), 1, "the second one started");

        // Not before its record, once armed.
        let plan = FaultPlan::new(vec![Fault::new(
            "op",
            FaultKind::Pause(Duration::ZERO),
            100,
        )
        .after_backups_started(1)]);
        plan.backup_started("op", 3);
        let mut probe = plan.for_operator("op", 3, false).expect("a fault of op 3");
        probe.before_batch(64);
        assert_eq!(plan.fired(), 0, "records 0..64");
        probe.before_batch(64);
        assert_eq!(plan.fired(), 1, "records 64..128");
    }
}
