//! Savepoints: take one from a running job, stop with one, start a job from one; state is
//! matched by operator uid.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::rate::RateControlConfig;
use weir::{CollectSink, Collector, Env, EnvConfig, JobError, ValueState};
use weir_testing::{HeldIds, Hold};

const N: u64 = 40_000;
const KEYS: u64 = 5;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-sp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Checkpoints on (so the collect sink is exactly-once) but rare: only savepoints happen.
fn config(ckpt_dir: &Path, restore_from: Option<&Path>, allow_non_restored: bool) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.arbiters = 2;
    cfg.checkpoint.interval = Some(Duration::from_secs(3600));
    cfg.checkpoint.directory = ckpt_dir.to_owned();
    cfg.checkpoint.restore_from = restore_from.map(Path::to_owned);
    cfg.checkpoint.allow_non_restored_state = allow_non_restored;
    let mut rc = RateControlConfig::default();
    rc.enabled = true;
    rc.initial_rate = Some(40_000.0);
    rc.min_rate = 40_000.0;
    rc.max_rate = Some(40_000.0);
    cfg.rate_control = rc;
    cfg
}

/// Ids `0..N` from a [`HeldIds`] source that stops, idle, after the first half until `hold` is
/// released, counted per key; `seen` counts the records the keyed operator processed.
fn job(
    env: &Env,
    count_uid: &str,
    out: &CollectSink<(u64, u64, u64)>,
    hold: &Hold,
    seen: &Arc<AtomicU64>,
) {
    let (h, seen) = (hold.clone(), seen.clone());
    env.add_source("ids", move |cx| Ok(HeldIds::new(cx, N, 0.5, h.clone())))
        .uid("src")
        .key_by(|x: &u64| x % KEYS)
        .process(
            move |k: &u64,
                  s: &mut ValueState<u64>,
                  x: u64,
                  out: &mut Collector<(u64, u64, u64)>| {
                let c = s.get_or_insert_with(|| 0);
                *c += 1;
                out.collect((*k, *c, x));
                seen.fetch_add(1, Ordering::SeqCst);
            },
        )
        .uid(count_uid)
        .collect_into(out);
}

/// A hold already released: the job runs to the end.
fn released() -> Hold {
    let hold = Hold::new();
    hold.release();
    hold
}

