//! A backed-up keyed operator whose whole snapshot takes longer than its heartbeat timeout
//! (a large state, handed to its backup only at checkpoints) says it works while it writes
//! it: its supervisor does not take it for hung, nothing is promoted, and every key's count
//! is the sequential one. With the state in memory and on disk.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{endless_ids, promotions, within_timeout, TempDir, TIMEOUT};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use weir::{BackupPolicy, Collector, Env, EnvConfig, KeyedProcessFunction, KeyedState};

const KEYS: u64 = 600;

/// A count whose encoding takes half a millisecond: 600 of them take 300 ms, twice the
/// heartbeat timeout, however fast the machine.
#[derive(Clone, Default)]
struct SlowCount(u64);

impl Serialize for SlowCount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        std::thread::sleep(Duration::from_micros(500));
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for SlowCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u64::deserialize(d).map(SlowCount)
    }
}

/// Counts per key; `seen` counts records over every instance.
#[derive(Clone)]
struct Count {
    seen: Arc<AtomicU64>,
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Count {
    type State = SlowCount;
    fn process(&mut self, _k: &u64, s: &mut SlowCount, _x: u64, _out: &mut Collector<(u64, u64)>) {
        s.0 += 1;
        self.seen.fetch_add(1, Ordering::Relaxed);
    }
    fn end_of_input(
        &mut self,
        state: &mut KeyedState<u64, SlowCount>,
        out: &mut Collector<(u64, u64)>,
    ) {
        for (k, s) in state.iter() {
            out.collect((*k, s.0));
        }
    }
}

#[test]
fn a_backed_up_primary_writing_a_slow_snapshot_is_not_taken_for_hung() {
    slow_snapshot(false);
}

/// The same with the state on disk (its whole snapshot is read from the store).
#[test]
fn a_backed_up_primary_writing_a_slow_snapshot_from_disk_is_not_taken_for_hung() {
    slow_snapshot(true);
}

fn slow_snapshot(on_disk: bool) {
    let dir = TempDir::new("backup-slow-snapshot");
    let mut cfg = EnvConfig::default();
    if on_disk {
        let mut d = weir::DiskBackend::default();
        d.directory = dir.path().join("state");
        cfg.state_backend = weir::StateBackend::Disk(d);
    }
    cfg.arbiters = 4;
    cfg.restart = None;
    cfg.checkpoint.directory = dir.path().to_owned();
    cfg.checkpoint.interval = Some(Duration::from_millis(50));
    let env = Env::with_config(cfg);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    // Handed over only at checkpoints: each barrier writes the whole state.
    let policy = BackupPolicy::default()
        .heartbeat(Duration::from_millis(20), Duration::from_millis(150))
        .state_interval(None);
    let seen = Arc::new(AtomicU64::new(0));
    let out = endless_ids(&env, &stop, &ended_at)
        .key_by(|x: &u64| x % KEYS)
        .process_with(Count { seen: seen.clone() })
        .uid("count")
        .with_backup_policy(policy)
        .collect();
    let job = env.start("backup-slow-snapshot").expect("starts");
    // Every key has state before the checkpoints that count.
    common::wait_until("every key written", || {
        seen.load(Ordering::Relaxed) >= 2 * KEYS
    });
    let done = job
        .checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints);
    weir_testing::wait_for_checkpoint(&job, done + 2, TIMEOUT).expect("two checkpoints complete");
    stop.store(true, Ordering::SeqCst);
    let result = within_timeout(move || job.wait()).expect("the job ends");
    assert_eq!(
        promotions(&result),
        0,
        "the primary said it was working while it wrote its snapshot"
    );
    let n = ended_at.load(Ordering::SeqCst);
    let mut expected: HashMap<u64, u64> = HashMap::new();
    for i in 0..n {
        *expected.entry(i % KEYS).or_default() += 1;
    }
    let got: HashMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected, "every key's count, {n} ids");
}
