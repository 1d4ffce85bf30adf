//! The chaos command's scenarios: seeded runs of one job under every fault-tolerance mode,
//! fault kind and moment, each checked record by record and key by key.
//!
//! The job: [`HeldIds`] `0..N` (parallelism 2) -> `map` -> `key_by(id % KEYS)` -> a running
//! count per key in keyed state (parallelism 2), emitting `(key, count, id)` -> an
//! exactly-once `collect`. Exactly-once holds when every id is committed once and each key's
//! counts are exactly `1..=n_key` (the keyed state continued where its checkpoint, its backup
//! or its hand-over left it); at-least-once when every id is committed at least once.
//!
//! Modes: restart-all from checkpoints (aligned, unaligned under backpressure: a slow keyed
//! count, at-least-once barriers); a buffer-queue backup of the stateless `map` or of the
//! stateful count; and two that change
//! the job while it runs, restart-all with aligned barriers: a live rescale of the count to
//! another parallelism ([`JobMonitor::rescale`](weir::JobMonitor::rescale)), and a fast restart
//! to an equal graph ([`JobMonitor::replace`](weir::JobMonitor::replace)). A rescale or
//! replacement that a fault abandons is tried once more after the job recovered.
//!
//! Moments are events, not times: a fault fires once a checkpoint completed
//! ([`Fault::after_checkpoints`]) while the source holds the second half of its input
//! ([`Hold`]) until then; at the operator's snapshot of a checkpoint, between the sources'
//! acknowledgements and the sinks' ([`Fault::at_snapshot`]); at a record count; two faults
//! close together; a second fault in the promoted backup while it replays the record its
//! primary failed at ([`Fault::in_promoted`]); at the snapshot of the rescale's or
//! replacement's own checkpoint ([`Fault::at_hand_over`]); at a record of the input held
//! until the rescale or replacement is done ([`RecordFaults`]), so in its new parallelism or
//! graph. Every run is bounded by a timeout that counts as a failure.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir::{
    CheckpointMode, CollectSink, Collector, Env, EnvConfig, JobHandle, ReplaceOptions,
    RestartStrategy, ValueState,
};
use weir_examples::rng::SplitMix64;
use weir_testing::{wait_for_checkpoint, Fault, FaultKind, FaultPlan, HeldIds, Hold, RecordFaults};

/// Keys of the keyed count.
pub const KEYS: u64 = 13;

/// How the job survives a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Restart from the last checkpoint, aligned barriers.
    Aligned,
    /// Restart from the last checkpoint, unaligned barriers.
    Unaligned,
    /// Restart from the last checkpoint, at-least-once barriers.
    AtLeastOnce,
    /// A backup per subtask of the stateless `map` (BQBS).
    BackupStateless,
    /// A backup per subtask of the stateful keyed count (BQBS).
    BackupStateful,
    /// Restart-all (aligned), and a live rescale of the keyed count during the run.
    Rescale,
    /// Unaligned barriers under backpressure (a slow keyed count), and a live rescale of the
    /// count during the run: its checkpoint's in-flight data is dealt by key group.
    RescaleUnaligned,
    /// Restart-all (aligned), and a fast restart to an equal graph during the run.
    FastRestart,
    /// [`Mode::BackupStateless`] with unaligned checkpoints under backpressure (a slow keyed
    /// count): the backed-up `map`'s checkpoints stay aligned, the count's are unaligned.
    BackupStatelessUnaligned,
    /// [`Mode::BackupStateful`] with unaligned checkpoints under backpressure: the backed-up
    /// count is the slow one, and its checkpoints stay aligned.
    BackupStatefulUnaligned,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 10] = [
        Mode::Aligned,
        Mode::Unaligned,
        Mode::AtLeastOnce,
        Mode::BackupStateless,
        Mode::BackupStateful,
        Mode::Rescale,
        Mode::FastRestart,
        Mode::RescaleUnaligned,
        Mode::BackupStatelessUnaligned,
        Mode::BackupStatefulUnaligned,
    ];
    fn exactly_once(self) -> bool {
        self != Mode::AtLeastOnce
    }
    /// The operator the faults hit.
    fn target(self) -> &'static str {
        match self {
            Mode::BackupStateful
            | Mode::BackupStatefulUnaligned
            | Mode::Rescale
            | Mode::RescaleUnaligned
            | Mode::FastRestart => "count",
            _ => "map",
        }
    }
    /// Whether checkpoints are unaligned (and the run is under backpressure).
    fn unaligned(self) -> bool {
        matches!(
            self,
            Mode::Unaligned
                | Mode::RescaleUnaligned
                | Mode::BackupStatelessUnaligned
                | Mode::BackupStatefulUnaligned
        )
    }
    /// Whether the run rescales or replaces the job.
    fn hands_over(self) -> bool {
        matches!(
            self,
            Mode::Rescale | Mode::RescaleUnaligned | Mode::FastRestart
        )
    }
    /// The moments that mean something in this mode.
    pub fn moments(self) -> &'static [Moment] {
        match self {
            Mode::Aligned | Mode::Unaligned | Mode::AtLeastOnce => &[
                Moment::AfterCheckpoint,
                Moment::AtRecord,
                Moment::TwoClose,
                Moment::DuringCheckpoint,
            ],
            Mode::BackupStateless
            | Mode::BackupStateful
            | Mode::BackupStatelessUnaligned
            | Mode::BackupStatefulUnaligned => &[
                Moment::AfterCheckpoint,
                Moment::AtRecord,
                Moment::TwoClose,
                Moment::DuringCheckpoint,
                Moment::DuringReplay,
                Moment::AfterBackupReplaced,
            ],
            Mode::Rescale | Mode::RescaleUnaligned | Mode::FastRestart => &[
                Moment::DuringHandOver,
                Moment::AfterHandOver,
                Moment::TwoClose,
            ],
        }
    }
}

