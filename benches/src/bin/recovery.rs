//! `recovery`: how long the answer-cleaning job (`weir_examples::answers`) takes to recover from
//! a fault, and whether its output is still exactly once. Prints one JSON line:
//!
//! ```text
//! {"bench":"recovery","mode":"restart-all","records":N,"fault_at":K,"recovery_ms":..,
//!  "first_output_after_fault_ms":..,"first_commit_after_fault_ms":..,"total_seconds":..,
//!  "duplicates":0,"missing":0,...}
//! ```
//!
//! ```text
//! cargo run --release -p weir-benches --bin recovery -- --mode restart-all --records 1000000 \
//!     --fault-at 500000 --checkpoint-interval-ms 1000
//! cargo run --release -p weir-benches --bin recovery -- --input /tmp/answers.jsonl \
//!     --fault-at 500000 --output /tmp/recovery-out
//! ```
//!
//! The graph has the operators and uids of `build_answer_cleaning` (`levels`, `source`,
//! `connect`, `flat_map`, `split`, `filter`, `map`, `sink`, `malformed`) and the same functions
//! (`Attach`, `ParseAndLevel`, `DropUnwanted`, `format_cleaned`), but both sinks are the
//! exactly-once part-file sink of `weir_benches::recovery_support` (two-phase commit on the
//! checkpoint hooks): `sink` writes `part-<subtask>-<checkpoint>` files into the output
//! directory, `malformed` into its `malformed/` subdirectory. (The `map` does not count levels:
//! those counters are not checkpointed state and would count replayed records twice.)
//!
//! A `Panic` fault is injected into `flat_map` at input record `--fault-at` (0-based; for
//! generated input that is the answer id). The framework counts a fault's record per operator
//! subtask, so the harness turns the input index into a subtask and a record of it: with
//! parallelism p, generated record `i` is read by the source subtask whose contiguous share
//! holds it (forward to the same `flat_map` subtask); a file is read whole by source subtask 0
//! and dealt round robin per record, so record `i` goes to `flat_map` subtask `i % p` as its
//! record `i / p`. The fault fires before `flat_map` processes the batch holding that record.
//!
//! Restart-all recovery (the framework's only one): the job stops every subtask, waits
//! `--restart-delay-ms`, redeploys and restores the last complete checkpoint (or starts over
//! without one), and the sources replay from their checkpointed positions.
//!
//! Times (from one monotonic clock; the fault's time is taken by a panic hook in the failing
//! thread, when the framework panics with `injected fault: ...`):
//! - `recovery_ms`: fault → the sink receives the *target* record, the first record at input
//!   index ≥ fault-at that goes to the failed subtask and passes parse, level and filter (the
//!   record at fault-at itself may be dropped). The failed subtask never processed it before
//!   the fault, so this is the first time it is processed after the restart; `flat_map`,
//!   `filter`, `map` and `sink` run in one chained actor, so the sink receives it within
//!   microseconds of `flat_map` processing it. It includes the restart delay, the redeploy, the
//!   restore, and the replay of every record between the restored checkpoint and the fault.
//! - `first_output_after_fault_ms`: fault → a sink subtask of the restarted job receives its
//!   first records (written to its in-progress file, not yet visible).
//! - `first_commit_after_fault_ms`: fault → a sink subtask of the restarted job first commits
//!   (makes visible) records it wrote itself: at the first checkpoint completing after the
//!   restart, or at the end of the input.
//! - `redeploy_ms`: fault → the first sink subtask of the restarted job is created.
//!
//! After the job, every committed line is read back and compared with the expected output,
//! computed sequentially with the same functions before the job starts: `duplicates` counts
//! extra copies of expected ids, `missing` expected ids not committed, `unexpected` ids that
//! should not be there, `wrong_lines` lines that differ from the expected line.

// The output's `json!` has many keys.
#![recursion_limit = "256"]

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use weir::testing::{Fault, FaultKind, FaultPlan};
use weir::{Env, EnvConfig, RestartStrategy};
use weir_benches::clock_ns;
use weir_benches::recovery_support::{
    clear_part_files, encode_string, install_fault_hook, read_committed, tally, Expected,
    RecoveryProbe, TwoPhaseFileSink,
};
use weir_examples::answers::{
    cleaning_streams, format_cleaned, uid, Answers, BadRecord, Cleaned, Input, Levels, DEFAULT_SEED,
};

/// Restarts allowed before the job fails (the fault fires once, so one is used).
const RESTART_ATTEMPTS: u32 = 3;
/// The job's name (its checkpoints go to `<checkpoint dir>/<name>/`).
const JOB: &str = "recovery";

