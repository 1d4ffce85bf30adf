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
//! - `state_file/<form>`: one subtask's state file written around a 32 MiB payload (1M
//!   keyed entries of a few dozen bytes, as `bqbs_state`'s), as a checkpoint's writer does:
//!   `byte_string` is Weir's form, `integer_array` the form of files before it (serde's
//!   default for `Vec<u8>`, with the same fields), kept here to show what it cost.
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

/// The state file's envelope as builds before the payload's byte string wrote it.
#[derive(Serialize)]
struct EarlierEnvelope<'a> {
    format_version: u32,
    uid: &'a str,
    subtask: usize,
    checkpoint_id: u64,
    key_groups: Option<(usize, usize)>,
    payload: &'a Vec<u8>,
    payload_crc32: Option<u32>,
}

fn state_file(c: &mut Criterion) {
    let mut g = c.benchmark_group("state_file");
    g.sample_size(10);
    let payload: Vec<u8> = (0..32u32 << 20).map(|i| (i % 251) as u8).collect();
    g.throughput(Throughput::Bytes(payload.len() as u64));
    g.bench_function("byte_string", |b| {
        b.iter(|| weir::__bench::state_file_bytes(payload.clone()).expect("encodes"))
    });
    g.bench_function("integer_array", |b| {
        b.iter(|| {
            weir::checkpoint::encode(&EarlierEnvelope {
                format_version: 1,
                uid: "op",
                subtask: 0,
                checkpoint_id: 1,
                key_groups: Some((0, 128)),
                payload: &payload,
                payload_crc32: Some(0),
            })
            .expect("encodes")
        })
    });
    g.finish();
}

criterion_group!(benches, rescale_keyed, state_file);
criterion_main!(benches);