/// When the fault comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Moment {
    /// At the first batch after checkpoint 1 completed (the second half of the input held
    /// until then).
    AfterCheckpoint,
    /// At a random record of a subtask's input.
    AtRecord,
    /// Two faults close together: one batch apart in both source subtasks' shares (record
    /// faults, by id); with a rescale or a replacement, one at its checkpoint and one right
    /// after it.
    TwoClose,
    /// At the target's snapshot of the first checkpoint after checkpoint 1: the sources have
    /// acknowledged it, the sinks have not.
    DuringCheckpoint,
    /// At a random record of subtask 0, and again in its promoted backup when its replay
    /// reaches that record.
    DuringReplay,
    /// At the target's snapshot of the rescale's or replacement's checkpoint.
    DuringHandOver,
    /// At a record of the input held until the rescale or replacement is done.
    AfterHandOver,
    /// The backup of subtask 0 fails (a panic) at a random one of its first batches; the
    /// backup that replaces it pauses before its first batch (150 ms, under its heartbeat
    /// timeout), and the primary fails at its first batch once that one is attached: the
    /// replacement is promoted with batches its predecessor had already queued still waiting
    /// in its channel.
    AfterBackupReplaced,
}

impl Moment {
    /// Every moment.
    pub const ALL: [Moment; 8] = [
        Moment::AfterCheckpoint,
        Moment::AtRecord,
        Moment::TwoClose,
        Moment::DuringCheckpoint,
        Moment::DuringReplay,
        Moment::DuringHandOver,
        Moment::AfterHandOver,
        Moment::AfterBackupReplaced,
    ];
}

/// The fault kinds drawn from.
pub fn kinds() -> [FaultKind; 4] {
    [
        FaultKind::Panic,
        FaultKind::Hang,
        FaultKind::StopArbiter,
        FaultKind::Pause(Duration::from_millis(600)),
    ]
}

/// One run's choices, all from its seed.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The run's seed: `chaos --replay SEED` runs it alone.
    pub seed: u64,
    /// Fault-tolerance mode.
    pub mode: Mode,
    /// Fault kind.
    pub kind: FaultKind,
    /// When.
    pub moment: Moment,
    /// Records.
    pub n: u64,
    /// The keyed count's parallelism after a rescale ([`Mode::Rescale`]).
    pub rescale_to: usize,
    /// Incremental checkpoints (`CheckpointConfig::incremental`) or full ones.
    pub incremental: bool,
    /// Checkpoints on an object store (a `file://` URL, mirrored by a local copy) or in a
    /// local directory.
    pub object_store: bool,
    /// The keyed count's states on disk (`StateBackend::Disk`, with the smallest budget) or
    /// in memory.
    pub disk_state: bool,
}

