//! `recovery`: how long the answer-cleaning job (`weir_examples::answers`) takes to recover from
//! one or several faults in its `flat_map`, by restart-all or by promoting a buffer-queue
//! backup (BQBS), and whether its output is still exactly once. Prints one JSON line:
//!
//! ```text
//! {"bench":"recovery","mode":"bqbs","kind":"panic","failures":4,"records":N,"fault_at":K,
//!  "recovery_ms":..,"recovery_ms_each":[..,..,..,..],"promotions":4,"restarts":0,
//!  "last_failover_ms":..,"first_output_after_fault_ms":..,"total_seconds":..,
//!  "duplicates":0,"missing":0,"faults":[{..},..],...}
//! ```
//!
//! ```text
//! cargo run --release -p weir-benches --bin recovery -- --mode restart-all --records 1000000 \
//!     --fault-at 500000 --checkpoint-interval-ms 1000 --failures 4
//! cargo run --release -p weir-benches --bin recovery -- --mode bqbs --records 1000000 \
//!     --fault-at 500000 --failures 4 --kind hang
//! cargo run --release -p weir-benches --bin recovery -- --input /tmp/answers.jsonl \
//!     --fault-at 500000 --output /tmp/recovery-out
//! ```
//!
//! The graph is `weir_benches::recovery_support::build_cleaning_job`: the operators, uids and
//! functions of `build_answer_cleaning` (`levels`, `source`, `connect`, `flat_map`, `split`,
//! `filter`, `map`, `sink`, `malformed`), but both sinks are the exactly-once part-file sink of
//! `weir_testing` (`TwoPhaseFileSink`, two-phase commit on the checkpoint hooks; `sink`
//! through `recovery_support::ProbedSink`, which times it): `sink` writes
//! `part-<subtask>-<checkpoint>` files into the output directory, `malformed` into its
//! `malformed/` subdirectory. (The `map` does not count levels: those counters are not
//! checkpointed state and would count replayed records twice.)
//!
//! # Modes
//!
//! - `restart-all`: the framework stops every subtask, waits `--restart-delay-ms`, redeploys
//!   and restores the last complete checkpoint (or starts over without one), and the sources
//!   replay from their checkpointed positions. A hang is caught by the job's heartbeat: every
//!   subtask is sampled every `--heartbeat-ms` and declared hung after
//!   `--heartbeat-timeout-ms` without an answer (`EnvConfig::metrics_interval` and
//!   `heartbeat_timeout`; the framework's default timeout is 30 s).
//! - `bqbs`: `flat_map` is backed up (`with_backup_policy`, heartbeat every `--heartbeat-ms`,
//!   timeout `--heartbeat-timeout-ms`; defaults 50 / 250 ms as `BackupPolicy::default()`). A
//!   backed-up operator is never chained: `flat_map` runs as its own actor on its own
//!   arbiter thread, with its backup on another; `split` .. `sink` stay one chained actor.
//!   A failure of the primary promotes the backup, which replays from the primary's last
//!   checkpointed state (`flat_map`'s counters are operator state, so it is a stateful
//!   operator: the replay covers the input since the last completed checkpoint) and emits
//!   only what the downstream has not received; a fresh backup is started for the next
//!   failure. The job's own heartbeat keeps its default (30 s), so a hang is the backup
//!   supervisor's to catch. Checkpoints (`--checkpoint-interval-ms`) still run: they commit
//!   the sink's files and bound the backed-up operator's replay. That replay dominates a BQBS
//!   recovery: on a 2-core machine about 7 ms + 0.4 µs per replayed record (detection of a
//!   panic or a stop and the promotion take 1 to 3 ms), so with 1 s checkpoints a fault
//!   before the first completed checkpoint replays everything read so far; a short interval
//!   (e.g. `--checkpoint-interval-ms 20`) keeps failovers in milliseconds.
//!   `faults[j].replayed_to_fault` says how many records the promoted backup processed
//!   before it reached the fault's record.
//!
//! # Faults
//!
//! `--failures K` faults of `--kind` (panic, hang, or stop: the arbiter thread stops) in one
//! `flat_map` subtask, the *failed subtask*: the first at input record `--fault-at` (0-based;
//! for generated input it is the answer id), the others spread evenly over the rest of that
//! subtask's records (with `n` of them from the first fault on, fault `j` is `j * n / K`
//! records after it, so the last one has `n / K` records left for its recovery). With
//! parallelism p, generated record `i` is read by the source subtask whose contiguous share
//! holds it (forward to the same `flat_map` subtask); a file is read whole by source subtask 0
//! and dealt round robin per record, so record `i` goes to `flat_map` subtask `i % p`.
//!
//! The faults are record faults (`weir_testing::RecordFaults`), not `FaultPlan` faults:
//! `flat_map` is `FaultyParseAndLevel`, which fails when it first sees a fault's input record
//! (by its line), before processing it (see `recovery_support`, "Faults in `flat_map`"). A
//! plan fault counts an operator instance's records, and under restart-all a restarted
//! instance counts from zero at its restored position, which is not known in advance: the 2nd
//! to K-th fault would land at unknown records. The record itself is the same in every attempt and in a promoted
//! backup. A hang is released (and ends in a panic) when the job stops or restarts, as the
//! framework's own hangs are; a stop lets the arbiter finish its current poll, so the failed
//! instance may process a few more records (`processed_after_fault`).
//!
//! # What is measured
//!
//! Times come from one monotonic clock; a fault's time is taken in the failing thread just
//! before it panics, hangs or stops its arbiter.
//! - `recovery_ms_each[j]`: fault `j` → the sink receives fault `j`'s *target* record: the
//!   first record of the failed subtask that passes parse, level and filter and that the
//!   failed instance did not process (for a panic or a hang the first at or after the fault's
//!   record, which may itself be dropped; for a stop the first after the records it processed
//!   in its last poll). The failure kept it from the sink, so this is its first processing
//!   after the recovery. Restart-all: it includes detection, the restart delay, the redeploy,
//!   the restore and the replay from the restored checkpoint (or from the start); `flat_map`
//!   .. `sink` are one chained actor, so the sink receives the target microseconds after
//!   `flat_map` processes it. BQBS: it includes detection (immediate for a panic or a stop,
//!   the heartbeat timeout for a hang), the promotion (`last_failover_ms`: detection → the
//!   new primary running), the replay of the input since the last checkpoint (output the
//!   downstream has is not sent again), and one channel hop to the `split` .. `sink` actor.
//!   `recovery_ms` is the first failure's.
//! - `first_output_after_fault_ms`, `first_commit_after_fault_ms`, `redeploy_ms` (restart-all
//!   only, after the first failure): a sink subtask of the restarted job receives its first
//!   records, first commits records it wrote itself, is created.
//! - `promotions`, `last_failover_ms` and `backups` from `JobResult::backups`; `restarts` from
//!   the checkpoint statistics.
//!
//! After the job, every committed line is read back and compared with the expected output,
//! computed sequentially with the same functions before the job starts: `duplicates` counts
//! extra copies of expected ids, `missing` expected ids not committed, `unexpected` ids that
//! should not be there, `wrong_lines` lines that differ from the expected line.

