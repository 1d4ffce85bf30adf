//! Keyed state in derived operators: `#[weir(state)]` fields of keyed state types are per key
//! on a keyed stream, survive restarts and backup promotion, are dropped when empty, expire by
//! their TTL, and are refused where they cannot work.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_multiset_eq, within_timeout, TempDir, TIMEOUT};
use weir::state::Max;
use weir::{
    Collector, Env, EnvConfig, KeyedProcessFunction, ListState, MapState, Operator,
    ProcessFunction, ReducingState, RestartStrategy, ValueState,
};
use weir_testing::{quiet_injected_panics, wait_for_checkpoint, FaultKind, RecordFaults};

const KEYS: u64 = 37;

/// Every keyed state type at once; emits what it knows of the record's key after each record.
#[derive(Clone, Default, Operator)]
#[weir(name = "key-stats")]
struct KeyStats {
    #[weir(state)]
    sum: ValueState<u64>,
    #[weir(state)]
    residues: MapState<u64, u64>,
    #[weir(state)]
    last_three: ListState<u64>,
    #[weir(state)]
    max: ReducingState<u64, Max>,
    /// Records seen by this subtask (per-subtask, said so).
    #[weir(operator_state)]
    seen: u64,
    faults: Option<RecordFaults<u64>>,
}

/// (key, sum, distinct residues mod 5, last three, max)
type Out = (u64, u64, usize, Vec<u64>, u64);

impl ProcessFunction<u64, Out> for KeyStats {
    fn process(&mut self, x: u64, out: &mut Collector<Out>) {
        if let Some(f) = &self.faults {
            f.check(&x);
        }
        self.seen += 1;
        let sum = self.sum.get_or_insert_with(|| 0);
        *sum += x;
        let sum = *sum;
        *self.residues.entry(x % 5).or_insert(0) += 1;
        self.last_three.add(x);
        if self.last_three.len() > 3 {
            let keep = self.last_three.get()[1..].to_vec();
            self.last_three.update(keep);
        }
        self.max.add(x);
        out.collect((
            x % KEYS,
            sum,
            self.residues.len(),
            self.last_three.get().to_vec(),
            *self.max.get().expect("added"),
        ));
    }
}

/// The same, one key after another, with plain maps.
fn reference(n: u64) -> Vec<Out> {
    let mut sums: HashMap<u64, u64> = HashMap::new();
    let mut residues: HashMap<u64, std::collections::HashSet<u64>> = HashMap::new();
    let mut last: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut max: HashMap<u64, u64> = HashMap::new();
    (0..n)
        .map(|x| {
            let k = x % KEYS;
            let s = sums.entry(k).or_default();
            *s += x;
            let r = residues.entry(k).or_default();
            r.insert(x % 5);
            let l = last.entry(k).or_default();
            l.push(x);
            if l.len() > 3 {
                l.remove(0);
            }
            let m = max.entry(k).or_default();
            *m = (*m).max(x);
            (k, *s, r.len(), l.clone(), *m)
        })
        .collect()
}

fn restarting_config(dir: &TempDir) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.checkpoint.directory = dir.path().to_owned();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::ZERO,
    });
    cfg
}

/// Runs `n` records through `KeyStats` at parallelism 2 (the source at 1, so each key's
/// records arrive in order), with `faults`, backed up or not.
fn run_key_stats(name: &str, n: u64, faults: &RecordFaults<u64>, backup: bool) -> Vec<Out> {
    run_key_stats_into(name, n, faults, backup, false)
}

