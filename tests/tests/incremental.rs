//! Incremental checkpoints (`CheckpointConfig::incremental`): a keyed operator's checkpoint
//! writes what changed since its previous one and references the runs before it. Checked by
//! real faults (a panic of the keyed function, injected once enough checkpoints completed),
//! every id at an exactly-once sink and every key's counts, with chains of 100 checkpoints,
//! after a rescale, and through a savepoint restored without the runs.

mod common;
#[path = "common/counting.rs"]
mod counting;

use counting::{
    assert_incremental, config, end_and_check, inject_panic, job,
    rescale_two_three_one_with_panics, two_panics_then_end, wait_checkpoints, Controls,
};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::{
    CollectSink, Collector, Env, KeyedContext, KeyedProcessFunction, RestartStrategy, ValueState,
};

const KEYS: u64 = 3_000;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-incr-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A running count per key that also registers, for every hundredth key, a processing-time
/// timer an hour away (never due in the test): an operator with timers takes its state whole
/// at each checkpoint, through its chain.
#[derive(Clone)]
struct CountWithTimers {
    panic_once: Arc<AtomicBool>,
}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for CountWithTimers {
    type State = ValueState<u64>;
    fn process_with_ctx(
        &mut self,
        key: &u64,
        s: &mut ValueState<u64>,
        x: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<(u64, u64, u64)>,
    ) {
        if self.panic_once.swap(false, Ordering::SeqCst) {
            panic!("injected: the keyed function fails");
        }
        let n = s.get_or_insert_with(|| 0);
        *n += 1;
        if *n == 1 && key.is_multiple_of(100) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            ctx.register_processing_time_timer(now + 3_600_000);
        }
        out.collect((*key, *n, x));
    }
}

/// Every file under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<std::fs::DirEntry> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                files.push(e);
            }
        }
    }
    files
}

/// The run files under `dir` (in `shared/<uid>-<subtask>/` of a job's run directory).
fn runs_on_disk(dir: &Path) -> usize {
    files_under(dir)
        .iter()
        .filter(|e| {
            e.path()
                .parent()
                .and_then(|q| q.parent())
                .is_some_and(|q| q.ends_with("shared"))
        })
        .count()
}