// The output's `json!` has many keys.
#![recursion_limit = "512"]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod report;

use clap::Parser;
use report::{details, summary, Finished};
use serde_json::Value;
use weir::sink::SinkContext;
use weir::{BackupPolicy, Env, EnvConfig, JobResult, RestartStrategy};
use weir_benches::clock_ns;
use weir_benches::recovery_support::{
    build_cleaning_job, input_lines_at, tally, Expected, FaultWatch, FlatMapFaults, FlatMapSetup,
    Kind, ProbedSink, RecoveryProbe,
};
use weir_examples::answers::{Answers, DEFAULT_SEED};
use weir_testing::{clear_part_files, quiet_injected_panics_with, read_committed, FaultPlan};

/// The job's name (its checkpoints go to `<checkpoint dir>/<name>/`).
const JOB: &str = "recovery";
/// Restarts allowed beyond one per fault.
const SPARE_RESTARTS: u32 = 2;

/// How the job recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Restart every subtask from the last checkpoint.
    RestartAll,
    /// Promote `flat_map`'s buffer-queue backup.
    Bqbs,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::RestartAll => "restart-all",
            Mode::Bqbs => "bqbs",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "restart-all" => Ok(Mode::RestartAll),
            "bqbs" => Ok(Mode::Bqbs),
            _ => Err(format!("unknown mode `{s}`: restart-all or bqbs")),
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "recovery",
    about = "Recovery time and exactly-once output of the answer-cleaning job after injected \
             faults in flat_map, by restart-all or by promoting a buffer-queue backup (bqbs); \
             prints one JSON line."
)]
struct Args {
    /// Recovery mode: `restart-all`, or `bqbs` (flat_map backed up).
    #[arg(long, default_value_t = Mode::RestartAll, value_name = "MODE")]
    mode: Mode,
    /// Generated answers (default 1000000); not with --input.
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// An answers JSON Lines file to read instead of generated answers.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Index (0-based) of the input record at which `flat_map` first fails (default: half the
    /// records). For generated input it is the answer id.
    #[arg(long, value_name = "K")]
    fault_at: Option<u64>,
    /// Successive faults in the failed flat_map subtask: the first at --fault-at, the others
    /// spread evenly over the rest of its records.
    #[arg(long, default_value_t = 1, value_name = "K")]
    failures: usize,
    /// How flat_map fails: panic, hang (caught by a heartbeat timeout) or stop (its arbiter
    /// thread stops).
    #[arg(long, default_value_t = Kind::Panic, value_name = "KIND")]
    kind: Kind,
    /// Checkpoint interval; 0 turns checkpoints off (a restart then starts over).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    checkpoint_interval_ms: u64,
    /// Delay before a restart (restart-all; Flink's fixed-delay default is 1000 ms).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    restart_delay_ms: u64,
    /// Heartbeat period: of the backed-up primary (bqbs), or the job's sampling of every
    /// subtask (restart-all).
    #[arg(long, default_value_t = 50, value_name = "MS")]
    heartbeat_ms: u64,
    /// A primary (bqbs) or subtask (restart-all) silent this long is declared hung.
    #[arg(long, default_value_t = 250, value_name = "MS")]
    heartbeat_timeout_ms: u64,
    /// Parallelism of every operator but `levels`.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Seed of the generated answers.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Keep the committed output here (default: a temporary directory, deleted at the end).
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Checkpoint directory (default: a temporary directory, deleted at the end).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
}

