//! Criterion benches of the runtime's two costs that every record pays a share of:
//!
//! - `channel`: moving 1M records over one channel (source -> rebalance -> sink, two actors
//!   on two arbiters) at several batch sizes: per-batch channel, wake-up and poll costs.
//! - `mailbox`: the round trip of a system mail (ping) to a subtask that is idle, and to one
//!   whose data lane is saturated (a source feeding a discarding sink flat out).
//!
//! `cargo bench -p weir-benches --bench runtime`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weir::source::{Source, SourceStatus};
use weir::{Env, EnvConfig, SourceError};

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

criterion_group!(benches, channel, mailbox);
criterion_main!(benches);
