//! Criticality analysis of the answer-cleaning job (the paper's Table 5): inject faults into
//! each operator in turn, in restart-all mode, and rank the operators by their mean recovery
//! time, to choose which to back up. The `criticality` binary is a command-line wrapper of
//! [`run`].
//!
//! ```no_run
//! use weir_benches::criticality::{run, CriticalityOptions};
//! let report = run(&CriticalityOptions {
//!     faults: 5,
//!     operators: vec!["flat_map".into(), "filter".into()],
//!     ..CriticalityOptions::default()
//! })
//! .unwrap();
//! let most_critical = &report.operators[0];
//! println!("{}: {:.1} ms", most_critical.uid, most_critical.mean_recovery_ms);
//! ```
//!
//! # One run per fault
//!
//! Every fault is one run of the job over the same generated answers, with the graph of the
//! `recovery` harness, [`build_cleaning_job`] (the job's `levels`, `source`, `connect`,
//! `flat_map`, `split` and `filter` as `cleaning_streams` builds them, then `map` and the
//! exactly-once part-file sinks (`weir_testing::TwoPhaseFileSink`, through
//! [`recovery_support`](crate::recovery_support)): `sink`, and `malformed` for the side
//! output; nothing backed up), checkpoints every
//! `checkpoint_interval_ms`, and a fixed-delay restart strategy. One fault
//! fires in the run; the framework stops every subtask, restores the last complete checkpoint
//! (or starts over without one) and the sources replay from there.
//!
//! # Where the faults go
//!
//! The same `faults` input positions, drawn at random (seeded) from the whole input, are used
//! for every operator (a paired comparison: operators differ in where they are, not in where
//! their faults happened to fall). A position is turned into the operator's own record count,
//! which is what [`FaultPlan`] counts (per subtask, from the start of the run): generated
//! record `i` is read by the source subtask whose contiguous share holds it and stays in that
//! subtask down the forward edges; `connect` also counts the level thresholds, which it reads
//! before the first answer; `filter` sees the lines that parsed; `map` and `sink` see only kept
//! answers, so their fault goes to the first kept answer at or after the position.
//!
//! The faults are [`FaultPlan`] faults (panic, hang or arbiter stop before the operator
//! processes the batch holding that record), except in `sink`: the framework does not inject
//! faults into sinks (nor into sources), so the harness's own sink panics, as a plan fault
//! would, before it writes the batch holding that record (`panic` only: a hang or an arbiter
//! stop cannot be injected from sink code). An operator whose fault never fires (`source`:
//! sources have no fault probe yet) is reported in [`CriticalityReport::skipped`] after its
//! first run.
//!
//! # What is measured
//!
//! `recovery_ms`: from the fault to the moment a sink subtask of the restarted job receives
//! the *target* record, the first kept answer at or after the fault's position in the failed
//! subtask: the first record the failure kept from the sink, now processed again. The
//! operators from `connect` to `sink` run in one chained actor, so the sink receives it
//! microseconds after the failed operator processes it. It includes failure detection (for a
//! hang, the heartbeat timeout), the restart delay, the redeploy, the restore and the replay
//! from the restored checkpoint. The time of a panic is taken by the panic hook of
//! [`install_fault_hook`] in the failing thread; a hang or an arbiter stop does not panic, so a
//! watcher thread polls whether the fault fired, every [`WATCH_INTERVAL`] (that fault's time is
//! up to that much late). If the restarted job never receives the target (its output was
//! already in a checkpoint that completed before the failure took effect: an arbiter stop
//! lets the current poll finish), the figure is the time to the restarted job's first output
//! instead, and [`OperatorCriticality::target_not_replayed`] counts it.
//!
//! After every run the committed output is compared with the expected output (computed
//! sequentially once, before the first run): every kept answer id must be committed exactly
//! once.
//!
//! [`run`] installs a panic hook per run (they chain; each one forwards what is not an injected
//! fault) and must not run twice at once in one process: calls are serialized by a lock. The
//! panic a hung subtask ends with when the job restarts is not printed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir::sink::{Sink, SinkContext};
use weir::source::SourceContext;
use weir::{Env, EnvConfig, RestartStrategy, SinkError};
use weir_examples::answers::{
    answer_json, clean_line, default_levels, uid, Answers, Thresholds, DEFAULT_SEED,
};
use weir_examples::rng::SplitMix64;
use weir_testing::{clear_part_files, quiet_released_hangs, read_committed, Fault, FaultPlan};