/// The records of the failed `flat_map` subtask: input indices `first`, `first + stride`, ..
/// (`count` of them).
struct FailedSubtask {
    subtask: usize,
    first: u64,
    stride: u64,
    count: u64,
}

impl FailedSubtask {
    fn of(answers: &Answers, records: u64, p: usize, fault_at: u64) -> Self {
        match answers {
            Answers::Generated { .. } => {
                let share = |s: usize| {
                    weir::source::SourceContext {
                        subtask: s,
                        parallelism: p,
                    }
                    .share_of(records)
                };
                let s = (0..p)
                    .find(|&s| share(s).contains(&fault_at))
                    .expect("fault_at < records");
                let range = share(s);
                FailedSubtask {
                    subtask: s,
                    first: range.start,
                    stride: 1,
                    count: range.end - range.start,
                }
            }
            Answers::Lines(_) => {
                let s = fault_at % p as u64;
                FailedSubtask {
                    subtask: s as usize,
                    first: s,
                    stride: p as u64,
                    count: (records - s).div_ceil(p as u64),
                }
            }
        }
    }

    fn reads(&self, i: u64) -> bool {
        i >= self.first && self.index(self.local(i)) == i && self.local(i) < self.count
    }

    /// The position of input record `i` among the subtask's records.
    fn local(&self, i: u64) -> u64 {
        (i - self.first) / self.stride
    }