/// [`run_key_stats`]; with `slow_out`, the output goes through a slow map over channels of
/// the least credit, so the operator's output waits for credit at most barriers.
fn run_key_stats_into(
    name: &str,
    n: u64,
    faults: &RecordFaults<u64>,
    backup: bool,
    slow_out: bool,
) -> Vec<Out> {
    quiet_injected_panics();
    let dir = TempDir::new(name);
    let mut cfg = restarting_config(&dir);
    cfg.faults = faults.plan().clone();
    if slow_out {
        cfg.channel_capacity = 1;
        cfg.batch_size = 16;
    }
    let env = Env::with_config(cfg);
    let op = env
        .generate(n, |i| i)
        .key_by(|x: &u64| x % KEYS)
        .apply(KeyStats {
            faults: Some(faults.clone()),
            ..Default::default()
        })
        .uid("stats")
        .set_parallelism(2);
    let op = match (backup, slow_out) {
        // Checkpoints are the backup's only restart points: each one's output waits for
        // credit at its barrier.
        (true, true) => op.with_backup_policy(weir::BackupPolicy::default().state_interval(None)),
        (true, false) => op.with_backup(),
        (false, _) => op,
    };
    let op = if slow_out {
        op.map(|o: Out| {
            std::thread::sleep(Duration::from_micros(20));
            o
        })
        .uid("slow")
        .set_parallelism(1)
    } else {
        op
    };
    let out = op.collect();
    let handle = env.start(name).expect("start");
    within_timeout(move || handle.wait()).expect("job");
    out.take()
}

#[test]
fn keyed_fields_hold_each_keys_state_across_restarts() {
    let n = 20_000;
    let faults = RecordFaults::new("stats", FaultKind::Panic, vec![3_000, 11_000, 16_000]);
    let got = run_key_stats("keyed-restarts", n, &faults, false);
    assert_eq!(faults.fired(), 3, "{faults:?}");
    assert_multiset_eq(got, reference(n), "keyed state across three restarts");
}

#[test]
fn keyed_fields_move_to_a_promoted_backup() {
    let n = 20_000;
    let faults = RecordFaults::new("stats", FaultKind::Panic, vec![5_000, 14_000]);
    let got = run_key_stats("keyed-backup", n, &faults, true);
    assert_eq!(faults.fired(), 2, "{faults:?}");
    assert_multiset_eq(got, reference(n), "keyed state after two promotions");
}

/// The output of a backed-up operator that waits for credit at a checkpoint's barrier (or
/// at a hand-off) still counts at the backup's restart point: a promoted backup neither
/// drops nor repeats it.
#[test]
fn keyed_fields_move_to_a_promoted_backup_whose_output_waits_for_credit() {
    let n = 20_000;
    let faults = RecordFaults::new("stats", FaultKind::Panic, vec![5_000, 9_000, 14_000]);
    let got = run_key_stats_into("keyed-backup-credit", n, &faults, true, true);
    assert_eq!(faults.fired(), 3, "{faults:?}");
    assert_multiset_eq(got, reference(n), "keyed state after three promotions");
}

/// Sets a flag per key and clears it on the key's next record: at most one flag per key,
/// and none once every key came twice.
#[derive(Clone, Default, Operator)]
struct Pairs {
    #[weir(state)]
    first: ValueState<u64>,
    seen: Arc<AtomicU64>,
}

impl ProcessFunction<u64, (u64, u64)> for Pairs {
    fn process(&mut self, x: u64, out: &mut Collector<(u64, u64)>) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        match self.first.take() {
            Some(a) => out.collect((a, x)),
            None => self.first.update(x),
        }
    }
}

/// Like `Pairs`, but keeps every key's first record forever.
#[derive(Clone, Default, Operator)]
struct Keeps {
    #[weir(state)]
    first: ValueState<u64>,
    seen: Arc<AtomicU64>,
}

impl ProcessFunction<u64, (u64, u64)> for Keeps {
    fn process(&mut self, x: u64, _out: &mut Collector<(u64, u64)>) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        if self.first.value().is_none() {
            self.first.update(x);
        }
    }
}

/// The size of the first checkpoint completed after `records` records reached the operator
/// (counted in `seen`), in an endless job of distinct keys that come twice each
/// (`k, k, k+1, k+1, ..`).
fn checkpoint_size_after<P>(name: &str, op: P, seen: &AtomicU64, records: u64) -> u64
where
    P: weir::KeyedOperator<u64, u64, (u64, u64), weir::PerRecord> + Clone,
{
    let dir = TempDir::new(name);
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.directory = dir.path().to_owned();
    let env = Env::with_config(cfg);
    env.generate(u64::MAX, |i| i)
        .key_by(|x: &u64| x / 2)
        .apply(op)
        .uid("op")
        .discard();
    let job = env.start(name).expect("start");
    wait_until("records reached the operator", || {
        seen.load(Ordering::Relaxed) >= records
    });
    let done = job
        .checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints);
    let stats = wait_for_checkpoint(&job, done + 1, TIMEOUT).expect("a checkpoint");
    job.cancel();
    let _ = job.wait();
    stats.last_checkpoint_size
}

