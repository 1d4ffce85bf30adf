//! `scaling`: how much a second thread adds on this machine, for the work of the `etl` and
//! `pipeline` benches, measured in the same sitting as them. Prints one JSON line per kernel:
//!
//! ```text
//! {"bench":"scaling","kernel":"etl_parse","one_thread_s":..,"two_threads_s":..,"ceiling":..}
//! ```
//!
//! ```text
//! cargo run --release -p weir-benches --bin scaling -- --runs 5
//! ```
//!
//! Each kernel runs its whole work on one thread alone, then on two threads at once (each
//! doing the whole work, no sharing, no communication); `ceiling` is `2 * one / two`: the
//! most that any two-thread program doing that work can get over one thread here (2.0 on two
//! idle, independent cores; less where the two vCPUs share a core or the host is busy).
//! Weir's parallelism-2 figures are bounded by it: a `pipeline` or `etl` ratio of p=2 over
//! p=1 (or over a one-thread peer) above this ceiling is not possible on the same machine.
//!
//! Kernels (medians of `--runs` interleaved pairs):
//! - `etl_parse`: `clean_str` (serde_json into the borrowed record, the level, the content
//!   check) over `--records` generated answers held in memory, and the output line
//!   formatted into a reused buffer: the per-record work of the `etl` job.
//! - `pipeline`: `map(x*2+1)`, `filter(x%3!=0)`, count per `x%1024` in a `HashMap` over
//!   `0..--numbers`: the per-record work of the `pipeline` job, fused.

use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use clap::Parser;
use weir_benches::median;
use weir_examples::answers::{answer_json, clean_str, default_levels, Thresholds, DEFAULT_SEED};

#[derive(Parser, Debug)]
#[command(
    name = "scaling",
    about = "What a second thread adds on this machine, per kernel; prints JSON lines."
)]
struct Args {
    /// Interleaved one-thread / two-thread pairs per kernel (medians are printed).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Answers for the `etl_parse` kernel.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Numbers for the `pipeline` kernel.
    #[arg(long, default_value_t = 200_000_000)]
    numbers: u64,
}

fn etl_parse(lines: &[String], levels: &Thresholds) -> u64 {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut kept = 0u64;
    for line in lines {
        if let Ok(c) = clean_str(line, levels) {
            if c.is_kept() {
                kept += 1;
                // A `Vec` cannot fail.
                let _ = writeln!(out, "{c}");
                if out.len() > 60 * 1024 {
                    black_box(&out);
                    out.clear();
                }
            }
        }
    }
    black_box(out);
    kept
}

fn pipeline(n: u64) -> u64 {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for x in 0..n {
        let y = black_box(x) * 2 + 1;
        if y % 3 != 0 {
            *counts.entry(y % 1024).or_default() += 1;
        }
    }
    counts.values().sum()
}

/// Seconds `work` takes on one thread, then on each of two threads at once (the slower).
fn pair<F: Fn() -> u64 + Sync>(work: &F) -> (f64, f64) {
    let t = Instant::now();
    black_box(work());
    let one = t.elapsed().as_secs_f64();
    let two = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let t = Instant::now();
            black_box(work());
            t.elapsed().as_secs_f64()
        });
        let t = Instant::now();
        black_box(work());
        let mine = t.elapsed().as_secs_f64();
        // A panic in the other thread is the kernel's own bug: report it as such.
        let theirs = a
            .join()
            .unwrap_or_else(|_| panic!("kernel thread panicked"));
        mine.max(theirs)
    });
    (one, two)
}

fn report<F: Fn() -> u64 + Sync>(name: &str, runs: usize, work: F) {
    let (mut ones, mut twos) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let (one, two) = pair(&work);
        ones.push(one);
        twos.push(two);
    }
    let ceilings: Vec<f64> = ones.iter().zip(&twos).map(|(o, t)| 2.0 * o / t).collect();
    let (one, two) = (median(&ones).unwrap_or(0.0), median(&twos).unwrap_or(0.0));
    println!(
        "{}",
        serde_json::json!({
            "bench": "scaling",
            "kernel": name,
            "runs": runs,
            "one_thread_s": one,
            "two_threads_s": two,
            "ceiling": median(&ceilings),
            "ceilings": ceilings,
        })
    );
}

fn main() {
    let args = Args::parse();
    let lines: Vec<String> = (0..args.records)
        .map(|i| answer_json(DEFAULT_SEED, i))
        .collect();
    let levels = Thresholds::from_vec(default_levels());
    report("etl_parse", args.runs, || etl_parse(&lines, &levels));
    report("pipeline", args.runs, || pipeline(args.numbers));
}
