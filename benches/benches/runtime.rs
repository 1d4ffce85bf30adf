//! Criterion benches of the runtime's two costs that every record pays a share of:
//!
//! - `channel`: moving 1M records over one channel (source -> rebalance -> sink, two actors
//!   on two arbiters) at several batch sizes: per-batch channel, wake-up and poll costs.
//! - `mailbox`: the round trip of a system mail (ping) to a subtask that is idle, and to one
//!   whose data lane is saturated (a source feeding a discarding sink flat out).
//! - `credit_throughput` and `credit_queueing_delay`: one channel (source -> sink on two
//!   arbiters) with the adaptive window (`latency_target` 2 ms, windows 2..=64, with
//!   `adaptive_batch_size` off; and with it on, the defaults) against fixed windows of 2 and
//!   32, at
//!   four rates: a cheap consumer fed flat
//!   out (the channel is the bottleneck), a slow consumer (100 µs per batch of 1024) fed flat
//!   out (it is), that slow consumer fed at 80 % of what it takes, and a consumer slower
//!   than the target even at the smallest window (2 µs per record: 4 ms behind two batches
//!   of 1024; the adaptive channel also asks for smaller batches). `credit_throughput`
//!   times a run (records/s); `credit_queueing_delay` reports, as its "time", the mean delay
//!   of a record from its source batch being emitted to the sink taking it (queueing in the
//!   channel and the wake-up): criterion's time per iteration is that delay, not a run's.
//!
//! `cargo bench -p weir-benches --bench runtime`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir::sink::Sink;
use weir::source::{Source, SourceStatus};
use weir::{Env, EnvConfig, SinkError, SourceError};
use weir_benches::clock_ns;

fn config(batch_size: usize) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = batch_size;
    cfg.arbiters = 2;
    cfg
}

fn channel(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let mut g = c.benchmark_group("channel");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    for batch in [16usize, 128, 1024] {
        g.bench_with_input(
            BenchmarkId::new("transfer_1M_records", batch),
            &batch,
            |b, &batch| {
                b.iter(|| {
                    let env = Env::with_config(config(batch));
                    env.generate(N, |i| i).rebalance().discard().uid("sink");
                    let r = env.execute("channel").expect("job runs");
                    assert_eq!(r.operator("sink").map(|o| o.records_in), Some(N));
                })
            },
        );
    }
    g.finish();
}

/// A source that emits one record per poll after a short sleep: its downstream is idle.
struct Trickle;
impl Source<u64> for Trickle {
    fn poll_batch(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourceStatus, SourceError> {
        std::thread::sleep(Duration::from_millis(1));
        out.push(0);
        Ok(SourceStatus::More)
    }
}

fn mailbox(c: &mut Criterion) {
    let mut g = c.benchmark_group("mailbox");
    {
        let env = Env::with_config(config(1024));
        env.add_source("trickle", |_| Ok(Trickle))
            .rebalance()
            .discard()
            .uid("sink");
        let handle = env.start("idle").expect("job starts");
        g.bench_function("ping_idle_subtask", |b| {
            b.iter(|| handle.ping("sink", 0).expect("answers"))
        });
        handle.cancel();
        let _ = handle.wait();
    }
    {
        let env = Env::with_config(config(1024));
        env.generate(u64::MAX, |i| i)
            .rebalance()
            .discard()
            .uid("sink");
        let handle = env.start("busy").expect("job starts");
        g.bench_function("ping_saturated_subtask", |b| {
            b.iter(|| handle.ping("sink", 0).expect("answers"))
        });
        handle.cancel();
        let _ = handle.wait();
    }
    g.finish();
}

/// A channel's window: fixed, or adaptive with full batches, or adaptive with adaptive batch
/// size too (`EnvConfig::adaptive_batch_size`; the defaults).
#[derive(Clone, Copy, Debug)]
enum Window {
    Adaptive,
    AdaptiveBatch,
    Fixed(usize),
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Window::Adaptive => write!(f, "adaptive"),
            Window::AdaptiveBatch => write!(f, "adaptive_batch"),
            Window::Fixed(n) => write!(f, "fixed_{n}"),
        }
    }
}

/// How fast the source emits and how long the consumer takes per batch.
#[derive(Clone, Copy, Debug)]
struct Load {
    name: &'static str,
    batches: u64,
    /// Nanoseconds between source batches (0: flat out).
    every_ns: u64,
    /// Nanoseconds the sink spends per batch.
    cost_ns: u64,
    /// Nanoseconds the sink spends per record.
    record_ns: u64,
}

