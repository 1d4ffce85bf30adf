//! Chaos: seeded runs of one job over every fault-tolerance mode (restart-all with aligned,
//! unaligned and at-least-once checkpoints; the buffer-queue backup of a stateless and of a
//! stateful operator; a live rescale, aligned and unaligned under backpressure, and a fast
//! restart), fault kind (panic, hang, arbiter stop, pause: a zombie primary) and moment (after a checkpoint, during a checkpoint, at a
//! record, two faults close together, during a promoted backup's replay, at and after a
//! rescale's or replacement's hand-over); each run checks every record id at the sink and
//! every key's state (`weir_stress::chaos`).
//!
//! ```text
//! cargo run --release -p weir-stress --bin chaos -- --runs 1000 --seed 1
//! cargo run --release -p weir-stress --bin chaos -- --replay 417
//! cargo run --release -p weir-stress --bin chaos -- --runs 200 --mode FastRestart
//! ```
//!
//! `WEIR_CHAOS_WARNINGS=1` prints the jobs' warnings (restarts and why) on stderr.
//!
//! Prints each failing run with its seed (replay it alone with `--replay SEED`), a table of
//! runs and failures per mode, moment and kind, and a JSON summary line; exits non-zero if a
//! run failed.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use weir_stress::chaos::{campaign, Mode, Run, Scenario, Verdict};

#[derive(Parser, Debug)]
#[command(name = "chaos")]
struct Args {
    /// Number of runs.
    #[arg(long, default_value_t = 100)]
    runs: u64,
    /// Seed of the first run (run `i` has seed `seed + i`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Records per run.
    #[arg(long, default_value_t = 20_000)]
    records: u64,
    /// A run not done after this many seconds counts as hung.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// Run only the scenario of this seed.
    #[arg(long)]
    replay: Option<u64>,
    /// Only scenarios of this mode (`Aligned`, `Rescale`, `FastRestart`, ...): the seeds
    /// from `--seed` on that draw it, `--runs` of them.
    #[arg(long)]
    mode: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.records < 1_000 {
        eprintln!("chaos: --records must be at least 1000");
        return ExitCode::FAILURE;
    }
    weir_testing::quiet_injected_panics();
    weir_testing::quiet_released_hangs();
    let (seed, runs) = match args.replay {
        Some(s) => (s, 1),
        None => (args.seed, args.runs),
    };
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut done = 0;
    let started = Instant::now();
    if let Some(m) = &args.mode {
        if !Mode::ALL.iter().any(|x| format!("{x:?}") == *m) {
            eprintln!("chaos: --mode must be one of {:?}", Mode::ALL);
            return ExitCode::FAILURE;
        }
    }
    let keep = |s: &Scenario| {
        args.replay.is_some()
            || args
                .mode
                .as_ref()
                .is_none_or(|m| format!("{:?}", s.mode) == *m)
    };
    let results = campaign(seed, runs, args.records, timeout, keep, |s, r, took| {
        done += 1;
        if !r.verdict.is_ok() || args.replay.is_some() {
            println!(
                "run {done}/{runs}: {s}: {:?} ({} of {} faults fired; {} ms){}",
                r.verdict,
                r.fired,
                r.faults,
                took.as_millis(),
                if r.notes.is_empty() {
                    String::new()
                } else {
                    format!("; {}", r.notes.join("; "))
                }
            );
        } else if done % 50 == 0 {
            eprintln!("chaos: {done}/{runs} runs");
        }
    });
    print_table(&results);
    let failed: Vec<u64> = results
        .iter()
        .filter(|(_, r)| !r.verdict.is_ok())
        .map(|(s, _)| s.seed)
        .collect();
    let count = |f: fn(&Verdict) -> bool| results.iter().filter(|(_, r)| f(&r.verdict)).count();
    // Runs whose faults did not all fire tested less than their scenario says: counted, so a
    // change that makes moments unreachable shows.
    let unfired: Vec<u64> = results
        .iter()
        .filter(|(_, r)| r.fired < r.faults)
        .map(|(s, _)| s.seed)
        .collect();
    let summary = serde_json::json!({
        "runs": results.len(),
        "failed": failed.len(),
        "lost": count(|v| matches!(v, Verdict::Lost(_))),
        "duplicated": count(|v| matches!(v, Verdict::Duplicated(_))),
        "wrong_state": count(|v| matches!(v, Verdict::WrongState(_))),
        "hung": count(|v| matches!(v, Verdict::Hung)),
        "job_failed": count(|v| matches!(v, Verdict::Failed(_))),
        "faults_unfired": unfired.len(),
        "unfired_seeds": unfired,
        "seconds": started.elapsed().as_secs_f64(),
        "failing_seeds": failed,
    });
    println!("{summary}");
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_table(results: &[(Scenario, Run)]) {
    let mut rows: BTreeMap<(String, String, String), (u64, u64, u64)> = BTreeMap::new();
    for (s, r) in results {
        let kind = format!("{:?}", s.kind);
        let kind = kind.split('(').next().unwrap_or("?").to_owned();
        let row = rows
            .entry((format!("{:?}", s.mode), format!("{:?}", s.moment), kind))
            .or_default();
        row.0 += 1;
        row.1 += u64::from(!r.verdict.is_ok());
        row.2 += u64::from(r.fired < r.faults);
    }
    println!("| mode | moment | fault | runs | failed | not all faults fired |");
    println!("|---|---|---|---|---|---|");
    for ((mode, moment, kind), (runs, failed, unfired)) in rows {
        println!("| {mode} | {moment} | {kind} | {runs} | {failed} | {unfired} |");
    }
}