impl Scenario {
    /// The scenario of `seed` (`n` records).
    pub fn from_seed(seed: u64, n: u64) -> Self {
        let mut r = SplitMix64::new(seed);
        let mode = Mode::ALL[r.below(Mode::ALL.len() as u64) as usize];
        let kind = kinds()[r.below(4) as usize];
        let moments = mode.moments();
        let moment = moments[r.below(moments.len() as u64) as usize];
        let rescale_to = [1, 3, 4][r.below(3) as usize];
        // Drawn last: the seeds before it keep their scenarios.
        let incremental = r.below(2) == 1;
        let object_store = r.below(2) == 1;
        let disk_state = r.below(2) == 1;
        Scenario {
            seed,
            mode,
            kind,
            moment,
            n,
            rescale_to,
            incremental,
            object_store,
            disk_state,
        }
    }

    /// Whether the source holds the second half of its input until the runner's event
    /// (checkpoint 1, or the rescale or replacement done).
    fn holds(&self) -> bool {
        self.mode.hands_over()
            || matches!(
                self.moment,
                Moment::AfterCheckpoint | Moment::DuringCheckpoint
            )
    }

    /// A record of the held input, near its start: of source subtask `sub`'s second half.
    fn held_record(&self, r: &mut SplitMix64) -> u64 {
        let sub = r.below(2);
        let share = self.n / 2;
        let held_from = sub * share + share / 2;
        held_from + r.below(share / 8)
    }

    /// The plan's faults, and the records of the record faults.
    fn faults(&self) -> (Vec<Fault>, Vec<u64>) {
        let mut r = SplitMix64::new(self.seed ^ 0xFA17);
        let target = self.mode.target();
        let share = self.n / 2;
        match (self.moment, self.mode.hands_over()) {
            (Moment::AfterCheckpoint, _) => (
                vec![Fault::new(target, self.kind, 0).after_checkpoints(1)],
                vec![],
            ),
            (Moment::AtRecord, _) => (
                vec![Fault::new(
                    target,
                    self.kind,
                    r.range(share / 10, share * 9 / 10),
                )],
                vec![],
            ),
            // By record id, not by an instance's record count: a restart-all attempt counts
            // from 0 again, so after the first fault a count may never be reached (the
            // restored attempt has less input left); an id always comes.
            (Moment::TwoClose, false) => {
                let at = r.range(share / 10, share * 8 / 10);
                (vec![], vec![at, share + at + 64])
            }
            (Moment::TwoClose, true) => (
                vec![Fault::new(target, self.kind, 0)
                    .at_hand_over()
                    .in_subtask(0)],
                vec![self.held_record(&mut r)],
            ),
            (Moment::DuringCheckpoint, _) => (
                vec![Fault::new(target, self.kind, 0)
                    .at_snapshot()
                    .after_checkpoints(1)],
                vec![],
            ),
            (Moment::DuringReplay, _) => {
                let at = r.range(share / 10, share * 8 / 10);
                (
                    vec![
                        Fault::new(target, self.kind, at).in_subtask(0),
                        // At the promoted primary's first batch at or after `at`
                        // (`after_checkpoints(0)`: at or after, not exactly at): a primary
                        // whose arbiter was stopped goes on a little before it ends, so its
                        // backup may take over from a checkpoint past `at`, and a fault at
                        // exactly `at` never fired (6 of 1,000 runs).
                        Fault::new(target, self.kind, at)
                            .in_subtask(0)
                            .in_promoted()
                            .after_checkpoints(0),
                    ],
                    vec![],
                )
            }
            (Moment::DuringHandOver, _) => (
                vec![Fault::new(target, self.kind, 0).at_hand_over()],
                vec![],
            ),
            (Moment::AfterHandOver, _) => (vec![], vec![self.held_record(&mut r)]),
            (Moment::AfterBackupReplaced, _) => {
                let backup = format!("{target}.backup");
                (
                    vec![
                        Fault::new(&backup, FaultKind::Panic, r.range(3, 40)).in_subtask(0),
                        Fault::new(&backup, FaultKind::Pause(Duration::from_millis(150)), 0)
                            .in_subtask(0)
                            .after_backups_started(2),
                        Fault::new(target, self.kind, 0)
                            .in_subtask(0)
                            .after_backups_started(2),
                    ],
                    vec![],
                )
            }
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} {:?} {:?} {:?} n={}",
            self.seed, self.mode, self.kind, self.moment, self.n
        )?;
        if matches!(self.mode, Mode::Rescale | Mode::RescaleUnaligned) {
            write!(f, " count 2->{}", self.rescale_to)?;
        }
        if self.incremental {
            write!(f, " incremental")?;
        }
        if self.object_store {
            write!(f, " file://")?;
        }
        if self.disk_state {
            write!(f, " disk-state")?;
        }
        Ok(())
    }
}