#[derive(Parser, Debug)]
#[command(
    name = "recovery",
    about = "Recovery time and exactly-once output of the answer-cleaning job after an injected \
             fault; prints one JSON line."
)]
struct Args {
    /// Recovery mode: `restart-all` (the only one so far).
    #[arg(long, default_value = "restart-all")]
    mode: String,
    /// Generated answers (default 1000000); not with --input.
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// An answers JSON Lines file to read instead of generated answers.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Index (0-based) of the input record at which `flat_map` fails (default: half the
    /// records). For generated input it is the answer id.
    #[arg(long, value_name = "K")]
    fault_at: Option<u64>,
    /// Checkpoint interval; 0 turns checkpoints off (the restart then starts over).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    checkpoint_interval_ms: u64,
    /// Delay before the restart (Flink's fixed-delay default is 1000 ms).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    restart_delay_ms: u64,
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

/// Where the fault goes: `flat_map` subtask and its record, and which input records that
/// subtask reads (to find the target record).
struct Placement {
    subtask: usize,
    local_record: u64,
    reads: Box<dyn Fn(u64) -> bool>,
}

fn place_fault(answers: &Answers, records: u64, p: usize, fault_at: u64) -> Placement {
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
            Placement {
                subtask: s,
                local_record: fault_at - range.start,
                reads: Box::new(move |i| range.contains(&i)),
            }
        }
        Answers::Lines(_) => {
            let s = (fault_at % p as u64) as usize;
            Placement {
                subtask: s,
                local_record: fault_at / p as u64,
                reads: Box::new(move |i| i % p as u64 == s as u64),
            }
        }
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

fn encode_bad_record(r: &BadRecord, out: &mut Vec<u8>) {
    // A struct of two strings always serializes.
    let _ = serde_json::to_writer(out, r);
}

/// The answer-cleaning graph of `build_answer_cleaning`, with exactly-once file sinks.
fn build(env: &Env, answers: &Answers, p: usize, out_dir: &Path, probe: Arc<RecoveryProbe>) {
    let input = Input {
        answers: answers.clone(),
        levels: Levels::Builtin,
    };
    let (cleaned, malformed) = cleaning_streams(env, &input, p);
    let malformed_dir = out_dir.join("malformed");
    malformed
        .add_sink("exactly_once_jsonl", move |cx| {
            TwoPhaseFileSink::create(&malformed_dir, cx, encode_bad_record, None)
        })
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    let dir = out_dir.to_owned();
    cleaned
        .map(|c: Cleaned| format_cleaned(&c))
        .uid(uid::MAP)
        .set_parallelism(p)
        .add_sink("exactly_once_text", move |cx| {
            TwoPhaseFileSink::create(&dir, cx, encode_string, Some(probe.clone()))
        })
        .uid(uid::SINK)
        .set_parallelism(p);
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

fn run(args: Args) -> Result<(), String> {
    if args.mode != "restart-all" {
        return Err(format!(
            "mode `{}` is not supported: only `restart-all` so far (`bqbs`, recovery from \
             backups, comes with the backup issue)",
            args.mode
        ));
    }
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    let answers = match (&args.input, args.records) {
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
    };
    clock_ns(); // fixes the clock's base: every time taken later is > 0

    // The expected output, before the job (so it does not compete with it).
    let t = Instant::now();
    let expected = match &answers {
        Answers::Generated { records, seed } => Expected::generated(*records, *seed),
        Answers::Lines(path) => Expected::from_file(path)
            .map_err(|e| format!("cannot read input {}: {e}", path.display()))?,
    };
    let expect_seconds = t.elapsed().as_secs_f64();
    let records = expected.records;
    let p = args.parallelism;
    let fault_at = args.fault_at.unwrap_or(records / 2);
    if fault_at >= records {
        return Err(format!(
            "--fault-at {fault_at} is not a record of the input (it has {records})"
        ));
    }
    let placement = place_fault(&answers, records, p, fault_at);
    let target = expected
        .kept
        .iter()
        .find(|k| k.index >= fault_at && (placement.reads)(k.index))
        .copied();

    // Directories.
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

    let probe = Arc::new(RecoveryProbe::new(target.map(|k| k.id)));
    install_fault_hook(probe.clone());
    let plan = FaultPlan::new(vec![Fault::new(
        uid::FLAT_MAP,
        FaultKind::Panic,
        placement.local_record,
    )
    .in_subtask(placement.subtask)]);

    let mut cfg = EnvConfig::default();
    if args.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(Duration::from_millis(args.checkpoint_interval_ms));
    }
    cfg.checkpoint.directory = checkpoint_dir.clone();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: RESTART_ATTEMPTS,
        delay: Duration::from_millis(args.restart_delay_ms),
    });
    cfg.faults = plan.clone();
    let (batch_size, arbiters) = (cfg.batch_size, cfg.arbiters);
    eprintln!(
        "recovery: {records} records ({:.2} s to compute the expected output), fault at record \
         {fault_at} (flat_map subtask {} record {}), target id {:?}, checkpoints every {} ms, \
         restart delay {} ms (Flink's default: 1000 ms)",
        expect_seconds,
        placement.subtask,
        placement.local_record,
        target.map(|k| k.id),
        args.checkpoint_interval_ms,
        args.restart_delay_ms
    );

    let env = Env::with_config(cfg);
    build(&env, &answers, p, &out_dir, probe.clone());
    let started = Instant::now();
    let result = env
        .execute(JOB)
        .map_err(|e| format!("the job failed: {e}"))?;
    let total_seconds = started.elapsed().as_secs_f64();

    let main = read_committed(&out_dir)
        .map_err(|e| format!("cannot read the output in {}: {e}", out_dir.display()))?;
    let side = read_committed(&malformed_dir)
        .map_err(|e| format!("cannot read the output in {}: {e}", malformed_dir.display()))?;
    let t = tally(&expected, &main.lines);

    let ms = |slot| probe.ms_after_fault(slot);
    let stats = result.checkpoints.clone();
    let restored = *probe
        .restored_checkpoint
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let op_in = |u: &str| result.operator(u).map_or(0, |o| o.records_in);
    let source_out = result.operator(uid::SOURCE).map_or(0, |o| o.records_out);
    println!(
        "{}",
        serde_json::json!({
            "bench": "recovery",
            "mode": args.mode,
            "input": match &answers {
                Answers::Generated { .. } => "generated".to_string(),
                Answers::Lines(p) => p.display().to_string(),
            },
            "seed": args.seed,
            "records": records,
            "parallelism": p,
            "fault_at": fault_at,
            "fault_subtask": placement.subtask,
            "fault_subtask_record": placement.local_record,
            "fault_fired": plan.fired() == 1,
            "checkpoint_interval_ms": args.checkpoint_interval_ms,
            "restart_delay_ms": args.restart_delay_ms,
            "restart_attempts": RESTART_ATTEMPTS,
            "batch_size": batch_size,
            "arbiters": arbiters,
            "recovery_ms": ms(&probe.target_after_fault_ns),
            "recovery_ms_definition": "time from the injected flat_map panic (panic hook in the \
                failing thread) to the sink receiving the target record: the first record at \
                input index >= fault_at read by the failed subtask that passes parse, level and \
                filter (recovery_target_id). The fault fires before flat_map processes the batch \
                holding fault_at, so this is the target's first processing after the restart; \
                flat_map..sink are one chained actor, so the sink gets it microseconds after \
                flat_map. Includes restart delay, redeploy, restore and the replay from the \
                restored checkpoint (or from the start without one).",
            "recovery_target_id": target.map(|k| k.id),
            "recovery_target_index": target.map(|k| k.index),
            "target_receipts_before_fault": probe.target_before_fault.load(Ordering::SeqCst),
            "target_receipts_after_fault": probe.target_after_fault.load(Ordering::SeqCst),
            "first_output_after_fault_ms": ms(&probe.first_write_after_fault_ns),
            "first_output_after_fault_ms_definition": "fault -> a sink subtask of the restarted \
                job receives its first records (written to its in-progress file)",
            "first_commit_after_fault_ms": ms(&probe.first_commit_after_fault_ns),
            "first_commit_after_fault_ms_definition": "fault -> a sink subtask of the restarted \
                job first commits records it wrote (first checkpoint completed after the \
                restart, or the end of the input)",
            "redeploy_ms": ms(&probe.first_sink_after_fault_ns),
            "restored_checkpoint": restored,
            "restarted_from_scratch": plan.fired() == 1 && restored.is_none(),
            "total_seconds": total_seconds,
            "job_seconds": result.duration.as_secs_f64(),
            "source_records_out": source_out,
            "replayed_records": source_out.saturating_sub(records),
            "checkpoints_completed": stats.as_ref().map(|s| s.number_of_completed_checkpoints),
            "checkpoints_failed": stats.as_ref().map(|s| s.number_of_failed_checkpoints),
            "num_restarts": stats.as_ref().map(|s| s.num_restarts),
            "sink_instances": probe.sink_instances.load(Ordering::SeqCst),
            "files_committed_by_restore": probe.committed_by_restore.load(Ordering::SeqCst),
            "uncommitted_files_discarded": probe.discarded_files.load(Ordering::SeqCst),
            "expected": expected.kept.len(),
            "committed": t.committed,
            "committed_files": main.files,
            "uncommitted_files_left": main.uncommitted_files + side.uncommitted_files,
            "duplicates": t.duplicates,
            "missing": t.missing,
            "unexpected": t.unexpected,
            "wrong_lines": t.wrong_lines,
            "unparsable": t.unparsable,
            "duplicate_examples": t.duplicate_examples,
            "missing_examples": t.missing_examples,
            "sink_records_in": op_in(uid::SINK),
            "malformed_expected": expected.malformed,
            "malformed_committed": side.lines.len(),
            "dropped_expected": expected.dropped,
            "output_dir": args.output.as_ref().map(|d| d.display().to_string()),
            "checkpoint_dir": args.checkpoint_dir.as_ref().map(|d| d.display().to_string()),
        })
    );
    drop(cleanup);
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recovery: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
