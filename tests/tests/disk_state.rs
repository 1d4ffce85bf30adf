//! The disk state backend (`StateBackend::Disk`): keyed states in an embedded LSM store, the
//! keys in use cached up to a memory budget. Checked against the memory backend's results
//! with a state many times its budget, and by real faults (panics of the keyed function
//! restored from full and incremental checkpoints, a rescale 2 -> 3 -> 1, savepoints moved
//! between backends): every id once at an exactly-once sink and every key's counts.

mod common;
#[path = "common/counting.rs"]
mod counting;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use counting::{
    check_exactly_once, completed, end_and_check, job, job_with_backup,
    rescale_two_three_one_with_panics, two_panics_then_end, wait_checkpoints, wait_seen, Controls,
};
use weir::{
    CollectSink, Collector, Env, EnvConfig, KeyedProcessFunction, KeyedState, RestartStrategy,
    StateBackend, ValueState,
};

/// Keys of the fault tests: over twice what two subtasks with 1 MiB budgets cache, so most records
/// read their key from the store, and most keys are written back between checkpoints.
const KEYS: u64 = 60_000;
/// The smallest budget.
const BUDGET: usize = 1 << 20;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-disk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn disk(dir: &Path) -> StateBackend {
    let mut d = weir::DiskBackend::default();
    d.directory = dir.join("state");
    d.memory_budget = BUDGET;
    StateBackend::Disk(d)
}

fn config(dir: &Path, backend: StateBackend, incremental: bool) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.heartbeat_timeout = common::TIMEOUT;
    cfg.checkpoint.interval = Some(Duration::from_millis(50));
    cfg.checkpoint.directory = dir.join("checkpoints");
    cfg.checkpoint.retained = 2;
    cfg.checkpoint.incremental = incremental;
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    cfg.state_backend = backend;
    cfg
}

/// Per key: a count, a sum and the last record's text (the issue's `(u64, u64, String)`);
/// every record emits the key's running values, and the end of the input every key's totals.
#[derive(Clone)]
struct Totals;

type Row = (u64, u64, u64, String);

impl KeyedProcessFunction<u64, (u64, u64), Row> for Totals {
    type State = ValueState<(u64, u64, String)>;
    fn process(
        &mut self,
        key: &u64,
        s: &mut ValueState<(u64, u64, String)>,
        (_, v): (u64, u64),
        out: &mut Collector<Row>,
    ) {
        let (n, sum, text) = s.get_or_insert_with(|| (0, 0, String::new()));
        *n += 1;
        *sum += v;
        *text = format!("record {v} of key {key}");
        out.collect((*key, *n, *sum, text.clone()));
    }
    fn end_of_input(
        &mut self,
        state: &mut KeyedState<u64, ValueState<(u64, u64, String)>>,
        out: &mut Collector<Row>,
    ) {
        for (k, s) in state.iter() {
            if let Some((n, sum, _)) = s.value() {
                out.collect((u64::MAX - k, *n, *sum, "total".into()));
            }
        }
    }
}

/// The rows of a finite job over `records` records of `keys` keys, sorted.
fn totals(backend: StateBackend, keys: u64, records: u64, p: usize) -> Vec<Row> {
    let mut cfg = EnvConfig::default();
    cfg.state_backend = backend;
    let env = Env::with_config(cfg);
    let input: Vec<(u64, u64)> = (0..records).map(|i| ((i * 7919) % keys, i)).collect();
    let out = env
        .from_collection(input)
        .key_by(|r: &(u64, u64)| r.0)
        .process_with(Totals)
        .uid("totals")
        .set_parallelism(p)
        .collect();
    env.execute("disk-totals").expect("runs");
    let mut rows = out.take();
    rows.sort();
    rows
}

