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
//!
//! And one kernel that bounds `pipeline` at p=2 over p=1 (`{"kernel":"pipeline_exchange",
//! "one_thread_s":..,"exchange_s":..,"ratio":..}`): the same work fused on one thread (the
//! p=1 shape with nothing between operators, counted in an `FxHashMap` as Weir's keyed state
//! is), against two threads that each take half of the numbers and exchange them by key as
//! a keyed p=2 job must: each record's key group (`weir::key_group::key_group_of`, 128
//! groups) names its owner; a thread counts its own records and sends the other's in
//! batches of 1024 over a bounded channel, counting what it receives between its own
//! batches. No framework, no checkpoints, no metrics: `ratio` (one / exchange) is what that
//! exchange leaves of the second thread on this machine, and no p=2 run of the `pipeline`
//! job can get further over its p=1 run.

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

type Counts = HashMap<u64, u64, rustc_hash::FxBuildHasher>;

/// The `pipeline` job's work fused, counted in a map with hasher `S` (`FxBuildHasher`: as
/// Weir's keyed state counts).
fn pipeline<S: std::hash::BuildHasher + Default>(n: u64) -> u64 {
    let mut counts: HashMap<u64, u64, S> = HashMap::default();
    for x in 0..n {
        let y = black_box(x) * 2 + 1;
        if y % 3 != 0 {
            *counts.entry(y % 1024).or_default() += 1;
        }
    }
    counts.values().sum()
}

/// One of the two threads of `pipeline_exchange`: numbers `range`, records of key-group
/// owner `me` counted here, the others sent on `tx`; batches from the other thread taken
/// from `rx` before each send (and while the channel to it is full), and after the last own
/// batch.
fn exchange_half(
    me: usize,
    range: std::ops::Range<u64>,
    tx: std::sync::mpsc::SyncSender<Vec<u64>>,
    rx: std::sync::mpsc::Receiver<Vec<u64>>,
) -> u64 {
    use std::sync::mpsc::TrySendError;
    const BATCH: usize = 1024;
    let mut counts = Counts::default();
    let count = |counts: &mut Counts, batch: &[u64]| {
        for &y in batch {
            *counts.entry(y % 1024).or_default() += 1;
        }
    };
    let mut bufs = [Vec::with_capacity(BATCH), Vec::with_capacity(BATCH)];
    for x in range {
        let y = black_box(x) * 2 + 1;
        if y % 3 == 0 {
            continue;
        }
        let owner = weir::key_group::subtask_for_key_group(
            weir::key_group::key_group_of(&(y % 1024), 128),
            128,
            2,
        );
        bufs[owner].push(y);
        if bufs[owner].len() == BATCH {
            let mut full = std::mem::replace(&mut bufs[owner], Vec::with_capacity(BATCH));
            if owner == me {
                count(&mut counts, &full);
                continue;
            }
            loop {
                // The other's batches first, at every attempt: a channel drained at every
                // send rarely fills, and two blocking sends would wait for each other.
                while let Ok(b) = rx.try_recv() {
                    count(&mut counts, &b);
                }
                match tx.try_send(full) {
                    Ok(()) => break,
                    Err(TrySendError::Full(back)) => {
                        full = back;
                        std::thread::yield_now();
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        panic!("the other exchange thread stopped")
                    }
                }
            }
        }
    }
    count(&mut counts, &bufs[me]);
    let rest = std::mem::take(&mut bufs[1 - me]);
    if !rest.is_empty() && tx.send(rest).is_err() {
        panic!("the other exchange thread stopped");
    }
    drop(tx);
    for b in rx {
        count(&mut counts, &b);
    }
    counts.values().sum()
}

/// The `pipeline` job's work at p=2 by hand: two threads, a hash exchange between them.
fn pipeline_exchange(n: u64) -> u64 {
    let (tx0, rx1) = std::sync::mpsc::sync_channel(4);
    let (tx1, rx0) = std::sync::mpsc::sync_channel(4);
    std::thread::scope(|s| {
        let other = s.spawn(move || exchange_half(1, n / 2..n, tx1, rx1));
        let mine = exchange_half(0, 0..n / 2, tx0, rx0);
        // A panic in the other thread is the kernel's own bug: report it as such.
        mine + other
            .join()
            .unwrap_or_else(|_| panic!("exchange thread panicked"))
    })
}

/// Medians of `runs` interleaved runs of the fused one-thread work and the two-thread
/// exchange; both must count the same records.
fn report_exchange(runs: usize, n: u64) {
    let (mut ones, mut twos) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let a = pipeline::<rustc_hash::FxBuildHasher>(n);
        ones.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let b = pipeline_exchange(n);
        twos.push(t.elapsed().as_secs_f64());
        assert_eq!(a, b, "the exchange lost or doubled records");
    }
    let ratios: Vec<f64> = ones.iter().zip(&twos).map(|(o, t)| o / t).collect();
    println!(
        "{}",
        serde_json::json!({
            "bench": "scaling",
            "kernel": "pipeline_exchange",
            "runs": runs,
            "one_thread_s": median(&ones),
            "exchange_s": median(&twos),
            "ratio": median(&ratios),
            "ratios": ratios,
        })
    );
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
    report("pipeline", args.runs, || {
        pipeline::<std::hash::RandomState>(args.numbers)
    });
    report_exchange(args.runs, args.numbers);
}
