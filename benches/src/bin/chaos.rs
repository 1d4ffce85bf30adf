//! Chaos: seeded runs of one job over every fault-tolerance mode (restart-all with aligned,
//! unaligned and at-least-once checkpoints; the buffer-queue backup of a stateless and of a
//! stateful operator), fault kind (panic, hang, arbiter stop, pause: a zombie primary) and
//! moment (after a checkpoint, at a record, two faults close together); each run checks every
//! record id at the sink and every key's state (`weir_benches::chaos`).
//!
//! ```text
//! cargo run --release -p weir-benches --bin chaos -- --runs 1000 --seed 1
//! cargo run --release -p weir-benches --bin chaos -- --replay 417
//! ```
//!
//! Prints each failing run with its seed (replay it alone with `--replay SEED`), a table of
//! runs and failures per mode, moment and kind, and a JSON summary line; exits non-zero if a
//! run failed.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use weir_benches::chaos::{campaign, Scenario};

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
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.records < 1_000 {
        eprintln!("chaos: --records must be at least 1000");
        return ExitCode::FAILURE;
    }
    weir::testing::quiet_injected_panics();
    weir::testing::quiet_released_hangs();
    let (seed, runs) = match args.replay {
        Some(s) => (s, 1),
        None => (args.seed, args.runs),
    };
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut done = 0;
    let results = campaign(seed, runs, args.records, timeout, |s, v, took| {
        done += 1;
        if !v.is_ok() || args.replay.is_some() {
            println!("run {done}/{runs}: {s}: {v:?} ({} ms)", took.as_millis());
        } else if done % 50 == 0 {
            eprintln!("chaos: {done}/{runs} runs");
        }
    });
    print_table(&results);
    let failed: Vec<u64> = results
        .iter()
        .filter(|(_, v)| !v.is_ok())
        .map(|(s, _)| s.seed)
        .collect();
    let count =
        |f: fn(&weir_benches::chaos::Verdict) -> bool| results.iter().filter(|(_, v)| f(v)).count();
    use weir_benches::chaos::Verdict as V;
    println!(
        "{{\"runs\":{},\"failed\":{},\"lost\":{},\"duplicated\":{},\"wrong_state\":{},\"hung\":{},\"job_failed\":{},\"failing_seeds\":{:?}}}",
        results.len(),
        failed.len(),
        count(|v| matches!(v, V::Lost(_))),
        count(|v| matches!(v, V::Duplicated(_))),
        count(|v| matches!(v, V::WrongState(_))),
        count(|v| matches!(v, V::Hung)),
        count(|v| matches!(v, V::Failed(_))),
        failed
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_table(results: &[(Scenario, weir_benches::chaos::Verdict)]) {
    let mut rows: BTreeMap<(String, String, String), (u64, u64)> = BTreeMap::new();
    for (s, v) in results {
        let kind = format!("{:?}", s.kind);
        let kind = kind.split('(').next().unwrap_or("?").to_owned();
        let row = rows
            .entry((format!("{:?}", s.mode), format!("{:?}", s.moment), kind))
            .or_default();
        row.0 += 1;
        row.1 += u64::from(!v.is_ok());
    }
    println!("| mode | moment | fault | runs | failed |");
    println!("|---|---|---|---|---|");
    for ((mode, moment, kind), (runs, failed)) in rows {
        println!("| {mode} | {moment} | {kind} | {runs} | {failed} |");
    }
}