/// What went wrong in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every id and every key's counts as they must be.
    Ok,
    /// Ids missing at the sink.
    Lost(u64),
    /// Ids committed more than once (exactly-once modes).
    Duplicated(u64),
    /// A key's counts are not `1..=n_key` (exactly-once modes).
    WrongState(String),
    /// The run did not end within the timeout.
    Hung,
    /// The job failed.
    Failed(String),
}

impl Verdict {
    /// Whether the run was correct.
    pub fn is_ok(&self) -> bool {
        *self == Verdict::Ok
    }
}

/// One run: its verdict, how many of its faults fired, and what the runner did (the
/// rescales and replacements, with their answers).
#[derive(Debug, Clone)]
pub struct Run {
    /// The verdict.
    pub verdict: Verdict,
    /// Faults that fired (plan faults and record faults).
    pub fired: usize,
    /// Faults the scenario had.
    pub faults: usize,
    /// What the runner did, in order.
    pub notes: Vec<String>,
}

/// Runs one scenario, bounded by `timeout`.
pub fn run(s: Scenario, dir: &std::path::Path, timeout: Duration) -> Run {
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_owned();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(run_inner(s, &dir));
    });
    match rx.recv_timeout(timeout) {
        Ok(r) => {
            let _ = thread.join();
            r
        }
        // The job's thread is left behind: the process reports and goes on.
        Err(_) => Run {
            verdict: Verdict::Hung,
            fired: 0,
            faults: 0,
            notes: vec![],
        },
    }
}

fn config(s: &Scenario, plan: FaultPlan, dir: &std::path::Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.heartbeat_timeout = Duration::from_millis(300);
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    if s.object_store {
        cfg.checkpoint.directory = format!("file://{}", dir.join("store").display()).into();
        cfg.checkpoint.local_directory = dir.join("local");
    } else {
        cfg.checkpoint.directory = dir.to_owned();
    }
    cfg.checkpoint.mode = if s.mode == Mode::AtLeastOnce {
        CheckpointMode::AtLeastOnce
    } else {
        CheckpointMode::ExactlyOnce
    };
    cfg.checkpoint.unaligned = s.mode.unaligned();
    cfg.checkpoint.incremental = s.incremental;
    if s.disk_state {
        let mut disk = weir::DiskBackend::default();
        disk.directory = dir.join("state");
        disk.memory_budget = weir::DiskBackend::MIN_BUDGET;
        cfg.state_backend = weir::StateBackend::Disk(disk);
    }
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 10,
        delay: Duration::from_millis(5),
    });
    cfg.faults = plan;
    // A thousand runs restart a thousand times: the table tells, not stderr (unless
    // `WEIR_CHAOS_WARNINGS` is set, to see what a replayed run went through).
    cfg.stderr_warnings = std::env::var_os("WEIR_CHAOS_WARNINGS").is_some();
    cfg
}

type Out = CollectSink<(u64, u64, u64)>;

/// What every version of the job shares: the input's hold, the faults and the sink's handle.
/// One handle for every version: a replacement restores the sink's state of its savepoint
/// and commits what it had set aside again, which the old graph already committed; commits
/// are idempotent per subtask and checkpoint within a handle (`collect_into`), as a file
/// sink's are within its directory. With a handle per version, the savepoint's uncommitted
/// records came out twice.
#[derive(Clone)]
struct Parts {
    s: Scenario,
    hold: Hold,
    records: RecordFaults<u64>,
    out: Out,
}