#[test]
fn a_key_whose_state_is_cleared_is_dropped() {
    let n = 200_000;
    let seen = Arc::new(AtomicU64::new(0));
    let pairs = Pairs {
        seen: seen.clone(),
        ..Default::default()
    };
    let cleared = checkpoint_size_after("keyed-cleared", pairs, &seen, n);
    let seen = Arc::new(AtomicU64::new(0));
    let keeps = Keeps {
        seen: seen.clone(),
        ..Default::default()
    };
    let kept = checkpoint_size_after("keyed-kept", keeps, &seen, n);
    // Kept: 100,000 keys or more with a value each (several bytes apiece). Cleared: at most
    // the half-pairs in flight.
    assert!(kept > 400_000, "kept state is {kept} bytes");
    assert!(
        cleared < 64 * 1024,
        "cleared state is {cleared} bytes (kept: {kept})"
    );
}

/// Remembers a value per key for 50 ms.
#[derive(Clone, Default, Operator)]
struct Remembers {
    #[weir(state, ttl = Duration::from_millis(50))]
    last: ValueState<u64>,
}

impl ProcessFunction<(u64, u64), (u64, Option<u64>)> for Remembers {
    fn process(&mut self, (k, v): (u64, u64), out: &mut Collector<(u64, Option<u64>)>) {
        out.collect((k, self.last.value().copied()));
        self.last.update(v);
    }
}

#[test]
fn an_expired_value_is_never_returned() {
    // Both keys are written, then, after a pause longer than the TTL, read. One record per
    // batch, so the pause falls between batches (the clock is read once per batch). A slower
    // machine only makes the pause longer.
    let env = Env::with_config(common::cfg(1, 2));
    let out = env
        .generate(4, |i| {
            if i == 2 {
                std::thread::sleep(Duration::from_millis(300));
            }
            [(1u64, 10u64), (2, 20), (1, 11), (2, 21)][i as usize]
        })
        .key_by(|r: &(u64, u64)| r.0)
        .apply(Remembers::default())
        .collect();
    common::execute_within(&env, "keyed-ttl").expect("job");
    let mut got = out.take();
    got.sort();
    assert_eq!(got, vec![(1, None), (1, None), (2, None), (2, None)]);
}

/// Remembers a value per key for an hour.
#[derive(Clone, Default, Operator)]
struct RemembersLong {
    #[weir(state, ttl = weir::StateTtl::new(Duration::from_secs(3600)).update_on_read())]
    last: ValueState<u64>,
}

impl ProcessFunction<(u64, u64), (u64, Option<u64>)> for RemembersLong {
    fn process(&mut self, (k, v): (u64, u64), out: &mut Collector<(u64, Option<u64>)>) {
        out.collect((k, self.last.value().copied()));
        self.last.update(v);
    }
}

#[test]
fn a_live_value_is_returned() {
    let env = Env::new();
    let out = env
        .from_collection(vec![(1u64, 10u64), (1, 11), (1, 12)])
        .key_by(|r: &(u64, u64)| r.0)
        .apply(RemembersLong::default())
        .collect();
    common::execute_within(&env, "keyed-ttl-live").expect("job");
    let mut got = out.take();
    got.sort();
    assert_eq!(got, vec![(1, None), (1, Some(10)), (1, Some(11))]);
}

/// Per-subtask state on a keyed stream, not marked as such.
#[derive(Clone, Default, Operator)]
struct Unmarked {
    #[weir(state)]
    per_card: HashMap<u64, u64>,
}

impl ProcessFunction<u64, u64> for Unmarked {
    fn process(&mut self, x: u64, out: &mut Collector<u64>) {
        *self.per_card.entry(x).or_insert(0) += 1;
        out.collect(x);
    }
}

