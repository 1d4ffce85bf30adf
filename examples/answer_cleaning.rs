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
//! Watch and steer a running job over Flink's REST API (`weir::rest`), or in a browser (the
//! dashboard at `/`):
//!
//! ```text
//! cargo run --release --example answer_cleaning -- --rest 127.0.0.1:8081 --forever --rate 50000
//! curl http://127.0.0.1:8081/jobs/<id>/checkpoints
//! xdg-open http://127.0.0.1:8081/
//! ```
//!
//! Kill it mid-job and resume from its latest checkpoint (the output is then as if it had
//! never stopped):
//!
//! ```text
//! cargo run --release --example answer_cleaning -- --rate 20000 --checkpoint-interval-ms 500
//! # kill -9 it, then:
//! cargo run --release --example answer_cleaning -- --checkpoint-interval-ms 500 --restore-latest
//! ```
//!
//! Count the answers per level per event-time minute of their `ts_ms` instead (tumbling
//! windows, 5 s out-of-orderness): one `window_start_ms,window_end_ms,level,count` line per
//! level and window, exactly once, to `part-windows-…`; answers older than the watermark go
//! to the folder `late/` (JSON Lines of the cleaned answer, with its `ts_ms`):
//!
//! ```text
//! cargo run --release --example answer_cleaning -- --window 1m --output /tmp/per-minute
//! ```
//!
//! The job itself is `weir_examples::answers::build_answer_cleaning` (with `--window`,
//! `build_windowed_level_counts`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use weir::rate::RateControlConfig;
use weir::rest::{RestConfig, RestServer};
use weir::{Env, EnvConfig};
use weir_examples::answers::{
    build_answer_cleaning, build_windowed_level_counts, parse_window, prepare_output_dir, Input,
    Summary, WindowSummary, DEFAULT_SEED,
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
    /// Serve the REST API (Flink's paths) on this address while the job runs, e.g.
    /// `127.0.0.1:8081`; mutating calls need the token whose file is printed at start.
    #[arg(long, value_name = "ADDR")]
    rest: Option<std::net::SocketAddr>,
    /// Generate answers without end (until Ctrl-C), instead of `--records`.
    #[arg(long)]
    forever: bool,
    /// Limit the sources to this many records per second in all (split evenly over the
    /// source subtasks; the small `levels` source counts as one).
    #[arg(long, value_name = "N")]
    rate: Option<f64>,
    /// Checkpoint this often (milliseconds; 0: no checkpoints).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    checkpoint_interval_ms: u64,
    /// Where checkpoints are written (default `<system temp dir>/weir-checkpoints`).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Resume from the latest complete checkpoint an earlier run (killed, crashed) left in the
    /// checkpoint directory, or start fresh if there is none; the output directory is then
    /// kept, not cleared.
    #[arg(long)]
    restore_latest: bool,
    /// Count answers per level per tumbling event-time window of this size (of their `ts_ms`,
    /// 5 s out of order at most), e.g. `1m`, `30s`, `500ms`, `2h`, instead of writing each
    /// answer: lines `window_start_ms,window_end_ms,level,count` to `part-windows-…`, late
    /// answers to the folder `late/`.
    #[arg(long, value_name = "SIZE", value_parser = parse_window)]
    window: Option<std::time::Duration>,
}

/// The job that was built, and what its summary needs.
enum Built {
    Cleaning(weir_examples::answers::CleaningHandles),
    Windowed(weir_examples::answers::WindowHandles),
}

/// The input: the `--input` file or generated answers, with the `--levels` file if given.
fn input_of(args: &Args) -> Result<Input, String> {
    let mut input = match &args.input {
        Some(path) => {
            // Checked here for a clear message; the job would fail on it too.
            std::fs::metadata(path)
                .map_err(|e| format!("cannot read input {}: {e}", path.display()))?;
            Input::lines(path)
        }
        None if args.forever => Input::generated(u64::MAX, args.seed),
        None => Input::generated(args.records, args.seed),
    };
    if let Some(levels) = &args.levels {
        std::fs::metadata(levels)
            .map_err(|e| format!("cannot read levels file {}: {e}", levels.display()))?;
        input = input.with_levels(levels);
    }
    Ok(input)
}

/// The output directory, emptied unless the job resumes (a resumed job cuts its part files
/// back to the checkpointed length itself).
fn prepare_out_dir(args: &Args) -> Result<PathBuf, String> {
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("weir-answer-cleaning"));
    let prepared = if args.restore_latest {
        std::fs::create_dir_all(&out_dir)
    } else {
        prepare_output_dir(&out_dir)
    };
    prepared.map_err(|e| format!("cannot prepare output directory {}: {e}", out_dir.display()))?;
    Ok(out_dir)
}