    fn index(&self, local: u64) -> u64 {
        self.first + local * self.stride
    }
}

/// A fresh temporary directory.
fn temp_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "weir-recovery-{what}-{}-{nanos}",
        std::process::id()
    ))
}

/// Temporary directories, deleted when the run ends (also on an error).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Checks the flags that need no input.
fn check_args(args: &Args) -> Result<(), String> {
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    if args.failures == 0 {
        return Err("--failures must be at least 1".into());
    }
    if args.heartbeat_ms < 10 || args.heartbeat_timeout_ms <= args.heartbeat_ms {
        return Err(
            "--heartbeat-ms must be at least 10 and --heartbeat-timeout-ms longer than it".into(),
        );
    }
    Ok(())
}

/// The input: the `--input` file, or `--records` generated answers.
fn answers_of(args: &Args) -> Result<Answers, String> {
    Ok(match (&args.input, args.records) {
        (Some(_), Some(_)) => {
            return Err(
                "--records does not apply with --input (the file's records are read)".into(),
            )
        }
        (Some(path), None) => {
            let meta = std::fs::metadata(path)
                .map_err(|e| format!("cannot read input {}: {e}", path.display()))?;
            if !meta.is_file() {
                return Err(format!(
                    "--input must be a file (a directory's files are dealt to source subtasks, \
                     so a record's subtask would not be known): {}",
                    path.display()
                ));
            }
            Answers::Lines(path.clone())
        }
        (None, records) => Answers::Generated {
            records: records.unwrap_or(1_000_000),
            seed: args.seed,
        },
    })
}

/// Where the faults go, and the watch that times their recovery.
struct Placed {
    failed: FailedSubtask,
    /// The input records of the faults.
    indices: Vec<u64>,
    /// Their lines (each occurs once in the input).
    lines: Vec<String>,
    watch: FaultWatch,
}

/// Places `k` faults in the failed subtask's records from `fault_at` on, evenly; each must
/// have a kept record before the next and a line of its own.
fn place_faults(
    answers: &Answers,
    expected: &Expected,
    p: usize,
    k: usize,
    fault_at: u64,
) -> Result<Placed, String> {
    let records = expected.records;
    let failed = FailedSubtask::of(answers, records, p, fault_at);
    let first = failed.local(fault_at);
    let rest = failed.count - first;
    if (rest as usize) < k {
        return Err(format!(
            "{k} faults do not fit in the {rest} records of flat_map subtask {} from --fault-at \
             on",
            failed.subtask
        ));
    }
    let locals: Vec<u64> = (0..k as u64).map(|j| first + j * rest / k as u64).collect();
    let faults: Vec<(u64, u64)> = locals.iter().map(|&l| (failed.index(l), l)).collect();
    let kept: Vec<_> = expected
        .kept
        .iter()
        .filter(|r| failed.reads(r.index))
        .map(|r| (*r, failed.local(r.index)))
        .collect();
    let watch = FaultWatch::new(&faults, &kept);
    if let Some((j, _)) = watch
        .faults
        .iter()
        .enumerate()
        .find(|(_, f)| f.window.is_empty())
    {
        return Err(format!(
            "no record between fault {} (input record {}) and the next fault (or the end of \
             the subtask) reaches the sink: its recovery cannot be seen",
            j + 1,
            faults[j].0
        ));
    }
    let indices: Vec<u64> = faults.iter().map(|f| f.0).collect();
    let lines = input_lines_at(answers, &indices).map_err(|e| format!("cannot read input: {e}"))?;
    if let Some(((_, n), i)) = lines.iter().zip(&indices).find(|((_, n), _)| *n != 1) {
        return Err(format!(
            "the line of input record {i} occurs {n} times in the input: a fault is keyed by \
             its record's line, choose another --fault-at"
        ));
    }
    let lines: Vec<String> = lines.into_iter().map(|(l, _)| l).collect();
    Ok(Placed {
        failed,
        indices,
        lines,
        watch,
    })
}

