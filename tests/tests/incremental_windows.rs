//! Incremental checkpoints of the event-time window operator (`CheckpointConfig::incremental`):
//! a checkpoint writes the keys whose windows changed since the previous one and references
//! the runs before it; a restore reads the chain. Checked by real faults (a panic of the
//! operator before the windows, once checkpoints completed) and every window's count at an
//! exactly-once sink against the ids the source produced, at p = 2 and across a rescale.

mod common;
#[path = "common/counting.rs"]
mod counting;

use counting::{assert_incremental, completed, config, inject_panic, wait_checkpoints, Controls};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weir::time::WatermarkStrategy;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::{CollectSink, Env, JobHandle};

/// Keys, and the window size in ids (an id is its own event time, in ms): at the source's 64
/// ids per ms a window stays open for several checkpoints, each adding to a few hundred keys.
const KEYS: u64 = 3_000;
const WINDOW: u64 = 5_000;
/// Few keys: a checkpoint changes most of them, and its copy (a batch's worth of keys between
/// two batches) is still under way while records write keys it has still to copy.
const FEW_KEYS: u64 = 200;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-incr-win-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[derive(Clone)]
struct Count;
impl AggregateFunction<u64, u64> for Count {
    type Acc = u64;
    fn add(&self, n: &mut u64, _x: u64) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// Endless ids -> a pass-through at p = 2 (it panics when told, `Controls::panic_once`) -> event time = id, the
/// watermark two windows behind (with none, a run without faults and without incremental
/// checkpoints dropped some records as late: the order in which the two pass-throughs'
/// records and watermarks reach a window subtask is not the ids') ->
/// key_by(id % keys) -> tumbling windows of `WINDOW` ms counting their ids, at p = `p` ->
/// (key, window start, count) at an exactly-once collect.
fn job(env: &Env, p: usize, keys: u64, c: &Controls, out: &CollectSink<(u64, i64, u64)>) {
    let panic_once = c.panic_once.clone();
    common::endless_ids(env, &c.stop, &c.ended_at)
        .map(move |x: u64| {
            if panic_once.swap(false, Ordering::SeqCst) {
                panic!("injected: the operator before the windows fails");
            }
            x
        })
        .uid("pass")
        .set_parallelism(2)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(2 * WINDOW))
                .with_timestamp_assigner(|x: &u64| *x as i64)
                .with_watermark_interval(Duration::ZERO),
        )
        .key_by(move |x: &u64| x % keys)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW)))
        .aggregate_window(Count, |k: &u64, f: &Fired, n: u64| (*k, f.window.start, n))
        .uid("windows")
        .set_parallelism(p)
        .collect_into(out);
}

/// Ends the source, waits for the job, and checks every window: each (key, window start)
/// once, with the count of the ids below the end that fall in it.
fn end_and_check(job: JobHandle, c: &Controls, out: &CollectSink<(u64, i64, u64)>, keys: u64) {
    c.stop.store(true, Ordering::SeqCst);
    job.wait().expect("the job ends");
    let ended_at = c.ended_at.load(Ordering::SeqCst);
    let mut expected: HashMap<(u64, i64), u64> = HashMap::new();
    for id in 0..ended_at {
        let start = (id / WINDOW * WINDOW) as i64;
        *expected.entry((id % keys, start)).or_default() += 1;
    }
    let mut got: HashMap<(u64, i64), u64> = HashMap::new();
    for (k, start, n) in out.take() {
        assert!(
            got.insert((k, start), n).is_none(),
            "window ({k}, {start}) emitted twice"
        );
    }
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(w, n)| got.get(w) != Some(n))
        .map(|(w, n)| (*w, *n, got.get(w).copied()))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "windows (key, start), expected, got: {wrong:?}"
    );
    assert_eq!(got.len(), expected.len(), "windows no id fell in");
}

#[test]
fn a_panic_restores_the_windows_exactly_from_a_chain_of_incremental_checkpoints() {
    let dir = tmp("chain");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, 2, KEYS, &c, &out);
    let handle = env.start("incremental-windows").expect("starts");
    wait_checkpoints(&handle, 40);
    assert_incremental(&handle);
    inject_panic(&handle, &c);
    wait_checkpoints(&handle, completed(&handle) + 20);
    inject_panic(&handle, &c);
    end_and_check(handle, &c, &out, KEYS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn windows_rescaled_two_three_one_restore_exactly_from_incremental_chains() {
    let dir = tmp("rescale");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, 2, KEYS, &c, &out);
    let handle = env.start("incremental-windows-rescale").expect("starts");
    wait_checkpoints(&handle, 20);
    handle.rescale("windows", 3).expect("rescale 2 -> 3");
    wait_checkpoints(&handle, completed(&handle) + 20);
    inject_panic(&handle, &c);
    handle.rescale("windows", 1).expect("rescale 3 -> 1");
    wait_checkpoints(&handle, completed(&handle) + 20);
    inject_panic(&handle, &c);
    end_and_check(handle, &c, &out, KEYS);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A checkpoint's copy goes a batch's worth of keys at a time between batches; a record (or a
/// firing, or a purge) that writes a key the copy has still to take has it copied first. With
/// few keys most records do, and a restore of such a copy counts each window's records once.
#[test]
fn keys_written_while_their_checkpoint_copies_them_restore_as_at_the_barrier() {
    let dir = tmp("cow");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, 1, FEW_KEYS, &c, &out);
    let handle = env.start("incremental-windows-cow").expect("starts");
    for _ in 0..3 {
        wait_checkpoints(&handle, completed(&handle) + 10);
        inject_panic(&handle, &c);
    }
    end_and_check(handle, &c, &out, FEW_KEYS);
    let _ = std::fs::remove_dir_all(&dir);
}