/// Adds the job to `env`, into the sink of `p`.
fn build(env: &Env, p: &Parts) {
    let (s, h) = (p.s, p.hold.clone());
    let n = s.n;
    let before_hold = if s.holds() { 0.5 } else { 1.0 };
    let ids = env
        .add_source("ids", move |cx| {
            Ok(HeldIds::new(cx, n, before_hold, h.clone()))
        })
        .uid("ids")
        .set_parallelism(2);
    let in_map = if s.mode.target() == "map" {
        Some(p.records.clone())
    } else {
        None
    };
    let mapped = ids
        .map(move |x: u64| {
            if let Some(f) = &in_map {
                f.check(&x);
            }
            x
        })
        .uid("map")
        .set_parallelism(2);
    let mapped = if matches!(
        s.mode,
        Mode::BackupStateless | Mode::BackupStatelessUnaligned
    ) {
        mapped.with_backup()
    } else {
        mapped
    };
    let in_count = if s.mode.target() == "count" {
        Some(p.records.clone())
    } else {
        None
    };
    // Unaligned runs under backpressure: `count` is slow enough to keep `map`'s channels
    // into it full, so barriers overtake queued batches and checkpoints store them.
    let slow_count = s.mode.unaligned();
    let counted = mapped
        .key_by(|x: &u64| x % KEYS)
        .process(
            move |k: &u64,
                  c: &mut ValueState<u64>,
                  x: u64,
                  out: &mut Collector<(u64, u64, u64)>| {
                if let Some(f) = &in_count {
                    f.check(&x);
                }
                if slow_count && x.is_multiple_of(16) {
                    std::thread::sleep(Duration::from_micros(100));
                }
                let n = c.get_or_insert_with(|| 0);
                *n += 1;
                out.collect((*k, *n, x));
            },
        )
        .uid("count")
        .set_parallelism(2);
    let counted = if matches!(s.mode, Mode::BackupStateful | Mode::BackupStatefulUnaligned) {
        counted.with_backup()
    } else {
        counted
    };
    counted.collect_into(&p.out);
}

/// The rescale or replacement of the run; `Err` says why it did not happen.
fn hand_over(job: &JobHandle, p: &Parts) -> Result<String, String> {
    match p.s.mode {
        Mode::Rescale | Mode::RescaleUnaligned => job
            .rescale("count", p.s.rescale_to)
            .map(|r| format!("rescaled at checkpoint {}", r.checkpoint))
            .map_err(|e| e.to_string()),
        Mode::FastRestart => {
            let p = p.clone();
            job.replace(
                move |env| {
                    build(env, &p);
                },
                ReplaceOptions::default(),
            )
            .map(|r| {
                format!(
                    "replaced at savepoint {}, committed at {:?}",
                    r.checkpoint, r.committed_at
                )
            })
            .map_err(|e| e.to_string())
        }
        _ => Ok("no hand-over".into()),
    }
}