#[test]
fn a_state_many_times_its_budget_gives_the_memory_backends_results() {
    let dir = tmp("equal");
    let (keys, records) = (150_000, 300_000);
    let memory = totals(StateBackend::Memory, keys, records, 1);
    let on_disk = totals(disk(&dir), keys, records, 1);
    assert_eq!(
        memory.len() as u64,
        records + keys,
        "a row per record, a total per key"
    );
    // The state's own size, encoded (smaller than in memory): at least 4x the budget.
    let state_bytes: usize = memory
        .iter()
        .filter(|r| r.3 != "total")
        .map(|r| (r.0, r))
        .collect::<BTreeMap<_, _>>()
        .values()
        .map(|r| weir::checkpoint::encode(&(r.0, (r.1, r.2, &r.3))).map_or(0, |b| b.len()))
        .sum();
    assert!(
        state_bytes >= 4 * BUDGET,
        "the state ({state_bytes} bytes) is at least 4x the budget"
    );
    assert!(
        memory == on_disk,
        "the disk backend's rows equal the memory backend's"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn panics_restore_exactly_from_full_and_incremental_checkpoints_on_disk() {
    for incremental in [false, true] {
        let dir = tmp(if incremental { "incr" } else { "full" });
        let env = Env::with_config(config(&dir, disk(&dir), incremental));
        let (c, out) = (Controls::default(), CollectSink::default());
        job(&env, KEYS, 2, &c, &out);
        let handle = env.start("disk-panics").expect("starts");
        // Every key written more than twice: most were written back to the store and read
        // again, and the checkpoints copied keys from the store.
        wait_seen(&c, 3 * KEYS);
        two_panics_then_end(handle, &c, &out, KEYS, 10, 5);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_rescale_two_three_one_on_disk_restores_exactly() {
    let dir = tmp("rescale");
    let env = Env::with_config(config(&dir, disk(&dir), true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, KEYS, 2, &c, &out);
    let handle = env.start("disk-rescale").expect("starts");
    wait_seen(&c, 2 * KEYS);
    rescale_two_three_one_with_panics(handle, &c, &out, KEYS, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backed-up counting operator on disk panics twice: each time its backup, which holds the
/// state the primary handed it (changed keys read from the cache or the store), is promoted;
/// no restart, every id once.
#[test]
fn panics_of_a_backed_up_operator_on_disk_are_promoted_exactly() {
    let dir = tmp("promote");
    let mut cfg = config(&dir, disk(&dir), false);
    // A checkpoint whose barrier came before a promotion and whose state (the backup's copy)
    // is resolved after it is declined ("a promotion or a later checkpoint's writer came
    // between"): tolerated here, so that the promotions, not a restart, recover the job. With
    // states on disk a checkpoint takes longer, and 2 runs in 5 had such a checkpoint.
    cfg.checkpoint.tolerable_failed_checkpoints = 3;
    let env = Env::with_config(cfg);
    let (c, out) = (Controls::default(), CollectSink::default());
    job_with_backup(&env, KEYS, 2, &c, &out, Some(weir::BackupPolicy::default()));
    let handle = env.start("disk-promote").expect("starts");
    let promotions =
        |h: &weir::JobHandle| -> u64 { h.backup_metrics().iter().map(|m| m.promotions).sum() };
    for n in 1..=2u64 {
        wait_seen(&c, c.seen.load(Ordering::SeqCst) + 2 * KEYS);
        c.panic_once.store(true, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while promotions(&handle) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "promotion {n} did not happen: {:?}",
                handle.backup_metrics()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Checkpoints completed since: the promoted primary's replay is over and its new
        // backup in place before the next fault, however slow the machine (as
        // backup.rs `four_successive_failures_each_promoted` arms its faults).
        wait_checkpoints(&handle, completed(&handle) + 3);
    }
    wait_seen(&c, c.seen.load(Ordering::SeqCst) + KEYS);
    c.stop.store(true, Ordering::SeqCst);
    let result = handle.wait().expect("the job ends");
    assert_eq!(
        result.checkpoints.map_or(0, |s| s.num_restarts),
        0,
        "promoted, not restarted"
    );
    check_exactly_once(KEYS, c.ended_at.load(Ordering::SeqCst), &out.take());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A savepoint is the same whatever the backend: one taken on disk restores in memory, and
/// one taken in memory restores on disk (at another parallelism).
#[test]
fn savepoints_move_between_the_backends() {
    for (from_disk, p) in [(true, 3), (false, 1)] {
        let dir = tmp(if from_disk { "sp-disk" } else { "sp-memory" });
        let sp = dir.join("savepoint");
        let (first, second) = if from_disk {
            (disk(&dir), StateBackend::Memory)
        } else {
            (StateBackend::Memory, disk(&dir))
        };
        let out = CollectSink::default();
        let env = Env::with_config(config(&dir, first, true));
        let c = Controls::default();
        job(&env, KEYS, 2, &c, &out);
        let handle = env.start("disk-sp-a").expect("starts");
        wait_seen(&c, 2 * KEYS);
        wait_checkpoints(&handle, 5);
        handle
            .stop_with_savepoint(&sp)
            .expect("stop with savepoint");
        let mut cfg = config(&dir.join("b"), second, true);
        cfg.checkpoint.restore_from = Some(sp.clone());
        let env = Env::with_config(cfg);
        let c2 = Controls {
            ended_at: c.ended_at.clone(),
            ..Controls::default()
        };
        job(&env, KEYS, p, &c2, &out);
        let handle = env.start("disk-sp-b").expect("restores");
        wait_seen(&c2, c.seen.load(Ordering::SeqCst) + KEYS);
        wait_checkpoints(&handle, 3);
        end_and_check(handle, &c2, &out, KEYS);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_bad_disk_backend_setting_is_refused_naming_it() {
    let mut cfg = EnvConfig::default();
    cfg.state_backend = StateBackend::disk(1000);
    let e = cfg.validate().expect_err("a budget under 1 MiB");
    let text = e.to_string();
    assert!(
        text.contains("state_backend") && text.contains("memory_budget"),
        "{text}"
    );
}