#[test]
fn a_panic_restores_exactly_from_a_chain_of_a_hundred_incremental_checkpoints() {
    let dir = tmp("chain");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, KEYS, 2, &c, &out);
    let handle = env.start("incremental-chain").expect("starts");
    wait_checkpoints(&handle, 100);
    assert_incremental(&handle);
    assert!(runs_on_disk(&dir) > 0, "runs under shared/");
    inject_panic(&handle, &c);
    end_and_check(handle, &c, &out, KEYS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_panic_after_a_rescale_restores_exactly_from_incremental_checkpoints() {
    let dir = tmp("rescale");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    job(&env, KEYS, 2, &c, &out);
    let handle = env.start("incremental-rescale").expect("starts");
    rescale_two_three_one_with_panics(handle, &c, &out, KEYS, 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Unaligned checkpoints (all of them, or those whose alignment took over 1 ms) take the
/// keyed state whole, outside the chain: with one checkpoint retained, the runs before one are
/// collected when it completes, and the chain must start again, not reference them.
#[test]
fn unaligned_checkpoints_among_incremental_ones_restore_exactly_with_one_retained() {
    for all_unaligned in [false, true] {
        let dir = tmp(if all_unaligned {
            "unaligned"
        } else {
            "switching"
        });
        let mut cfg = config(&dir, true);
        cfg.checkpoint.retained = 1;
        if all_unaligned {
            cfg.checkpoint.unaligned = true;
        } else {
            cfg.checkpoint.aligned_checkpoint_timeout = Some(Duration::from_millis(1));
        }
        let env = Env::with_config(cfg);
        let (c, out) = (Controls::default(), CollectSink::default());
        job(&env, KEYS, 2, &c, &out);
        let handle = env.start("incremental-unaligned").expect("starts");
        two_panics_then_end(handle, &c, &out, KEYS, 40, 20);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn an_operator_with_timers_restores_exactly_from_incremental_checkpoints() {
    let dir = tmp("timers");
    let env = Env::with_config(config(&dir, true));
    let (c, out) = (Controls::default(), CollectSink::default());
    common::endless_ids(&env, &c.stop, &c.ended_at)
        .key_by(|x: &u64| x % KEYS)
        .process_with(CountWithTimers {
            panic_once: c.panic_once.clone(),
        })
        .uid("count")
        .set_parallelism(2)
        .collect_into(&out);
    let handle = env.start("incremental-timers").expect("starts");
    two_panics_then_end(handle, &c, &out, KEYS, 20, 10);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_savepoint_of_an_incremental_job_restores_without_its_runs_and_without_incremental() {
    let (dir, sp) = (tmp("sp-ckpt"), tmp("sp"));
    let out = CollectSink::default();
    let env = Env::with_config(config(&dir, true));
    let c = Controls::default();
    job(&env, KEYS, 2, &c, &out);
    let handle = env.start("incremental-sp").expect("starts");
    wait_checkpoints(&handle, 20);
    handle
        .stop_with_savepoint(&sp)
        .expect("stop with savepoint");
    // The runs are gone with the checkpoint directory: the savepoint holds the state whole.
    // (A merge thread of the stopped job may still be finishing a file in it: removed twice.)
    if std::fs::remove_dir_all(&dir).is_err() {
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut cfg = config(&tmp("sp-ckpt-b"), false);
    cfg.checkpoint.restore_from = Some(sp.clone());
    let env = Env::with_config(cfg);
    let c = Controls::default();
    job(&env, KEYS, 3, &c, &out);
    let handle = env.start("incremental-sp-b").expect("restores");
    wait_checkpoints(&handle, 3);
    end_and_check(handle, &c, &out, KEYS);
    let _ = std::fs::remove_dir_all(&sp);
}

/// New runs of a job at another parallelism (2 -> 3 -> 1) resume from the incremental
/// checkpoint the run before left when it failed for good (a panic with no restart left): each
/// new subtask reads its key groups from the old subtasks' chains (only the runs' blocks of
/// those groups). In the second run a panic right after the start restores the same way again
/// (before the run completed a checkpoint of its own) or from its own first checkpoint. Every
/// id once at the exactly-once sink, each key's counts `1..=n`.
#[test]
fn new_runs_at_another_parallelism_resume_from_incremental_chains() {
    let dir = tmp("ranged");
    let out = CollectSink::default();
    for (run, p) in [2, 3, 1].into_iter().enumerate() {
        let mut cfg = config(&dir, true);
        cfg.checkpoint.restore_latest = Some(weir::RestoreLatest::if_any(&dir));
        cfg.restart = Some(RestartStrategy::FixedDelay {
            attempts: u32::from(run == 1),
            delay: Duration::ZERO,
        });
        let env = Env::with_config(cfg);
        let c = Controls::default();
        job(&env, KEYS, p, &c, &out);
        let handle = env.start("incremental-ranged").expect("starts");
        if run == 1 {
            inject_panic(&handle, &c);
        }
        wait_checkpoints(&handle, 20);
        if run > 0 {
            let stats = handle.checkpoint_stats().unwrap_or_default();
            assert!(
                stats.last_restored_checkpoint_id.is_some(),
                "run {run} resumed from the run before: {stats:?}"
            );
        }
        assert!(runs_on_disk(&dir) > 0, "runs under shared/");
        if p == 1 {
            end_and_check(handle, &c, &out, KEYS);
        } else {
            // Its last restart used, the run fails and leaves its checkpoints.
            c.panic_once.store(true, Ordering::SeqCst);
            assert!(handle.wait().is_err(), "run {run} fails");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The complete checkpoints under `dir` (every run of every job): `(id, its _metadata's
/// mtime, the run's directory)`, newest id last.
fn complete_checkpoints(dir: &Path) -> Vec<(u64, std::time::SystemTime, PathBuf)> {
    let mut found: Vec<_> = files_under(dir)
        .into_iter()
        .filter(|e| e.file_name() == "_metadata")
        .filter_map(|e| {
            let chk = e.path().parent()?.to_owned();
            let id = chk
                .file_name()?
                .to_str()?
                .strip_prefix("chk-")?
                .parse()
                .ok()?;
            let mtime = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((id, mtime, chk.parent()?.to_owned()))
        })
        .collect();
    found.sort_by_key(|(id, ..)| *id);
    found
}

/// A run that only the newest checkpoint references has a byte of its first block flipped
/// (its length and index stay right, so the scan for the newest checkpoint takes it): the
/// state cannot be read when the next run is deployed, and the checkpoint before, which does
/// not reference that run, stands in. The newest checkpoint's output was committed, so the
/// records between the two come again (as in Flink, a lost checkpoint costs exactly-once for
/// them): each as the same `(key, count, id)`, which only the older checkpoint's state gives.
/// Past that, every id once and every key's counts; the new run's checkpoint ids go on after
/// the skipped one's (a sink that commits by id would otherwise drop their output).
#[test]
fn a_damaged_run_of_the_newest_checkpoint_gives_way_to_the_one_before() {
    let dir = tmp("damaged");
    let out = CollectSink::default();
    let mut cfg = config(&dir, true);
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 0,
        delay: Duration::ZERO,
    });
    let env = Env::with_config(cfg);
    let c = Controls::default();
    job(&env, KEYS, 2, &c, &out);
    let handle = env.start("incremental-damaged").expect("starts");
    wait_checkpoints(&handle, 20);
    // No restart left: the run fails and leaves its checkpoints.
    c.panic_once.store(true, Ordering::SeqCst);
    assert!(handle.wait().is_err(), "the first run fails");

    let complete = complete_checkpoints(&dir);
    let [.., (before, before_at, run), (newest, _, newest_run)] = complete.as_slice() else {
        panic!("two complete checkpoints retained: {complete:?}");
    };
    assert_eq!(run, newest_run, "one run");
    // Runs are written before their checkpoint's _metadata and never changed after: those
    // newer than the older checkpoint's are the newest checkpoint's own (or an incomplete
    // later one's).
    let mut damaged = 0;
    // Runs only: a merge the failure cut short leaves its partial `.tmp` file.
    let runs = files_under(&run.join("shared"))
        .into_iter()
        .filter(|e| e.path().extension().is_some_and(|x| x == "run"));
    for e in runs {
        let newer = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > *before_at);
        if newer {
            let p = e.path();
            let mut bytes = std::fs::read(&p).expect("read a run");
            if bytes.len() <= 13 {
                continue; // not a whole run (the failure cut its writing short)
            }
            // After the magic (8 bytes) and the first block's length (4): its LZ4 data.
            bytes[13] ^= 0x5a;
            std::fs::write(&p, bytes).expect("damage a run");
            damaged += 1;
        }
    }
    assert!(damaged > 0, "checkpoint {newest} wrote runs of its own");

    let mut cfg = config(&dir, true);
    cfg.checkpoint.restore_latest = Some(weir::RestoreLatest::if_any(&dir));
    let env = Env::with_config(cfg);
    let c2 = Controls::default();
    job(&env, KEYS, 2, &c2, &out);
    let handle = env.start("incremental-damaged").expect("starts");
    wait_checkpoints(&handle, 3);
    let stats = handle.checkpoint_stats().unwrap_or_default();
    assert_eq!(
        stats.last_restored_checkpoint_id,
        Some(*before),
        "checkpoint {newest} gave way to {before}: {stats:?}"
    );
    assert!(
        stats.last_completed_checkpoint_id > Some(*newest + 2),
        "ids go on after the skipped checkpoint's: {stats:?}"
    );
    c2.stop.store(true, Ordering::SeqCst);
    handle.wait().expect("the job ends");
    let mut got = out.take();
    got.sort_unstable();
    got.dedup();
    let ids: std::collections::HashSet<u64> = got.iter().map(|t| t.2).collect();
    assert_eq!(
        ids.len(),
        got.len(),
        "a replayed id came with another key or count: the restored state was not checkpoint {before}'s"
    );
    counting::check_exactly_once(KEYS, c2.ended_at.load(Ordering::SeqCst), &got);
    let _ = std::fs::remove_dir_all(&dir);
}