pub use crate::recovery_support::Kind;
use crate::recovery_support::{
    build_cleaning_job, install_fault_hook, tally, Expected, FlatMapSetup, KeptRecord, ProbedSink,
    RecoveryProbe,
};
use crate::{clock_ns, median};

/// The job's name (its checkpoints go to `<checkpoint dir>/criticality/`).
const JOB: &str = "criticality";
/// Restarts allowed per run (one fault fires; the rest covers a slow subtask taken for hung).
pub const RESTART_ATTEMPTS: u32 = 10;
/// How often the watcher checks whether a hang or an arbiter stop fired.
pub const WATCH_INTERVAL: Duration = Duration::from_micros(200);
/// The operators faults can be placed in, in graph order (the paper's Table 5 has all but
/// `split`). `levels` only reads the five thresholds, and `malformed` gets no record from the
/// generated answers, so a fault there would not fire in the answer stream.
pub const OPERATORS: [&str; 7] = [
    uid::SOURCE,
    uid::CONNECT,
    uid::FLAT_MAP,
    uid::SPLIT,
    uid::FILTER,
    uid::MAP,
    uid::SINK,
];

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalityOptions {
    /// Faults per operator (one run each).
    pub faults: usize,
    /// Generated answers per run.
    pub records: u64,
    /// Checkpoint interval; 0 turns checkpoints off (every restart then starts over).
    pub checkpoint_interval_ms: u64,
    /// Seed of the fault positions.
    pub seed: u64,
    /// Seed of the generated answers.
    pub answers_seed: u64,
    /// How the faults fail.
    pub kind: Kind,
    /// The operators, by uid (empty: every one of [`OPERATORS`]).
    pub operators: Vec<String>,
    /// Parallelism of every operator but `levels`.
    pub parallelism: usize,
    /// Delay before a restart (Flink's fixed-delay default is 1000 ms).
    pub restart_delay_ms: u64,
    /// A subtask that does not answer the job's sampling mail for this long is declared hung;
    /// the job samples every fifth of it (at least every 10 ms).
    pub heartbeat_timeout_ms: u64,
    /// Print a line per operator on stderr while running.
    pub progress: bool,
}

impl Default for CriticalityOptions {
    fn default() -> Self {
        CriticalityOptions {
            faults: 50,
            records: 300_000,
            checkpoint_interval_ms: 100,
            seed: 1,
            answers_seed: DEFAULT_SEED,
            kind: Kind::Panic,
            operators: Vec::new(),
            parallelism: 1,
            restart_delay_ms: 0,
            heartbeat_timeout_ms: 250,
            progress: false,
        }
    }
}

/// The result: operators ranked from most to least critical.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalityReport {
    /// `"criticality"`.
    pub bench: String,
    /// `"restart-all"`.
    pub mode: String,
    /// The fault kind.
    pub kind: Kind,
    /// Faults asked for per operator.
    pub faults_per_operator: usize,
    /// Generated answers per run.
    pub records: u64,
    /// Answers the sink must commit per run.
    pub expected_per_run: u64,
    /// Parallelism of every operator but `levels`.
    pub parallelism: usize,
    /// Checkpoint interval (0: off).
    pub checkpoint_interval_ms: u64,
    /// Delay before a restart.
    pub restart_delay_ms: u64,
    /// Heartbeat timeout (what a hang costs before the restart).
    pub heartbeat_timeout_ms: u64,
    /// Restarts allowed per run.
    pub restart_attempts: u32,
    /// Seed of the fault positions.
    pub seed: u64,
    /// Seed of the generated answers.
    pub answers_seed: u64,
    /// What `*_recovery_ms` measure.
    pub recovery_ms_definition: String,
    /// Ranked by mean recovery time, largest first.
    pub operators: Vec<OperatorCriticality>,
    /// Operators asked for whose faults could not be injected, with the reason.
    pub skipped: Vec<SkippedOperator>,
    /// Wall time of the whole analysis.
    pub total_seconds: f64,
}

