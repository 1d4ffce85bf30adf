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
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_examples::answers::{uid, DEFAULT_SEED};
use weir_testing::quiet_released_hangs;

use crate::clock_ns;
use crate::recovery_support::Expected;
pub use crate::recovery_support::Kind;

mod placement;
mod shot;

use placement::{Injector, Layout};
use shot::{run_one, summarize, Shot, WorkDirs};

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
        let shots = shots_of(opts, &dirs, &expected, &layout, &positions, op, injector)?;
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
            log_progress(&c, t.elapsed());
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

/// One operator's shots, a fault at each position: none if the first fault did not fire (the
/// operator has no fault probe); an error if a later one did not.
fn shots_of(
    opts: &CriticalityOptions,
    dirs: &WorkDirs,
    expected: &Expected,
    layout: &Layout,
    positions: &[u64],
    op: &str,
    injector: Injector,
) -> Result<Vec<Shot>, String> {
    let mut shots = Vec::with_capacity(positions.len());
    for (n, &position) in positions.iter().enumerate() {
        let place = layout.place(op, position)?;
        let shot = run_one(opts, dirs, expected, op, injector, &place).map_err(|e| {
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
    Ok(shots)
}

/// The progress line of one measured operator.
fn log_progress(c: &OperatorCriticality, took: Duration) {
    eprintln!(
        "criticality: {}: {} faults, mean recovery {:.1} ms, max {:.1} ms, {} \
         duplicates, {} missing ({:.1} s)",
        c.uid,
        c.faults,
        c.mean_recovery_ms,
        c.max_recovery_ms,
        c.duplicates,
        c.missing,
        took.as_secs_f64()
    );
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
    use weir_examples::answers::default_levels;

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