/// Waits (up to 30 s) until the keyed operator processed the first half of the ids, all that
/// comes before the hold: a savepoint then stops the job mid-way however fast the machine is.
fn wait_for_first_half(seen: &AtomicU64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.load(Ordering::SeqCst) < N / 2 {
        assert!(Instant::now() < deadline, "the first half never came");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn stop_with_savepoint_then_resume_is_exactly_once() {
    let (ckpt, sp) = (tmp("ckpt-a"), tmp("stop"));
    // One sink handle across both jobs, as one external system would be.
    let out = CollectSink::default();
    let env = Env::with_config(config(&ckpt, None, false));
    let seen = Arc::new(AtomicU64::new(0));
    job(&env, "count", &out, &Hold::new(), &seen);
    let handle = env.start("savepoint-a").unwrap();
    wait_for_first_half(&seen);
    // A savepoint while running, then stop with another.
    let first = handle.savepoint(tmp("running")).expect("savepoint");
    assert!(first.join("_metadata").is_file());
    let (path, _result) = handle
        .stop_with_savepoint(&sp)
        .expect("stop with savepoint");
    assert_eq!(path, sp);
    let a = out.len();
    assert_eq!(
        a as u64,
        N / 2,
        "stopped mid-way, with all it had processed committed"
    );

    // Resume from the savepoint.
    let env = Env::with_config(config(&tmp("ckpt-b"), Some(&sp), false));
    job(&env, "count", &out, &released(), &Arc::default());
    env.execute("savepoint-b").expect("resumed job completes");
    let all = out.take();

    let mut seen = vec![0u8; N as usize];
    let mut counts: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, c, id) in &all {
        seen[id as usize] += 1;
        counts.entry(k).or_default().push(c);
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "every id exactly once across both jobs"
    );
    for k in 0..KEYS {
        let mut cs = counts.remove(&k).unwrap();
        cs.sort_unstable();
        assert_eq!(
            cs,
            (1..=N / KEYS).collect::<Vec<_>>(),
            "key {k}: counts continue"
        );
    }
    // Reusing a savepoint directory is refused.
    let env = Env::with_config(config(&tmp("ckpt-c"), None, false));
    job(
        &env,
        "count",
        &CollectSink::default(),
        &released(),
        &Arc::default(),
    );
    let handle = env.start("savepoint-c").unwrap();
    match handle.savepoint(&sp) {
        Err(JobError::Savepoint { message, .. }) => {
            assert!(message.contains("already"), "{message}")
        }
        other => panic!("expected a refused savepoint, got {other:?}"),
    }
    handle.cancel();
    let _ = handle.wait();
}

#[test]
fn unmatched_state_is_an_error_unless_allowed() {
    let (ckpt, sp) = (tmp("ckpt-u"), tmp("unmatched"));
    let out = CollectSink::default();
    let env = Env::with_config(config(&ckpt, None, false));
    let seen = Arc::new(AtomicU64::new(0));
    job(&env, "count", &out, &Hold::new(), &seen);
    let handle = env.start("unmatched-a").unwrap();
    wait_for_first_half(&seen);
    handle
        .stop_with_savepoint(&sp)
        .expect("stop with savepoint");
    let before = out.len();

    // The keyed operator got a new uid: its state has no home.
    let env = Env::with_config(config(&tmp("ckpt-u2"), Some(&sp), false));
    job(&env, "count-v2", &out, &released(), &Arc::default());
    match env.execute("unmatched-b") {
        Err(JobError::Runtime { message, .. }) => {
            assert!(message.contains("`count`"), "names the uid: {message}");
            assert!(message.contains("allow_non_restored_state"), "{message}");
        }
        other => panic!("expected an unmatched-state error, got {other:?}"),
    }
    // Allowed: it runs, the source resumes, the new operator starts empty.
    let env = Env::with_config(config(&tmp("ckpt-u3"), Some(&sp), true));
    job(&env, "count-v2", &out, &released(), &Arc::default());
    env.execute("unmatched-c")
        .expect("runs with allow_non_restored_state");
    // The source resumed at its position: every id once across both jobs.
    let all = out.take();
    assert_eq!(before as u64, N / 2, "stopped at the hold");
    let mut ids: Vec<u64> = all.iter().map(|r| r.2).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
}

/// A line source split among its subtasks by byte range resumes from a savepoint with every
/// line exactly once; restored at another parallelism (other ranges) it is refused.
#[test]
fn a_line_source_resumes_its_byte_ranges_and_refuses_another_parallelism() {
    const LINES: u64 = 20_000;
    let dir = tmp("lines-input");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("in.txt");
    let text: String = (0..LINES).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let job = |env: &Env, p: usize, out: &CollectSink<String>| {
        env.read_lines(&file)
            .uid("lines")
            .set_parallelism(p)
            .collect_into(out);
    };
    // Rate-limited to 1,000 records/s (20 s for the file): still running when the savepoint
    // is taken.
    let (ckpt, sp) = (tmp("ckpt-lines"), tmp("lines"));
    let out = CollectSink::default();
    let mut cfg = config(&ckpt, None, false);
    cfg.rate_control.initial_rate = Some(1_000.0);
    cfg.rate_control.min_rate = 1_000.0;
    cfg.rate_control.max_rate = Some(1_000.0);
    let env = Env::with_config(cfg);
    job(&env, 2, &out);
    let handle = env.start("lines-a").unwrap();
    handle
        .stop_with_savepoint(&sp)
        .expect("stop with savepoint");
    let before = out.len() as u64;
    assert!(before < LINES, "stopped mid-way");
    eprintln!("{before} lines before the savepoint");

    let mut cfg = config(&tmp("ckpt-lines-b"), Some(&sp), false);
    cfg.rate_control = RateControlConfig::default();
    let env = Env::with_config(cfg.clone());
    job(&env, 3, &CollectSink::default());
    let err = env.execute("lines-b").expect_err("another parallelism");
    assert!(err.to_string().contains("it is a source"), "{err}");

    let env = Env::with_config(cfg);
    job(&env, 2, &out);
    env.execute("lines-c").expect("resumed job completes");
    let mut got = out.take();
    got.sort_by_key(|l| l[5..].parse::<u64>().unwrap());
    let want: Vec<String> = (0..LINES).map(|i| format!("line {i}")).collect();
    assert_eq!(got, want, "every line exactly once across both jobs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stop-with-savepoint whose copy fails (its directory already holds a savepoint) answers
/// why, and the job does not stop: its sources read on, and it ends with every id once.
#[test]
fn a_stop_with_savepoint_that_cannot_be_copied_answers_why_and_the_job_goes_on() {
    let sp = tmp("taken");
    std::fs::create_dir_all(&sp).unwrap();
    std::fs::write(sp.join("_metadata"), b"an earlier savepoint").unwrap();
    let out = CollectSink::default();
    let env = Env::with_config(config(&tmp("ckpt-taken"), None, false));
    let seen = Arc::new(AtomicU64::new(0));
    let hold = Hold::new();
    job(&env, "count", &out, &hold, &seen);
    let handle = env.start("savepoint-taken").unwrap();
    wait_for_first_half(&seen);
    let answer = handle.monitor().trigger_savepoint(sp.clone(), true);
    let err = answer
        .recv_timeout(Duration::from_secs(60))
        .expect("an answer")
        .expect_err("the directory holds a savepoint");
    assert!(err.contains("already there"), "{err}");
    hold.release();
    // Its sources paused at the savepoint's barrier read on (without that it never ends).
    common::within_timeout(move || handle.wait()).expect("the job runs on to its end");
    let mut ids: Vec<u64> = out.take().iter().map(|&(_, _, id)| id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..N).collect::<Vec<_>>(), "every id once");
}
