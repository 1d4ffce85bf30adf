//! A keyed job with exactly-once checks under real faults, shared by the tests of incremental
//! checkpoints and of the disk state backend: endless ids, a running count per key, an
//! exactly-once collect; a panic of the keyed function injected once checkpoints completed;
//! every id once and each key's counts exactly `1..=n` at the end.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::{CollectSink, Collector, Env, EnvConfig, JobHandle, RestartStrategy, ValueState};

use super::common;

/// What a test controls of a running job: stop its source, make its keyed function panic
/// once (at its next record).
#[derive(Clone, Default)]
pub struct Controls {
    pub stop: Arc<AtomicBool>,
    pub ended_at: Arc<AtomicU64>,
    pub panic_once: Arc<AtomicBool>,
    /// The highest id the keyed function has seen (replays included).
    pub seen: Arc<AtomicU64>,
}

/// Waits until the keyed function has seen id `n` (a test's faults come after enough
/// records, whatever the machine's speed).
pub fn wait_seen(c: &Controls, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while c.seen.load(Ordering::SeqCst) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not reach id {n} in 120 s (at {})",
            c.seen.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Endless ids (one source subtask, 64 per ms) -> a map at parallelism 2 (so the keyed
/// subtasks align barriers of two channels) -> key_by(id % keys) -> a running count per key at
/// parallelism `p` -> an exactly-once collect.
pub fn job(env: &Env, keys: u64, p: usize, c: &Controls, out: &CollectSink<(u64, u64, u64)>) {
    job_with_backup(env, keys, p, c, out, None)
}

/// [`job`] whose counting operator has a buffer-queue backup if `backup` is given.
pub fn job_with_backup(
    env: &Env,
    keys: u64,
    p: usize,
    c: &Controls,
    out: &CollectSink<(u64, u64, u64)>,
    backup: Option<weir::BackupPolicy>,
) {
    let (panic_once, seen) = (c.panic_once.clone(), c.seen.clone());
    let counted = common::endless_ids(env, &c.stop, &c.ended_at)
        .map(|x: u64| x)
        .uid("pass")
        .set_parallelism(2)
        .key_by(move |x: &u64| x % keys)
        .process(
            move |k: &u64,
                  s: &mut ValueState<u64>,
                  x: u64,
                  out: &mut Collector<(u64, u64, u64)>| {
                if panic_once.swap(false, Ordering::SeqCst) {
                    panic!("injected: the keyed function fails");
                }
                seen.fetch_max(x, Ordering::Relaxed);
                let n = s.get_or_insert_with(|| 0);
                *n += 1;
                out.collect((*k, *n, x));
            },
        )
        .uid("count")
        .set_parallelism(p);
    let counted = match backup {
        Some(policy) => counted.with_backup_policy(policy),
        None => counted,
    };
    counted.collect_into(out);
}

pub fn completed(job: &JobHandle) -> u64 {
    job.checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints)
}

pub fn wait_checkpoints(job: &JobHandle, n: u64) {
    weir_testing::wait_for_checkpoint(job, n, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{n} checkpoints did not complete: {e:?}"));
}

/// Makes the keyed function panic once, and waits until the job restored a checkpoint and
/// completed two more.
pub fn inject_panic(job: &JobHandle, c: &Controls) {
    let before = job.checkpoint_stats().unwrap_or_default();
    let (restarts, newest) = (
        before.num_restarts,
        before.last_completed_checkpoint_id.unwrap_or(0),
    );
    c.panic_once.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let s = job.checkpoint_stats().unwrap_or_default();
        // The newest complete checkpoint (or a later one) was readable and restored, not an
        // older one, nor nothing. (The restart is counted before the restore is recorded.)
        let restored = s.last_restored_checkpoint_id.unwrap_or(0);
        if s.num_restarts > restarts && restored >= newest {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no restart from checkpoint {newest} or later after the panic: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    wait_checkpoints(job, completed(job) + 2);
}

/// Once `first` checkpoints completed, a panic; `then` checkpoints after its restore, another;
/// then the source ends, and the output is checked.
pub fn two_panics_then_end(
    handle: JobHandle,
    c: &Controls,
    out: &CollectSink<(u64, u64, u64)>,
    keys: u64,
    first: u64,
    then: u64,
) {
    wait_checkpoints(&handle, first);
    inject_panic(&handle, c);
    wait_checkpoints(&handle, completed(&handle) + then);
    inject_panic(&handle, c);
    end_and_check(handle, c, out, keys);
}

/// Every id below where the source ended once, and each key's counts exactly `1..=n`.
pub fn check_exactly_once(keys: u64, ended_at: u64, committed: &[(u64, u64, u64)]) {
    let mut seen = vec![0u32; ended_at as usize];
    for &(_, _, id) in committed {
        assert!(id < ended_at, "id {id} past the end {ended_at}");
        seen[id as usize] += 1;
    }
    let missing: Vec<u64> = (0..ended_at)
        .filter(|&i| seen[i as usize] == 0)
        .take(5)
        .collect();
    let dups: Vec<u64> = (0..ended_at)
        .filter(|&i| seen[i as usize] > 1)
        .take(5)
        .collect();
    assert!(missing.is_empty(), "missing ids (first 5): {missing:?}");
    assert!(dups.is_empty(), "duplicated ids (first 5): {dups:?}");
    let mut counts: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, n, _) in committed {
        counts.entry(k).or_default().push(n);
    }
    for (k, mut ns) in counts {
        ns.sort_unstable();
        // The ids below `ended_at` with `id % keys == k`.
        let expected = ended_at / keys + u64::from(k < ended_at % keys);
        assert_eq!(ns, (1..=expected).collect::<Vec<_>>(), "counts of key {k}");
    }
}

/// Rescales the counting operator 2 -> 3 -> 1, `per_step` checkpoints apart, with a panic
/// restored after each rescale; then ends the input and checks the output.
pub fn rescale_two_three_one_with_panics(
    handle: JobHandle,
    c: &Controls,
    out: &CollectSink<(u64, u64, u64)>,
    keys: u64,
    per_step: u64,
) {
    wait_checkpoints(&handle, per_step);
    handle.rescale("count", 3).expect("rescale 2 -> 3");
    wait_checkpoints(&handle, completed(&handle) + per_step);
    inject_panic(&handle, c);
    handle.rescale("count", 1).expect("rescale 3 -> 1");
    wait_checkpoints(&handle, completed(&handle) + per_step);
    inject_panic(&handle, c);
    end_and_check(handle, c, out, keys);
}

/// Ends the source, waits for the job and checks its output: every id once, each key's counts
/// exactly `1..=n`.
pub fn end_and_check(
    handle: JobHandle,
    c: &Controls,
    out: &CollectSink<(u64, u64, u64)>,
    keys: u64,
) {
    c.stop.store(true, Ordering::SeqCst);
    handle.wait().expect("the job ends");
    check_exactly_once(keys, c.ended_at.load(Ordering::SeqCst), &out.take());
}

/// A job's config for these tests: batches of 64, two arbiters, checkpoints every 10 ms in
/// `dir` (two retained), `incremental` or not, three restarts without delay.
pub fn config(dir: &std::path::Path, incremental: bool) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.heartbeat_timeout = common::TIMEOUT;
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.checkpoint.retained = 2;
    cfg.checkpoint.incremental = incremental;
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    cfg
}

/// Most of the job's checkpoints so far wrote less than the state they cover: they are
/// incremental.
pub fn assert_incremental(job: &JobHandle) {
    let stats = job.checkpoint_stats().expect("checkpoint stats");
    let smaller = stats
        .history
        .iter()
        .filter(|r| r.checkpointed_size > 0 && r.checkpointed_size < r.state_size)
        .count();
    assert!(
        smaller >= stats.history.len() / 2,
        "incremental checkpoints write less than they cover: {:?}",
        stats
            .history
            .iter()
            .map(|r| (r.id, r.checkpointed_size, r.state_size))
            .collect::<Vec<_>>()
    );
}
