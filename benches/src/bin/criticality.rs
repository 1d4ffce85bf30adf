//! `criticality`: which operators of the answer-cleaning job are the most critical, i.e. take
//! the longest to recover from a fault in restart-all mode (the paper's Table 5). Prints the
//! ranking as one JSON object on stdout and as a table on stderr:
//!
//! ```text
//! {"bench":"criticality","mode":"restart-all","kind":"panic","faults_per_operator":50,
//!  "records":300000,"checkpoint_interval_ms":100,...,
//!  "operators":[{"rank":1,"uid":"flat_map","faults":50,"mean_recovery_ms":..,
//!                "p50_recovery_ms":..,"max_recovery_ms":..,"duplicates":0,"missing":0,...},...],
//!  "skipped":[{"uid":"source","reason":".."}],"total_seconds":..}
//! ```
//!
//! ```text
//! cargo run --release -p weir-benches --bin criticality -- --faults 50
//! cargo run --release -p weir-benches --bin criticality -- --faults 20 --kind hang \
//!     --operators flat_map,filter
//! ```
//!
//! See `weir_benches::criticality` for where the faults go and what is measured.

use clap::Parser;
use weir_benches::criticality::{run, table, CriticalityOptions, Kind};
use weir_examples::answers::DEFAULT_SEED;

#[derive(Parser, Debug)]
#[command(
    name = "criticality",
    about = "Ranks the operators of the answer-cleaning job by mean recovery time after injected \
             faults (restart-all mode): JSON on stdout, a table on stderr.",
    long_about = "Ranks the operators of the answer-cleaning job by mean recovery time after \
                  injected faults (restart-all mode): JSON on stdout, a table on stderr.\n\n\
                  Cost: each fault is one run of the job over the generated answers, about \
                  0.5 s with the default 300000 records on a 2-core machine (the job, then \
                  reading back and checking its output), plus the heartbeat timeout for each \
                  `hang`. The default --faults 50 makes 301 runs (50 for each of the 6 \
                  operators measured, and one that finds that `source` cannot be faulted): \
                  about 2.5 minutes (157 s measured)."
)]
struct Args {
    /// Faults per operator (one job run each).
    #[arg(long, default_value_t = 50, value_name = "N")]
    faults: usize,
    /// Generated answers per run (a run takes about 0.5 s at 300000). With fewer records more
    /// faults come before the first checkpoint and restart from the beginning (about half of
    /// them at 300000 with 100 ms checkpoints).
    #[arg(long, default_value_t = 300_000, value_name = "N")]
    records: u64,
    /// Checkpoint interval; 0 turns checkpoints off (every restart starts over).
    #[arg(long, default_value_t = 100, value_name = "MS")]
    checkpoint_interval_ms: u64,
    /// Seed of the random fault positions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seed of the generated answers.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    answers_seed: u64,
    /// How the faults fail: panic, hang (caught by the heartbeat timeout) or stop (the
    /// operator's arbiter thread stops).
    #[arg(long, default_value_t = Kind::Panic, value_name = "KIND")]
    kind: Kind,
    /// Only these operators (comma-separated uids; default: source, connect, flat_map, split,
    /// filter, map, sink).
    #[arg(long, value_delimiter = ',', value_name = "UIDS")]
    operators: Vec<String>,
    /// Parallelism of every operator but `levels`.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Delay before a restart (Flink's fixed-delay default is 1000 ms).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    restart_delay_ms: u64,
    /// A subtask silent for this long is declared hung (what a `hang` fault costs).
    #[arg(long, default_value_t = 250, value_name = "MS")]
    heartbeat_timeout_ms: u64,
    /// No progress line per operator on stderr.
    #[arg(long)]
    quiet: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let opts = CriticalityOptions {
        faults: args.faults,
        records: args.records,
        checkpoint_interval_ms: args.checkpoint_interval_ms,
        seed: args.seed,
        answers_seed: args.answers_seed,
        kind: args.kind,
        operators: args.operators,
        parallelism: args.parallelism,
        restart_delay_ms: args.restart_delay_ms,
        heartbeat_timeout_ms: args.heartbeat_timeout_ms,
        progress: !args.quiet,
    };
    let result = run(&opts).and_then(|report| {
        let json =
            serde_json::to_string(&report).map_err(|e| format!("cannot encode the report: {e}"))?;
        eprintln!("{}", table(&report));
        println!("{json}");
        Ok(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("criticality: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