/// The output and checkpoint directories, emptied; temporary ones are deleted at the end.
struct Dirs {
    out: PathBuf,
    malformed: PathBuf,
    checkpoints: PathBuf,
    _cleanup: Cleanup,
}

fn dirs(args: &Args) -> Result<Dirs, String> {
    let mut cleanup = Cleanup(Vec::new());
    let out_dir = match &args.output {
        Some(d) => d.clone(),
        None => {
            let d = temp_dir("out");
            cleanup.0.push(d.clone());
            d
        }
    };
    let malformed_dir = out_dir.join("malformed");
    for d in [&out_dir, &malformed_dir] {
        clear_part_files(d).map_err(|e| format!("cannot prepare {}: {e}", d.display()))?;
    }
    let checkpoint_dir = match &args.checkpoint_dir {
        Some(d) => d.clone(),
        None => {
            let d = temp_dir("chk");
            cleanup.0.push(d.clone());
            d
        }
    };
    // Checkpoints of an earlier run of this job would be restored by a restart that happens
    // before this run completes one.
    let job_chk = checkpoint_dir.join(JOB);
    if job_chk.exists() {
        eprintln!(
            "recovery: removing checkpoints of an earlier run in {}",
            job_chk.display()
        );
        std::fs::remove_dir_all(&job_chk)
            .map_err(|e| format!("cannot remove {}: {e}", job_chk.display()))?;
    }
    Ok(Dirs {
        out: out_dir,
        malformed: malformed_dir,
        checkpoints: checkpoint_dir,
        _cleanup: cleanup,
    })
}

/// The job's configuration (checkpoints, restarts, failure detection) and `flat_map`'s
/// setup (its faults; in BQBS mode its backup).
fn config(
    args: &Args,
    checkpoint_dir: &std::path::Path,
    plan: FaultPlan,
    injected: Arc<FlatMapFaults>,
    restart_attempts: u32,
) -> (EnvConfig, FlatMapSetup) {
    let heartbeat = Duration::from_millis(args.heartbeat_ms);
    let heartbeat_timeout = Duration::from_millis(args.heartbeat_timeout_ms);
    let mut cfg = EnvConfig::default();
    if args.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(Duration::from_millis(args.checkpoint_interval_ms));
    }
    cfg.checkpoint.directory = checkpoint_dir.to_owned();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: restart_attempts,
        delay: Duration::from_millis(args.restart_delay_ms),
    });
    cfg.faults = plan;
    let mut setup = FlatMapSetup {
        backup: None,
        faults: Some(injected),
    };
    match args.mode {
        Mode::RestartAll => {
            cfg.metrics_interval = heartbeat;
            cfg.heartbeat_timeout = heartbeat_timeout;
        }
        Mode::Bqbs => {
            setup.backup = Some(BackupPolicy::default().heartbeat(heartbeat, heartbeat_timeout));
        }
    }
    (cfg, setup)
}

/// The job's expected output, computed sequentially, and the seconds that took.
fn expected_of(answers: &Answers) -> Result<(Expected, f64), String> {
    let t = Instant::now();
    let expected = match answers {
        Answers::Generated { records, seed } => Expected::generated(*records, *seed),
        Answers::Lines(path) => Expected::from_file(path)
            .map_err(|e| format!("cannot read input {}: {e}", path.display()))?,
    };
    Ok((expected, t.elapsed().as_secs_f64()))
}

/// The line on stderr just before the job is built and started (`paper` places the job's
/// start on its clock by it).
fn announce(
    args: &Args,
    records: u64,
    expect_seconds: f64,
    failed_subtask: usize,
    indices: &[u64],
    probe: &RecoveryProbe,
) {
    let first_target = probe.watch.as_ref().and_then(|w| w.faults[0].target());
    let k = args.failures;
    eprintln!(
        "recovery: {records} records ({:.2} s to compute the expected output), mode {}, {k} \
         {} fault(s) in flat_map subtask {} at input records {indices:?}, first target id \
         {:?}, checkpoints every {} ms, restart delay {} ms",
        expect_seconds,
        args.mode,
        args.kind,
        failed_subtask,
        first_target.map(|w| w.id),
        args.checkpoint_interval_ms,
        args.restart_delay_ms
    );
}