/// The recovery figures of one operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorCriticality {
    /// 1 for the most critical.
    pub rank: usize,
    /// The operator's uid.
    pub uid: String,
    /// `"fault_plan"` (the framework's [`FaultPlan`]) or `"harness_sink"` (a panic of the
    /// harness's own sink).
    pub injected_by: String,
    /// Faults that fired (one run each).
    pub faults: usize,
    /// Mean recovery time.
    pub mean_recovery_ms: f64,
    /// Median recovery time.
    pub p50_recovery_ms: f64,
    /// Shortest recovery time.
    pub min_recovery_ms: f64,
    /// Longest recovery time.
    pub max_recovery_ms: f64,
    /// Mean time from the fault to the first output of the restarted job (redeploy and
    /// restore, before the replay reaches the failed position).
    pub mean_output_resume_ms: f64,
    /// Every recovery time, in fault order.
    pub recovery_ms_each: Vec<f64>,
    /// Runs that restarted from the beginning (the fault came before the first complete
    /// checkpoint).
    pub restarts_from_scratch: usize,
    /// Restarts in all its runs (one per fault unless a slow subtask was taken for hung).
    pub restarts: u64,
    /// Runs whose target was not processed again (see the module documentation).
    pub target_not_replayed: usize,
    /// Extra copies of expected answer ids committed, over all its runs.
    pub duplicates: u64,
    /// Expected answer ids not committed, over all its runs.
    pub missing: u64,
    /// Committed ids not expected at all, over all its runs.
    pub unexpected: u64,
    /// Committed lines different from the expected ones, over all its runs.
    pub wrong_lines: u64,
}

/// An operator that was not measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedOperator {
    /// Its uid.
    pub uid: String,
    /// Why.
    pub reason: String,
}

/// The definition in [`CriticalityReport::recovery_ms_definition`].
pub const RECOVERY_MS_DEFINITION: &str = "time from the injected fault to a sink subtask of \
    the restarted job receiving the target record: the first kept answer at or after the \
    fault's input position in the failed subtask, the first record the failure kept from the \
    sink. Includes failure detection, restart delay, redeploy, restore and the replay from the \
    restored checkpoint (or from the start without one). Mean, median, min and max over the \
    faults of the operator.";

