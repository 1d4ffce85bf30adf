//! Criterion benches of keyed state hand-over: dealing a keyed operator's checkpointed state
//! (the CBOR payloads of its old subtasks, as a checkpoint or a live rescale holds them) to
//! a new number of subtasks, as a rescale does before the new subtasks restore.
//!
//! - `rescale_keyed/<entry>/<from>-><to>`: 1M keys in 128 key groups (the default
//!   `max_parallelism`), from 2 subtasks to 3 and from 4 to 3. `<entry>` is the state per
//!   key: `u64` (a count: entries of a few bytes) or `str64` (a 64-byte string). Throughput
//!   is the bytes of the old payloads.
//!
//! The new subtasks' restore (decoding entries into typed state) is not part of it: that cost
//! is the same whatever deals the payloads.
//!
//! `cargo bench -p weir-benches --bench state`

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde::Serialize;
use weir::key_group::{key_group_of, key_group_range};

const KEYS: u64 = 1_000_000;
const MAX_PARALLELISM: usize = 128;

/// The keyed payloads of `p` subtasks holding keys `0..KEYS`, each key's state `state(key)`:
/// per subtask the CBOR `Vec<(key group, Vec<(key, state)>)>` of its key-group range.
fn payloads<S: Serialize>(p: usize, state: impl Fn(u64) -> S) -> Vec<(usize, Vec<u8>)> {
    let mut groups: BTreeMap<usize, Vec<(u64, S)>> = BTreeMap::new();
    for k in 0..KEYS {
        groups
            .entry(key_group_of(&k, MAX_PARALLELISM))
            .or_default()
            .push((k, state(k)));
    }
    (0..p)
        .map(|j| {
            let range = key_group_range(j, MAX_PARALLELISM, p);
            let mine: Vec<(usize, &Vec<(u64, S)>)> = groups
                .range(range)
                .map(|(g, entries)| (*g, entries))
                .collect();
            let bytes = weir::checkpoint::encode(&mine).expect("a payload encodes");
            (j, bytes)
        })
        .collect()
}

fn rescale_keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("rescale_keyed");
    g.sample_size(10);
    let padded = |k: u64| format!("{k:064}");
    for (entry, from) in [("u64", 2), ("u64", 4), ("str64", 2)] {
        let old = match entry {
            "u64" => payloads(from, |k| k * 10),
            _ => payloads(from, padded),
        };
        let bytes: usize = old.iter().map(|(_, p)| p.len()).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        let to = 3;
        g.bench_with_input(
            BenchmarkId::new(entry, format!("{from}->{to}")),
            &old,
            |b, old| {
                b.iter(|| {
                    let new = weir::__bench::deal_keyed(old, to, MAX_PARALLELISM)
                        .expect("the payloads deal");
                    assert_eq!(new.len(), to);
                    new
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, rescale_keyed);
criterion_main!(benches);
