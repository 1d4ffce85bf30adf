//! Answer cleaning, the ETL job of the BQBS paper: Q&A-site answers (JSON Lines) get the level
//! their likes reach, empty and spam answers are dropped, and `id,user_id,likes,level` lines
//! are written. Malformed lines go to a side output (`part-malformed-<subtask>`), never lost.
//!
//! ```text
//! cargo run --release --example answer_cleaning -- --records 1000000
//! cargo run --release --example answer_cleaning -- --input tests/data/answers_sample.jsonl \
//!     --levels tests/data/levels.jsonl --output /tmp/cleaned --parallelism 2
//! ```
//!
//! The job itself is `weir_examples::answers::build_answer_cleaning`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use weir::{Env, EnvConfig};
use weir_examples::answers::{
    build_answer_cleaning, prepare_output_dir, Input, Summary, DEFAULT_SEED,
};

/// Cleans Q&A answers: assigns levels, drops empty and spam answers, writes CSV-like lines.
#[derive(Parser, Debug)]
#[command(name = "answer_cleaning")]
struct Args {
    /// A JSON Lines file (or a directory of them) of answers; without it, answers are
    /// generated.
    #[arg(long, value_name = "FILE_OR_DIR")]
    input: Option<PathBuf>,
    /// Number of answers to generate (without --input).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Seed of the generated answers.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// A JSON Lines file of level thresholds (`{"min_likes":10,"level":"L1"}`); default: the
    /// built-in L0..L4 at 0, 10, 100, 1000, 10000 likes.
    #[arg(long, value_name = "FILE")]
    levels: Option<PathBuf>,
    /// Output directory (files `part-sink-<subtask>` and `part-malformed-<subtask>`); default
    /// `<system temp dir>/weir-answer-cleaning`.
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Parallelism of every operator but `levels`.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
}

fn run(args: Args) -> Result<(), String> {
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    let mut input = match &args.input {
        Some(path) => {
            // Checked here for a clear message; the job would fail on it too.
            std::fs::metadata(path)
                .map_err(|e| format!("cannot read input {}: {e}", path.display()))?;
            Input::lines(path)
        }
        None => Input::generated(args.records, args.seed),
    };
    if let Some(levels) = &args.levels {
        std::fs::metadata(levels)
            .map_err(|e| format!("cannot read levels file {}: {e}", levels.display()))?;
        input = input.with_levels(levels);
    }
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("weir-answer-cleaning"));
    prepare_output_dir(&out_dir)
        .map_err(|e| format!("cannot prepare output directory {}: {e}", out_dir.display()))?;

    let env = Env::with_config(EnvConfig::default());
    let handles = build_answer_cleaning(&env, &input, &out_dir, args.parallelism);
    let result = env.execute("answer-cleaning").map_err(|e| e.to_string())?;
    let summary = Summary::new(&result, &handles);

    match &args.input {
        Some(p) => println!("input:          {}", p.display()),
        None => println!(
            "input:          {} generated answers (seed {})",
            args.records, args.seed
        ),
    }
    println!("parallelism:    {:>12}", args.parallelism);
    println!("{summary}");
    println!("output:         {}", out_dir.display());
    if summary.malformed > 0 {
        println!(
            "malformed lines: {}/part-malformed-<subtask> (JSON Lines: line, error)",
            out_dir.display()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    // The framework's logs (`RUST_LOG=info` shows the job's lifecycle); errors are printed below.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("answer_cleaning: error: {e}");
            ExitCode::FAILURE
        }
    }
}