/// Builds the job (its sink writing to `out`, reporting to `probe`) and runs it: its result,
/// its start on the clock, and the seconds it ran.
fn execute(
    args: &Args,
    answers: &Answers,
    cfg: EnvConfig,
    setup: &FlatMapSetup,
    out: &std::path::Path,
    probe: &Arc<RecoveryProbe>,
) -> Result<(JobResult, u64, f64), String> {
    let env = Env::with_config(cfg);
    let dir = out.to_owned();
    let sink_probe = probe.clone();
    build_cleaning_job(
        &env,
        answers,
        args.parallelism,
        out,
        setup,
        move |cx: &SinkContext| ProbedSink::create(&dir, cx, Some(sink_probe.clone())),
    );
    let started = Instant::now();
    let started_ns = clock_ns();
    let result = env
        .execute(JOB)
        .map_err(|e| format!("the job failed: {e}"))?;
    Ok((result, started_ns, started.elapsed().as_secs_f64()))
}

fn run(args: Args) -> Result<Value, String> {
    check_args(&args)?;
    let answers = answers_of(&args)?;
    clock_ns(); // fixes the clock's base: every time taken later is > 0

    // The expected output, before the job (so it does not compete with it).
    let (expected, expect_seconds) = expected_of(&answers)?;
    let records = expected.records;
    let k = args.failures;
    let fault_at = args.fault_at.unwrap_or(records / 2);
    if fault_at >= records {
        return Err(format!(
            "--fault-at {fault_at} is not a record of the input (it has {records})"
        ));
    }
    let placed = place_faults(&answers, &expected, args.parallelism, k, fault_at)?;
    let dirs = dirs(&args)?;

    quiet_injected_panics_with("recovery: ");
    let probe = Arc::new(RecoveryProbe::with_watch(placed.watch));
    // No plan faults: the plan only carries the job's release of hung subtasks.
    let plan = FaultPlan::new(Vec::new());
    let injected = Arc::new(FlatMapFaults::new(
        args.kind,
        placed.lines,
        probe.clone(),
        plan.clone(),
    ));
    let restart_attempts = k as u32 + SPARE_RESTARTS;
    let (cfg, setup) = config(
        &args,
        &dirs.checkpoints,
        plan,
        injected.clone(),
        restart_attempts,
    );
    let (batch_size, arbiters) = (cfg.batch_size, cfg.arbiters);
    announce(
        &args,
        records,
        expect_seconds,
        placed.failed.subtask,
        &placed.indices,
        &probe,
    );

    let (result, started_ns, total_seconds) =
        execute(&args, &answers, cfg, &setup, &dirs.out, &probe)?;

    let read = |d: &std::path::Path| {
        read_committed(d).map_err(|e| format!("cannot read the output in {}: {e}", d.display()))
    };
    let (main, side) = (read(&dirs.out)?, read(&dirs.malformed)?);
    let finished = Finished {
        args: &args,
        answers: &answers,
        expected: &expected,
        fault_at,
        failed_subtask: placed.failed.subtask,
        restart_attempts,
        batch_size,
        arbiters,
        probe: &probe,
        faults_fired: injected.fired(),
        result,
        started_ns,
        total_seconds,
        tally: tally(&expected, &main.lines),
        main,
        side,
    };
    let mut out = summary(&finished);
    if let (Value::Object(a), Value::Object(b)) = (&mut out, details(&finished)) {
        a.extend(b);
    }
    drop(dirs);
    Ok(out)
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(json) => {
            println!("{json}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("recovery: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_with(extra: &[&str]) -> Value {
        let mut argv = vec!["recovery", "--records", "20000"];
        argv.extend_from_slice(extra);
        run(Args::parse_from(argv)).unwrap()
    }

    fn assert_exactly_once(j: &Value) {
        assert_eq!(j["duplicates"], 0, "{j}");
        assert_eq!(j["missing"], 0, "{j}");
        assert_eq!(j["unexpected"], 0, "{j}");
        assert_eq!(j["wrong_lines"], 0, "{j}");
    }

    fn recoveries(j: &Value) -> Vec<f64> {
        j["recovery_ms_each"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap_or(0.0))
            .collect()
    }

    #[test]
    fn bqbs_recovers_two_panics_by_promotion() {
        // A heartbeat timeout far above any pause of a loaded machine: a panic is detected
        // at once, and a 250 ms timeout once promoted a busy (not failed) debug-build
        // subtask a third time on a machine at load 5.
        let j = run_with(&[
            "--mode",
            "bqbs",
            "--failures",
            "2",
            "--heartbeat-timeout-ms",
            "5000",
        ]);
        assert_exactly_once(&j);
        let each = recoveries(&j);
        assert_eq!(each.len(), 2, "{j}");
        assert!(each.iter().all(|&ms| ms > 0.0), "{j}");
        assert_eq!(j["recovery_ms"].as_f64(), Some(each[0]));
        assert_eq!(j["faults_fired"], 2, "{j}");
        assert_eq!(j["promotions"], 2, "{j}");
        assert_eq!(j["restarts"], 0, "{j}");
        assert!(j["last_failover_ms"].as_f64().is_some(), "{j}");
        for f in j["faults"].as_array().unwrap() {
            assert_eq!(f["target_receipts_before_fault"], 0, "{j}");
            assert_eq!(f["target_receipts_after_fault"], 1, "{j}");
        }
    }

    /// A hang, in both modes: it is caught by the heartbeat, released when the job restarts or
    /// ends (not after the 5 s join timeout), and recovered. (No arbiter stop here: a stopped
    /// arbiter ends only when its actor's poll returns, and on a job this small, unoptimized,
    /// that poll can run to the end of the input, after which the framework fails the job at
    /// its final commit, "a subtask went away before the final commit". The release runs of
    /// the bench cover stops.)
    #[test]
    fn hangs_recover_in_both_modes() {
        for mode in ["restart-all", "bqbs"] {
            let started = Instant::now();
            let j = run_with(&[
                "--mode",
                mode,
                "--kind",
                "hang",
                "--checkpoint-interval-ms",
                "20",
                // 1 s: a 250 ms timeout took busy subtasks of a loaded machine for hung ones.
                "--heartbeat-timeout-ms",
                "1000",
            ]);
            let ctx = format!("{mode}: {j}");
            assert_exactly_once(&j);
            assert_eq!(j["faults_fired"], 1, "{ctx}");
            assert!(recoveries(&j)[0] >= 200.0, "{ctx}");
            if mode == "bqbs" {
                assert_eq!((&j["promotions"], &j["restarts"]), (&json!(1), &json!(0)));
            } else {
                assert_eq!(j["restarts"], 1, "{ctx}");
            }
            // Held up by the hung thread, the job would take the heartbeat timeout (1 s) and
            // the 5 s join timeout at least; released, a fraction of that.
            assert!(
                started.elapsed() < Duration::from_millis(5_900),
                "{ctx}: a hung thread held up the job"
            );
        }
    }

    #[test]
    fn faults_are_spread_over_the_rest_of_the_failed_subtask() {
        let answers = Answers::Generated {
            records: 1_000,
            seed: 0,
        };
        let s = FailedSubtask::of(&answers, 1_000, 2, 600);
        assert_eq!((s.subtask, s.first, s.stride, s.count), (1, 500, 1, 500));
        assert_eq!(s.local(600), 100);
        let f = FailedSubtask::of(&Answers::Lines("x".into()), 1_001, 2, 7);
        assert_eq!((f.subtask, f.first, f.stride, f.count), (1, 1, 2, 500));
        assert!(f.reads(999) && !f.reads(1_000) && !f.reads(8));
        assert_eq!(f.index(f.local(999)), 999);
    }
}