/// The REST server and dashboard with `--rest`, the job registered; their addresses printed.
fn serve(args: &Args, job: &weir::JobHandle) -> Result<Option<RestServer>, String> {
    Ok(match args.rest {
        None => None,
        Some(addr) => {
            let server =
                RestServer::start(RestConfig::default().addr(addr)).map_err(|e| e.to_string())?;
            server.register(job.monitor());
            println!("dashboard:      http://{}/", server.addr());
            println!("REST API:       http://{}/jobs/{}", server.addr(), job.id());
            if let Some(f) = server.token_file() {
                println!(
                    "token file:     {} (mutating calls: Authorization: Bearer <token>)",
                    f.display()
                );
            }
            Some(server)
        }
    })
}

/// What each operator had done when Ctrl-C stopped the job.
fn print_stopped(monitor: &weir::JobMonitor) {
    if let Some(m) = monitor.metrics() {
        for o in &m.operators {
            println!(
                "{:<14} {:>12} in {:>12} out",
                o.uid, o.num_records_in, o.num_records_out
            );
        }
    }
}

/// The summary of a finished job: its input, parallelism, counts and where its output is.
fn print_summary(args: &Args, built: &Built, result: &weir::JobResult, out_dir: &std::path::Path) {
    match &args.input {
        Some(p) => println!("input:          {}", p.display()),
        None if args.forever => println!(
            "input:          generated answers without end (seed {})",
            args.seed
        ),
        None => println!(
            "input:          {} generated answers (seed {})",
            args.records, args.seed
        ),
    }
    println!("parallelism:    {:>12}", args.parallelism);
    let malformed = match built {
        Built::Cleaning(handles) => {
            let summary = Summary::new(result, handles);
            println!("{summary}");
            println!("output:         {}", out_dir.display());
            summary.malformed
        }
        Built::Windowed(handles) => {
            let summary = WindowSummary::new(result, handles);
            println!("{summary}");
            println!(
                "output:         {}/part-windows-* (window_start_ms,window_end_ms,level,count)",
                out_dir.display()
            );
            if summary.late > 0 {
                println!(
                    "late answers:   {}/part-late-* (JSON Lines of the cleaned answers)",
                    handles.late_dir.display()
                );
            }
            summary.malformed
        }
    };
    if malformed > 0 {
        println!(
            "malformed lines: {}/part-malformed-<subtask> (JSON Lines: line, error)",
            out_dir.display()
        );
    }
}

fn run(args: Args) -> Result<(), String> {
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    let input = input_of(&args)?;
    let out_dir = prepare_out_dir(&args)?;

    let env = Env::with_config(config(&args)?);
    let built = match args.window {
        None => Built::Cleaning(build_answer_cleaning(
            &env,
            &input,
            &out_dir,
            args.parallelism,
        )),
        Some(window) => Built::Windowed(build_windowed_level_counts(
            &env,
            &input,
            &out_dir,
            args.parallelism,
            window,
        )),
    };
    let job = env.start("answer-cleaning").map_err(|e| e.to_string())?;
    let server = serve(&args, &job)?;
    let canceller = job.canceller();
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped.clone();
    ctrlc::set_handler(move || {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        canceller.cancel();
    })
    .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    let monitor = job.monitor();
    let result = match job.wait() {
        Ok(result) => result,
        Err(weir::JobError::Cancelled { .. })
            if stopped.load(std::sync::atomic::Ordering::SeqCst) =>
        {
            println!("stopped by Ctrl-C");
            print_stopped(&monitor);
            drop(server);
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };

    print_summary(&args, &built, &result, &out_dir);
    if let (Some(server), true) = (&server, args.forever) {
        // A job stopped over REST: its clients still read the final status (and the
        // savepoint's location) until the user is done.
        println!(
            "the job has ended; http://{} serves its final status until Ctrl-C",
            server.addr()
        );
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    drop(server);
    Ok(())
}

/// The job's settings from the flags.
fn config(args: &Args) -> Result<EnvConfig, String> {
    let mut cfg = EnvConfig::default();
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!(
                "--rate must be a positive number of records per second, got {rate}"
            ));
        }
        cfg.rate_control = RateControlConfig::fixed(rate);
    }
    if args.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(std::time::Duration::from_millis(
            args.checkpoint_interval_ms,
        ));
    }
    if let Some(dir) = &args.checkpoint_dir {
        cfg.checkpoint.directory = dir.clone();
    }
    if args.restore_latest {
        if args.checkpoint_interval_ms == 0 {
            return Err("--restore-latest needs checkpoints: set --checkpoint-interval-ms".into());
        }
        cfg.checkpoint.restore_latest =
            Some(weir::RestoreLatest::if_any(&cfg.checkpoint.directory));
    }
    if args.forever && args.input.is_some() {
        return Err("--forever generates its input: it cannot be used with --input".into());
    }
    Ok(cfg)
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