fn run_inner(s: Scenario, dir: &std::path::Path) -> Run {
    let (faults, record_ids) = s.faults();
    let n_faults = faults.len() + record_ids.len();
    let plan = FaultPlan::new(faults);
    let records = RecordFaults::new(s.mode.target(), s.kind, record_ids).released_by(&plan);
    let env = Env::with_config(config(&s, plan.clone(), dir));
    let parts = Parts {
        s,
        hold: Hold::new(),
        records: records.clone(),
        out: Out::default(),
    };
    build(&env, &parts);
    let mut notes = Vec::new();
    let ended = |verdict: Verdict, notes: Vec<String>| Run {
        verdict,
        fired: plan.fired() + records.fired(),
        faults: n_faults,
        notes,
    };
    let job = match env.start("chaos") {
        Ok(j) => j,
        Err(e) => return ended(Verdict::Failed(e.to_string()), notes),
    };
    if s.holds() {
        if let Err(e) = wait_for_checkpoint(&job, 1, Duration::from_secs(20)) {
            return ended(Verdict::Failed(format!("no checkpoint: {e}")), notes);
        }
    }
    if s.moment == Moment::DuringCheckpoint {
        // Checkpoints go on while the input is held: the fault fires at the next one's
        // snapshot however fast the machine is, and the rest of the input comes after it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while plan.fired() == 0 {
            if Instant::now() > deadline {
                return ended(Verdict::Failed("no checkpoint after 1".into()), notes);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    if s.mode.hands_over() {
        let first = hand_over(&job, &parts);
        notes.push(format!("{first:?}"));
        if first.is_err() {
            // Abandoned (a fault at its checkpoint): once the job recovered, once more.
            let done = job
                .checkpoint_stats()
                .map_or(0, |c| c.number_of_completed_checkpoints);
            if let Err(e) = wait_for_checkpoint(&job, done + 1, Duration::from_secs(20)) {
                return ended(Verdict::Failed(format!("no recovery: {e}")), notes);
            }
            let again = hand_over(&job, &parts);
            notes.push(format!("again: {again:?}"));
        }
    }
    parts.hold.release();
    if let Err(e) = job.wait() {
        return ended(Verdict::Failed(e.to_string()), notes);
    }
    let got = parts.out.take();
    ended(check(s.n, s.mode.exactly_once(), &got), notes)
}

/// The verdict on what the sink committed.
pub fn check(n: u64, exactly_once: bool, got: &[(u64, u64, u64)]) -> Verdict {
    let mut seen = vec![0u32; n as usize];
    for &(k, _, id) in got {
        if let Some(s) = seen.get_mut(id as usize) {
            *s += 1;
        }
        if k != id % KEYS {
            return Verdict::WrongState(format!("id {id} counted under key {k}"));
        }
    }
    let lost = seen.iter().filter(|&&c| c == 0).count() as u64;
    if lost > 0 {
        return Verdict::Lost(lost);
    }
    if !exactly_once {
        return Verdict::Ok;
    }
    let dup = seen.iter().filter(|&&c| c > 1).count() as u64;
    if dup > 0 {
        return Verdict::Duplicated(dup);
    }
    let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, c, _) in got {
        per_key.entry(k).or_default().push(c);
    }
    for (k, mut counts) in per_key {
        counts.sort_unstable();
        if counts.iter().enumerate().any(|(i, &c)| c != i as u64 + 1) {
            return Verdict::WrongState(format!("key {k}: counts are not 1..={}", counts.len()));
        }
    }
    Verdict::Ok
}

/// Runs `runs` scenarios from `seed` on (seeds `seed`, `seed + 1`, ..., skipping those
/// whose scenario `keep` refuses), `n` records each; calls `each` after every run. The runs,
/// in order.
pub fn campaign(
    seed: u64,
    runs: u64,
    n: u64,
    timeout: Duration,
    keep: impl Fn(&Scenario) -> bool,
    mut each: impl FnMut(&Scenario, &Run, Duration),
) -> Vec<(Scenario, Run)> {
    let root = std::env::temp_dir().join(format!("weir-chaos-{}", std::process::id()));
    let mut out = Vec::with_capacity(runs as usize);
    let seeds = (0..).map(|i| seed.wrapping_add(i));
    let scenarios = seeds
        .map(|seed| Scenario::from_seed(seed, n))
        .filter(|s| keep(s))
        .take(runs as usize);
    for s in scenarios {
        let dir = root.join(s.seed.to_string());
        let started = Instant::now();
        let r = run(s, &dir, timeout);
        let _ = std::fs::remove_dir_all(&dir);
        each(&s, &r, started.elapsed());
        out.push((s, r));
    }
    let _ = std::fs::remove_dir_all(&root);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_finds_each_kind_of_wrong_output() {
        // The sequential computation: id `i` is key `i % KEYS`'s `i / KEYS + 1`-th record.
        let good: Vec<(u64, u64, u64)> = (0..40).map(|i| (i % KEYS, i / KEYS + 1, i)).collect();
        assert_eq!(check(40, true, &good), Verdict::Ok);
        assert_eq!(check(41, true, &good), Verdict::Lost(1));
        let mut dup = good.clone();
        dup.push(good[1]);
        assert_eq!(check(40, true, &dup), Verdict::Duplicated(1));
        assert_eq!(check(40, false, &dup), Verdict::Ok);
        let mut wrong = good.clone();
        wrong[KEYS as usize].1 = 3;
        assert!(matches!(check(40, true, &wrong), Verdict::WrongState(_)));
        let mut misplaced = good.clone();
        misplaced[2].0 = 3;
        assert!(matches!(
            check(40, true, &misplaced),
            Verdict::WrongState(_)
        ));
    }

    #[test]
    fn a_seed_is_always_the_same_scenario_and_every_pairing_comes() {
        let a = Scenario::from_seed(9, 1_000);
        let b = Scenario::from_seed(9, 1_000);
        assert_eq!(a.to_string(), b.to_string());
        let all: std::collections::HashSet<(Mode, Moment)> = (0..1_000)
            .map(|s| {
                let s = Scenario::from_seed(s, 1_000);
                assert!(s.mode.moments().contains(&s.moment), "{s}");
                (s.mode, s.moment)
            })
            .collect();
        let pairs: usize = Mode::ALL.iter().map(|m| m.moments().len()).sum();
        assert_eq!(all.len(), pairs);
        let moments: std::collections::HashSet<Moment> = all.iter().map(|(_, m)| *m).collect();
        assert_eq!(moments.len(), Moment::ALL.len(), "every moment is used");
    }

    #[test]
    fn held_records_are_in_the_held_half_of_a_source_subtask() {
        for seed in 0..200 {
            let s = Scenario::from_seed(seed, 20_000);
            let mut r = SplitMix64::new(seed);
            let id = s.held_record(&mut r);
            assert!(
                (5_000..10_000).contains(&id) || (15_000..20_000).contains(&id),
                "{id}"
            );
        }
    }
}