#[test]
fn a_keyed_stream_refuses_unmarked_per_subtask_state() {
    let env = Env::new();
    env.generate(10, |i| i)
        .key_by(|x: &u64| *x)
        .apply(Unmarked::default())
        .discard();
    let err = env.execute("unmarked").expect_err("refused").to_string();
    assert!(
        err.contains("`per_card`") && err.contains("#[weir(operator_state)]"),
        "{err}"
    );
}

#[test]
fn keyed_state_needs_a_keyed_stream() {
    let env = Env::new();
    env.generate(10, |i| (i, i))
        .apply(Remembers::default())
        .discard();
    let err = env.execute("unkeyed").expect_err("refused").to_string();
    assert!(
        err.contains("`last`") && err.contains("the stream is not keyed"),
        "{err}"
    );
}

/// A keyed process function with derived hooks: its threshold is live config.
#[derive(Clone, Operator)]
#[weir(name = "over")]
struct Over {
    #[weir(config)]
    threshold: u64,
    #[weir(operator_state)]
    flagged: u64,
    /// Records processed, and the threshold the last one saw (read by the test).
    passed: Arc<AtomicU64>,
    threshold_seen: Arc<AtomicU64>,
    /// Set by the test: the next record panics (once).
    explode: Arc<std::sync::atomic::AtomicBool>,
}

impl KeyedProcessFunction<u64, u64, u64> for Over {
    type State = ValueState<u64>;
    fn process(&mut self, _k: &u64, count: &mut ValueState<u64>, x: u64, out: &mut Collector<u64>) {
        if self.explode.swap(false, Ordering::SeqCst) {
            panic!("injected fault: `over` panics once asked to");
        }
        *count.get_or_insert_with(|| 0) += 1;
        self.passed.fetch_add(1, Ordering::SeqCst);
        self.threshold_seen.store(self.threshold, Ordering::SeqCst);
        if x % 100 >= self.threshold {
            self.flagged += 1;
            out.collect(x);
        }
    }
}

/// Waits until `cond` holds (an event of the running job), failing after [`TIMEOUT`].
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_keyed_process_function_with_hooks_takes_live_config_that_outlives_a_restart() {
    quiet_injected_panics();
    let dir = TempDir::new("keyed-hooks");
    let passed = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(u64::MAX));
    let explode = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let env = Env::with_config(restarting_config(&dir));
    env.generate(u64::MAX, |i| i)
        .key_by(|x: &u64| x % 7)
        .apply(Over {
            threshold: 0,
            flagged: 0,
            passed: passed.clone(),
            threshold_seen: seen.clone(),
            explode: explode.clone(),
        })
        .uid("over")
        .discard();
    let job = env.start("keyed-hooks").expect("start");
    wait_until("1000 records processed", || {
        passed.load(Ordering::SeqCst) >= 1_000
    });
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    job.update_config("over", "threshold", "50")
        .expect("config");
    let unknown = job
        .update_config("over", "limit", "1")
        .expect_err("unknown key");
    assert!(unknown.to_string().contains("threshold"), "{unknown}");
    wait_until("a record processed with the new threshold", || {
        seen.load(Ordering::SeqCst) == 50
    });
    // Its own (per-subtask) field is in its snapshot.
    let snaps = job.snapshot_state("over").expect("snapshot");
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].operator, "over");

    // A restart restores the state of a checkpoint and keeps the live change.
    wait_for_checkpoint(&job, 1, TIMEOUT).expect("a checkpoint");
    explode.store(true, Ordering::SeqCst);
    wait_until("the job restarted", || {
        job.checkpoint_stats().is_some_and(|s| s.num_restarts >= 1)
    });
    seen.store(u64::MAX, Ordering::SeqCst);
    wait_until("a record processed after the restart", || {
        seen.load(Ordering::SeqCst) != u64::MAX
    });
    assert_eq!(
        seen.load(Ordering::SeqCst),
        50,
        "the restart undid the live change"
    );
    job.cancel();
    let _ = job.wait();
}
