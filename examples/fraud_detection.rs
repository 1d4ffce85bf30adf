//! Fraud detection, Flink's tutorial: a card is flagged when a transaction under $1 is
//! followed within a minute by one over $500. One derived operator keeps a flag per card
//! (keyed `ValueState` with a one-minute TTL) and takes its thresholds as live config.
//!
//! ```text
//! cargo run --release --example fraud_detection -- --transactions 10000000 --cards 1000000 \
//!     --parallelism 4 --faults panic,hang,arbiter --change-thresholds
//! ```
//!
//! The run is a drill (`weir_examples::fraud::drill`): the detector has a backup per subtask,
//! each fault is injected once a checkpoint completed, the thresholds change live at a known
//! transaction, and the alerts are compared with a sequential reference. It prints what it
//! saw and fails if the alerts differ.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use weir_examples::fraud::drill::{self, Drill};
use weir_examples::fraud::Thresholds;
use weir_testing::FaultKind;

/// Runs the fraud detection job on generated transactions and checks its alerts.
#[derive(Parser, Debug)]
#[command(name = "fraud_detection")]
struct Args {
    /// Transactions to generate.
    #[arg(long, default_value_t = 1_000_000)]
    transactions: u64,
    /// Distinct cards.
    #[arg(long, default_value_t = 100_000)]
    cards: u64,
    /// Seed of the transactions.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Parallelism of the detector.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Faults to inject in the detector, in order, each after a checkpoint completed:
    /// comma-separated `panic`, `hang`, `arbiter` (its thread is stopped).
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Vec<FaultKind>,
    /// Change the thresholds live (large: over $300 instead of $500) before the faults.
    #[arg(long)]
    change_thresholds: bool,
    /// Checkpoint interval, ms.
    #[arg(long, default_value_t = 100)]
    checkpoint_interval_ms: u64,
}

fn parse_fault(s: &str) -> Result<FaultKind, String> {
    match s {
        "panic" => Ok(FaultKind::Panic),
        "hang" => Ok(FaultKind::Hang),
        "arbiter" => Ok(FaultKind::StopArbiter),
        other => Err(format!(
            "unknown fault `{other}`; expected panic, hang or arbiter"
        )),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.parallelism == 0 || args.cards == 0 || args.checkpoint_interval_ms == 0 {
        eprintln!("fraud_detection: --parallelism, --cards and --checkpoint-interval-ms must be at least 1");
        return ExitCode::FAILURE;
    }
    if !args.faults.is_empty() {
        weir_testing::quiet_injected_panics();
        weir_testing::quiet_released_hangs();
    }
    let dir = std::env::temp_dir().join(format!("weir-fraud-{}", std::process::id()));
    let d = Drill {
        transactions: args.transactions,
        cards: args.cards,
        seed: args.seed,
        parallelism: args.parallelism,
        faults: args.faults,
        change_to: args.change_thresholds.then_some(Thresholds {
            large_cents: 30_000,
            ..Thresholds::default()
        }),
        checkpoint_interval: Duration::from_millis(args.checkpoint_interval_ms),
        checkpoint_dir: dir.clone(),
    };
    let report = drill::run(&d);
    let _ = std::fs::remove_dir_all(&dir);
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fraud_detection: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{{\"transactions\":{},\"cards\":{},\"parallelism\":{},\"alerts\":{},\"matches_reference\":{},\
         \"faults_fired\":{},\"promotions\":{},\"restarts\":{},\"thresholds_changed_at\":{},\
         \"checkpoints\":{},\"last_checkpoint_bytes\":{},\"elapsed_ms\":{}}}",
        args.transactions,
        args.cards,
        args.parallelism,
        report.alerts,
        report.matches_reference(),
        report.faults_fired,
        report.promotions,
        report.restarts,
        report
            .changed_at
            .map_or_else(|| "null".to_owned(), |t| t.to_string()),
        report.checkpoints,
        report.last_checkpoint_size,
        report.elapsed.as_millis()
    );
    if report.matches_reference() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "fraud_detection: alerts differ from the reference; missing {:?}, unexpected {:?}",
            report.missing, report.unexpected
        );
        ExitCode::FAILURE
    }
}