/// Runs the analysis.
pub fn run(opts: &CriticalityOptions) -> Result<CriticalityReport, String> {
    static RUNNING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let operators = check(opts)?;
    quiet_released_hangs();
    clock_ns(); // fixes the clock's base: every time taken later is > 0

    let expected = Expected::generated(opts.records, opts.answers_seed);
    let layout = Layout::new(opts, &expected)?;
    let positions = layout.positions(opts.faults, opts.seed)?;
    let dirs = WorkDirs::new()?;

    let mut measured = Vec::new();
    let mut skipped = Vec::new();
    for op in &operators {
        let t = Instant::now();
        let injector = Injector::of(op);
        if injector == Injector::HarnessSink && opts.kind != Kind::Panic {
            skipped.push(SkippedOperator {
                uid: op.clone(),
                reason: format!(
                    "the framework's FaultPlan does not reach sinks, and the harness's sink can \
                     only panic (a `{}` cannot be injected from sink code)",
                    opts.kind
                ),
            });
            continue;
        }
        let mut shots = Vec::with_capacity(positions.len());
        for (n, &position) in positions.iter().enumerate() {
            let place = layout.place(op, position)?;
            let shot = run_one(opts, &dirs, &expected, op, injector, &place).map_err(|e| {
                format!(
                    "operator `{op}`, fault {} (input record {position}: subtask {} record {}): \
                     {e}",
                    n + 1,
                    place.subtask,
                    place.local_record
                )
            })?;
            if !shot.fired {
                if n == 0 {
                    break;
                }
                return Err(format!(
                    "operator `{op}`: fault {} (subtask {} record {}) did not fire although \
                     earlier ones did",
                    n + 1,
                    place.subtask,
                    place.local_record
                ));
            }
            shots.push(shot);
        }
        if shots.is_empty() {
            skipped.push(SkippedOperator {
                uid: op.clone(),
                reason: "its fault never fired: the framework's FaultPlan does not inject faults \
                         into this operator (sources have no fault probe)"
                    .into(),
            });
            continue;
        }
        let c = summarize(op, injector, &shots);
        if opts.progress {
            eprintln!(
                "criticality: {op}: {} faults, mean recovery {:.1} ms, max {:.1} ms, {} \
                 duplicates, {} missing ({:.1} s)",
                c.faults,
                c.mean_recovery_ms,
                c.max_recovery_ms,
                c.duplicates,
                c.missing,
                t.elapsed().as_secs_f64()
            );
        }
        measured.push(c);
    }
    measured.sort_by(|a, b| b.mean_recovery_ms.total_cmp(&a.mean_recovery_ms));
    for (i, c) in measured.iter_mut().enumerate() {
        c.rank = i + 1;
    }
    Ok(CriticalityReport {
        bench: "criticality".into(),
        mode: "restart-all".into(),
        kind: opts.kind,
        faults_per_operator: opts.faults,
        records: opts.records,
        expected_per_run: expected.kept.len() as u64,
        parallelism: opts.parallelism,
        checkpoint_interval_ms: opts.checkpoint_interval_ms,
        restart_delay_ms: opts.restart_delay_ms,
        heartbeat_timeout_ms: opts.heartbeat_timeout_ms,
        restart_attempts: RESTART_ATTEMPTS,
        seed: opts.seed,
        answers_seed: opts.answers_seed,
        recovery_ms_definition: RECOVERY_MS_DEFINITION.into(),
        operators: measured,
        skipped,
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

/// The options' operators (deduplicated, in the order given), or what is wrong.
fn check(opts: &CriticalityOptions) -> Result<Vec<String>, String> {
    if opts.faults == 0 {
        return Err("--faults must be at least 1".into());
    }
    if opts.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if opts.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    if opts.heartbeat_timeout_ms < 20 {
        return Err("--heartbeat-timeout-ms must be at least 20".into());
    }
    if opts.operators.is_empty() {
        return Ok(OPERATORS.iter().map(|s| s.to_string()).collect());
    }
    let mut ops: Vec<String> = Vec::new();
    for op in &opts.operators {
        let op = op.trim();
        if !OPERATORS.contains(&op) {
            return Err(format!(
                "`{op}` is not an operator faults can be placed in: one of {} (`levels` only \
                 reads the thresholds and `malformed` gets no record from generated answers)",
                OPERATORS.join(", ")
            ));
        }
        if !ops.iter().any(|o| o == op) {
            ops.push(op.to_owned());
        }
    }
    Ok(ops)
}

/// Who injects an operator's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injector {
    /// The framework's [`FaultPlan`].
    Plan,
    /// [`FaultySink`].
    HarnessSink,
}

impl Injector {
    fn of(op: &str) -> Self {
        if op == uid::SINK {
            Injector::HarnessSink
        } else {
            Injector::Plan
        }
    }

    fn name(self) -> &'static str {
        match self {
            Injector::Plan => "fault_plan",
            Injector::HarnessSink => "harness_sink",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fault positions
// ---------------------------------------------------------------------------------------------

/// What becomes of each input record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Malformed,
    Dropped,
    Kept,
}

/// Which records an operator sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sees {
    All,
    Parsed,
    Kept,
}

impl Sees {
    fn of(op: &str) -> Self {
        match op {
            uid::FILTER => Sees::Parsed,
            uid::MAP | uid::SINK => Sees::Kept,
            _ => Sees::All,
        }
    }

    fn sees(self, c: Class) -> bool {
        match self {
            Sees::All => true,
            Sees::Parsed => c != Class::Malformed,
            Sees::Kept => c == Class::Kept,
        }
    }
}

/// The input: what becomes of each record, and which subtask reads it.
struct Layout<'a> {
    class: Vec<Class>,
    expected: &'a Expected,
    records: u64,
    parallelism: usize,
}

/// Where one fault goes.
#[derive(Debug, Clone, Copy)]
struct Placement {
    subtask: usize,
    /// The operator's record (per subtask, from the start of the run) to fail at.
    local_record: u64,
    /// The answer id whose reprocessing ends recovery.
    target_id: u64,
}

impl<'a> Layout<'a> {
    fn new(opts: &CriticalityOptions, expected: &'a Expected) -> Result<Self, String> {
        let mut class = vec![Class::Dropped; opts.records as usize];
        for k in &expected.kept {
            class[k.index as usize] = Class::Kept;
        }
        if expected.malformed > 0 {
            let levels = Thresholds::from_vec(default_levels());
            for (i, c) in class.iter_mut().enumerate() {
                if *c != Class::Kept
                    && clean_line(answer_json(opts.answers_seed, i as u64), &levels).is_err()
                {
                    *c = Class::Malformed;
                }
            }
        }
        if expected.kept.is_empty() {
            return Err(format!(
                "none of the {} generated answers reaches the sink: use more --records",
                opts.records
            ));
        }
        Ok(Layout {
            class,
            expected,
            records: opts.records,
            parallelism: opts.parallelism,
        })
    }

    fn share(&self, subtask: usize) -> std::ops::Range<u64> {
        SourceContext {
            subtask,
            parallelism: self.parallelism,
        }
        .share_of(self.records)
    }

    fn subtask_of(&self, i: u64) -> usize {
        (0..self.parallelism)
            .find(|&s| self.share(s).contains(&i))
            .unwrap_or(0)
    }

    /// The first kept answer at or after input record `i`, read by the same subtask.
    fn target_after(&self, i: u64) -> Option<&'a KeptRecord> {
        let end = self.share(self.subtask_of(i)).end;
        let kept = &self.expected.kept;
        kept.get(kept.partition_point(|k| k.index < i))
            .filter(|k| k.index < end)
    }

    /// `n` random input positions that have a kept answer after them in their subtask.
    fn positions(&self, n: usize, seed: u64) -> Result<Vec<u64>, String> {
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::with_capacity(n);
        let mut tries = 0u64;
        while out.len() < n {
            tries += 1;
            if tries > 1000 + 100 * n as u64 {
                return Err(format!(
                    "cannot place {n} faults in {} records: too few kept answers",
                    self.records
                ));
            }
            let i = rng.below(self.records);
            if self.target_after(i).is_some() {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// Where a fault of `op` at input `position` goes: the first record at or after it that
    /// `op` sees, as a record count of `op`'s subtask.
    fn place(&self, op: &str, position: u64) -> Result<Placement, String> {
        let sees = Sees::of(op);
        let subtask = self.subtask_of(position);
        let share = self.share(subtask);
        let class = |i: u64| self.class[i as usize];
        let at = (position..share.end)
            .find(|&i| sees.sees(class(i)))
            .ok_or_else(|| format!("no record after input record {position} reaches `{op}`"))?;
        let before = (share.start..at).filter(|&i| sees.sees(class(i))).count() as u64;
        // `connect` counts the broadcast thresholds too: all of them come first.
        let offset = if op == uid::CONNECT {
            default_levels().len() as u64
        } else {
            0
        };
        let target = self
            .target_after(at)
            .ok_or_else(|| format!("no kept answer after input record {position}"))?;
        Ok(Placement {
            subtask,
            local_record: before + offset,
            target_id: target.id,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------------

/// The output and checkpoint directories, deleted at the end.
struct WorkDirs {
    root: PathBuf,
    out: PathBuf,
    malformed: PathBuf,
    checkpoints: PathBuf,
}

impl WorkDirs {
    fn new() -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let root =
            std::env::temp_dir().join(format!("weir-criticality-{}-{nanos}", std::process::id()));
        let out = root.join("out");
        let dirs = WorkDirs {
            malformed: out.join("malformed"),
            checkpoints: root.join("checkpoints"),
            out,
            root,
        };
        std::fs::create_dir_all(&dirs.checkpoints)
            .map_err(|e| format!("cannot create {}: {e}", dirs.checkpoints.display()))?;
        Ok(dirs)
    }
}

impl Drop for WorkDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The figures of one run.
#[derive(Debug)]
struct Shot {
    fired: bool,
    recovery_ms: Option<f64>,
    output_resume_ms: Option<f64>,
    target_replayed: bool,
    from_scratch: bool,
    restarts: u64,
    duplicates: u64,
    missing: u64,
    unexpected: u64,
    wrong_lines: u64,
}

/// A panic of the harness's sink at its subtask's `at_record`-th record, once per run.
#[derive(Debug, Clone)]
struct SinkFault {
    subtask: usize,
    at_record: u64,
    fired: Arc<AtomicBool>,
}

/// The exactly-once file sink, failing as a [`FaultPlan`] fault would (the framework does not
/// inject faults into sinks): before the batch holding the fault's record.
struct FaultySink {
    inner: ProbedSink,
    fault: Option<SinkFault>,
    seen: u64,
}

impl Sink<String> for FaultySink {
    fn write_batch(&mut self, batch: &mut Vec<String>) -> Result<(), SinkError> {
        if let Some(f) = &self.fault {
            let (from, to) = (self.seen, self.seen + batch.len() as u64);
            self.seen = to;
            if (from..to).contains(&f.at_record) && !f.fired.swap(true, Ordering::SeqCst) {
                panic!(
                    "injected fault: operator `{}` panics at record {}",
                    uid::SINK,
                    f.at_record
                );
            }
        }
        self.inner.write_batch(batch)
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.inner.finish()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.inner.pre_commit(checkpoint)
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        self.inner.commit(checkpoint)
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.inner.initialize(restored)
    }
}

/// Whether the run's fault fired (readable from any thread).
#[derive(Clone)]
struct Fired {
    plan: FaultPlan,
    sink: Option<SinkFault>,
}

impl Fired {
    fn get(&self) -> bool {
        self.plan.fired() > 0
            || self
                .sink
                .as_ref()
                .is_some_and(|f| f.fired.load(Ordering::SeqCst))
    }
}

/// Records the fault's time in `probe` if the panic hook did not (a hang or an arbiter stop).
fn stamp_fault(probe: &RecoveryProbe) {
    let _ =
        probe
            .fault_ns
            .compare_exchange(0, clock_ns().max(1), Ordering::SeqCst, Ordering::SeqCst);
}

/// The graph of the `recovery` harness ([`build_cleaning_job`]): sink subtasks created after
/// the fault report to `probe` (so only the restarted job's receipt of the target counts), and
/// `sink_fault` makes the main sink fail.
fn build(
    env: &Env,
    opts: &CriticalityOptions,
    dirs: &WorkDirs,
    probe: Arc<RecoveryProbe>,
    fired: Fired,
) {
    let answers = Answers::Generated {
        records: opts.records,
        seed: opts.answers_seed,
    };
    let dir = dirs.out.clone();
    build_cleaning_job(
        env,
        &answers,
        opts.parallelism,
        &dirs.out,
        &FlatMapSetup::default(),
        move |cx: &SinkContext| {
            let restarted = fired.get();
            if restarted {
                // The watcher may not have seen an arbiter stop yet.
                stamp_fault(&probe);
            }
            let inner = ProbedSink::create(&dir, cx, restarted.then(|| probe.clone()))?;
            Ok(FaultySink {
                inner,
                fault: fired.sink.clone().filter(|f| f.subtask == cx.subtask),
                seen: 0,
            })
        },
    );
}

fn run_one(
    opts: &CriticalityOptions,
    dirs: &WorkDirs,
    expected: &Expected,
    op: &str,
    injector: Injector,
    place: &Placement,
) -> Result<Shot, String> {
    for d in [&dirs.out, &dirs.malformed] {
        clear_part_files(d).map_err(|e| format!("cannot prepare {}: {e}", d.display()))?;
    }
    let probe = Arc::new(RecoveryProbe::new(Some(place.target_id)));
    install_fault_hook(probe.clone());
    let (plan, sink) = match injector {
        Injector::Plan => (
            FaultPlan::new(vec![Fault::new(
                op,
                opts.kind.fault_kind(),
                place.local_record,
            )
            .in_subtask(place.subtask)]),
            None,
        ),
        Injector::HarnessSink => (
            FaultPlan::default(),
            Some(SinkFault {
                subtask: place.subtask,
                at_record: place.local_record,
                fired: Arc::new(AtomicBool::new(false)),
            }),
        ),
    };
    let fired = Fired {
        plan: plan.clone(),
        sink,
    };

    let mut cfg = EnvConfig::default();
    if opts.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(Duration::from_millis(opts.checkpoint_interval_ms));
    }
    cfg.checkpoint.directory = dirs.checkpoints.clone();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: RESTART_ATTEMPTS,
        delay: Duration::from_millis(opts.restart_delay_ms),
    });
    cfg.heartbeat_timeout = Duration::from_millis(opts.heartbeat_timeout_ms);
    cfg.metrics_interval = Duration::from_millis((opts.heartbeat_timeout_ms / 5).max(10));
    cfg.faults = plan;
    let env = Env::with_config(cfg);
    build(&env, opts, dirs, probe.clone(), fired.clone());

    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if fired.get() {
                    stamp_fault(&probe);
                    return;
                }
                std::thread::sleep(WATCH_INTERVAL);
            }
        });
        let r = env.execute(JOB);
        done.store(true, Ordering::SeqCst);
        r
    });
    let job_dir = dirs.checkpoints.join(JOB);
    if job_dir.exists() {
        std::fs::remove_dir_all(&job_dir)
            .map_err(|e| format!("cannot remove {}: {e}", job_dir.display()))?;
    }
    let result = result.map_err(|e| format!("the job failed: {e}"))?;

    let committed = read_committed(&dirs.out)
        .map_err(|e| format!("cannot read the output in {}: {e}", dirs.out.display()))?;
    let t = tally(expected, &committed.lines);
    let target = probe.ms_after_fault(&probe.target_after_fault_ns);
    let resume = probe.ms_after_fault(&probe.first_write_after_fault_ns);
    let restored = *probe
        .restored_checkpoint
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let fired = fired.get();
    Ok(Shot {
        fired,
        recovery_ms: target.or(resume),
        output_resume_ms: resume,
        target_replayed: target.is_some(),
        from_scratch: fired && restored.is_none(),
        restarts: result.checkpoints.as_ref().map_or(0, |s| s.num_restarts),
        duplicates: t.duplicates,
        missing: t.missing,
        unexpected: t.unexpected,
        wrong_lines: t.wrong_lines,
    })
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