const LOADS: [Load; 4] = [
    Load {
        name: "cheap_consumer_flat_out",
        batches: 2_000,
        every_ns: 0,
        cost_ns: 0,
        record_ns: 0,
    },
    Load {
        name: "slow_consumer_flat_out",
        batches: 300,
        every_ns: 0,
        cost_ns: 100_000,
        record_ns: 0,
    },
    Load {
        name: "slow_consumer_at_80pct",
        batches: 300,
        every_ns: 125_000,
        cost_ns: 100_000,
        record_ns: 0,
    },
    Load {
        name: "slower_than_target_flat_out",
        batches: 100,
        every_ns: 0,
        cost_ns: 0,
        record_ns: 2_000,
    },
];

/// Emits `load.batches` batches of 1024 records, each record its batch's emit time (ns on
/// `clock_ns`), paced by spinning to `every_ns` apart.
struct Paced {
    load: Load,
    sent: u64,
    start: u64,
}

impl Source<u64> for Paced {
    fn poll_batch(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourceStatus, SourceError> {
        if self.sent == self.load.batches {
            return Ok(SourceStatus::End);
        }
        if self.sent == 0 {
            self.start = clock_ns();
        }
        let due = self.start + self.sent * self.load.every_ns;
        while clock_ns() < due {
            std::hint::spin_loop();
        }
        let now = clock_ns();
        out.extend(std::iter::repeat_n(now, 1024));
        self.sent += 1;
        Ok(SourceStatus::More)
    }
}

/// Sums each record's delay (its arrival minus its stamp; one clock read per batch), then
/// spins `cost_ns` per batch and `record_ns` per record.
struct Delays {
    cost_ns: u64,
    record_ns: u64,
    sum_ns: Arc<AtomicU64>,
    records: Arc<AtomicU64>,
}

impl Sink<u64> for Delays {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), SinkError> {
        let now = clock_ns();
        let sum: u64 = batch.iter().map(|&t| now.saturating_sub(t)).sum();
        self.sum_ns.fetch_add(sum, Ordering::Relaxed);
        self.records
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let until = now + self.cost_ns + self.record_ns * batch.len() as u64;
        while clock_ns() < until {
            std::hint::spin_loop();
        }
        batch.clear();
        Ok(())
    }
}

/// One run: (wall time, mean delay per record).
fn run_credit(load: Load, window: Window) -> (Duration, Duration) {
    let mut cfg = config(1024);
    match window {
        Window::Adaptive => cfg.adaptive_batch_size = false,
        Window::AdaptiveBatch => cfg.adaptive_batch_size = true,
        Window::Fixed(n) => {
            cfg.channel_capacity = n;
            cfg.max_channel_capacity = n;
            cfg.latency_target = None;
        }
    }
    let env = Env::with_config(cfg);
    let (sum_ns, records) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (s, r) = (sum_ns.clone(), records.clone());
    env.add_source("paced", move |_| {
        Ok(Paced {
            load,
            sent: 0,
            start: 0,
        })
    })
    .rebalance()
    .add_sink("delays", move |_| {
        Ok(Delays {
            cost_ns: load.cost_ns,
            record_ns: load.record_ns,
            sum_ns: s.clone(),
            records: r.clone(),
        })
    });
    let t0 = Instant::now();
    env.execute("credit").expect("job runs");
    let took = t0.elapsed();
    let n = records.load(Ordering::Relaxed);
    assert_eq!(n, load.batches * 1024, "every record arrived");
    (
        took,
        Duration::from_nanos(sum_ns.load(Ordering::Relaxed) / n),
    )
}

fn credit(c: &mut Criterion) {
    let windows = [
        Window::Adaptive,
        Window::AdaptiveBatch,
        Window::Fixed(2),
        Window::Fixed(32),
    ];
    let mut g = c.benchmark_group("credit_throughput");
    g.sample_size(10);
    for load in LOADS {
        g.throughput(Throughput::Elements(load.batches * 1024));
        for w in windows {
            g.bench_with_input(BenchmarkId::new(load.name, w), &w, |b, &w| {
                b.iter_custom(|iters| (0..iters).map(|_| run_credit(load, w).0).sum())
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("credit_queueing_delay");
    g.sample_size(10);
    for load in LOADS {
        for w in windows {
            g.bench_with_input(BenchmarkId::new(load.name, w), &w, |b, &w| {
                b.iter_custom(|iters| (0..iters).map(|_| run_credit(load, w).1).sum())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, channel, mailbox, credit);
criterion_main!(benches);