fn summarize(op: &str, injector: Injector, shots: &[Shot]) -> OperatorCriticality {
    let each: Vec<f64> = shots.iter().filter_map(|s| s.recovery_ms).collect();
    let resume: Vec<f64> = shots.iter().filter_map(|s| s.output_resume_ms).collect();
    let sum = |f: fn(&Shot) -> u64| shots.iter().map(f).sum::<u64>();
    OperatorCriticality {
        rank: 0,
        uid: op.to_owned(),
        injected_by: injector.name().into(),
        faults: shots.len(),
        mean_recovery_ms: mean(&each),
        p50_recovery_ms: median(&each).unwrap_or(0.0),
        min_recovery_ms: each.iter().copied().reduce(f64::min).unwrap_or(0.0),
        max_recovery_ms: each.iter().copied().reduce(f64::max).unwrap_or(0.0),
        mean_output_resume_ms: mean(&resume),
        recovery_ms_each: each,
        restarts_from_scratch: shots.iter().filter(|s| s.from_scratch).count(),
        restarts: sum(|s| s.restarts),
        target_not_replayed: shots.iter().filter(|s| !s.target_replayed).count(),
        duplicates: sum(|s| s.duplicates),
        missing: sum(|s| s.missing),
        unexpected: sum(|s| s.unexpected),
        wrong_lines: sum(|s| s.wrong_lines),
    }
}

/// The report as a table (for a terminal).
pub fn table(r: &CriticalityReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "criticality (restart-all, {} faults, {} per operator, {} records, parallelism {}, \
         checkpoints every {} ms, restart delay {} ms, {:.1} s)",
        r.kind,
        r.faults_per_operator,
        r.records,
        r.parallelism,
        r.checkpoint_interval_ms,
        r.restart_delay_ms,
        r.total_seconds
    );
    let _ = writeln!(
        s,
        "{:>4}  {:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>5} {:>7}",
        "rank",
        "operator",
        "faults",
        "mean ms",
        "p50 ms",
        "max ms",
        "resume ms",
        "scratch",
        "restarts",
        "dup",
        "missing"
    );
    for c in &r.operators {
        let _ = writeln!(
            s,
            "{:>4}  {:<10} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8} {:>8} {:>5} {:>7}",
            c.rank,
            c.uid,
            c.faults,
            c.mean_recovery_ms,
            c.p50_recovery_ms,
            c.max_recovery_ms,
            c.mean_output_resume_ms,
            c.restarts_from_scratch,
            c.restarts,
            c.duplicates,
            c.missing
        );
    }
    let mut reasons: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for k in &r.skipped {
        reasons.entry(&k.reason).or_default().push(&k.uid);
    }
    for (reason, uids) in reasons {
        let _ = writeln!(s, "skipped {}: {reason}", uids.join(", "));
    }
    let _ = write!(
        s,
        "recovery: fault -> the restarted job's sink receives the first kept record the failure \
         kept from it; resume: fault -> the restarted job's first output; scratch: runs restarted \
         without a checkpoint"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criticality_of_a_tiny_job_measures_every_operator_exactly_once() {
        let opts = CriticalityOptions {
            faults: 2,
            records: 20_000,
            checkpoint_interval_ms: 10,
            operators: vec![uid::FLAT_MAP.into(), uid::SINK.into()],
            ..CriticalityOptions::default()
        };
        let r = run(&opts).unwrap();
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        assert_eq!(r.operators.len(), 2);
        for c in &r.operators {
            assert_eq!(c.faults, 2, "{c:?}");
            assert!(c.mean_recovery_ms > 0.0, "{c:?}");
            assert!(c.recovery_ms_each.iter().all(|&ms| ms > 0.0), "{c:?}");
            assert_eq!((c.duplicates, c.missing), (0, 0), "{c:?}");
            assert_eq!((c.unexpected, c.wrong_lines), (0, 0), "{c:?}");
        }
        assert!(r.operators[0].mean_recovery_ms >= r.operators[1].mean_recovery_ms);
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(json["faults_per_operator"], 2);
        assert_eq!(json["operators"][1]["uid"], r.operators[1].uid.as_str());
        let back: CriticalityReport = serde_json::from_value(json).unwrap();
        assert_eq!(back.operators.len(), 2);
    }

    #[test]
    fn criticality_places_faults_in_each_operators_own_record_count() {
        let opts = CriticalityOptions {
            records: 1_000,
            parallelism: 2,
            ..CriticalityOptions::default()
        };
        let expected = Expected::generated(opts.records, opts.answers_seed);
        let layout = Layout::new(&opts, &expected).unwrap();
        // Record 600 is the 100th record of subtask 1 (share 500..1000).
        let flat_map = layout.place(uid::FLAT_MAP, 600).unwrap();
        assert_eq!((flat_map.subtask, flat_map.local_record), (1, 100));
        let connect = layout.place(uid::CONNECT, 600).unwrap();
        assert_eq!(connect.local_record, 100 + default_levels().len() as u64);
        let sink = layout.place(uid::SINK, 600).unwrap();
        let kept_before = expected
            .kept
            .iter()
            .filter(|k| (500..600).contains(&k.index))
            .count() as u64;
        assert_eq!((sink.subtask, sink.local_record), (1, kept_before));
        assert_eq!(sink.target_id, flat_map.target_id);
        let first_kept = expected.kept.iter().find(|k| k.index >= 600).unwrap();
        assert_eq!(flat_map.target_id, first_kept.id);
        assert!(check(&CriticalityOptions {
            operators: vec!["levels".into()],
            ..opts.clone()
        })
        .is_err());
    }
}
