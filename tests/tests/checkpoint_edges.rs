//! Checkpoint edge cases: timeouts (tolerated, and not), and a reference savepoint committed
//! in `tests/data/reference-savepoint-v1/` that the current version must still restore.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::rate::RateControlConfig;
use weir::{CollectSink, Collector, Env, EnvConfig, JobError, ValueState};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-edge-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A map that stalls for `stall` once, at record 2,000: barriers behind it wait.
fn stalling_job(env: &Env, stall: Duration) -> CollectSink<u64> {
    env.generate(6_000, |i| i)
        .map(move |x: u64| {
            if x == 2_000 {
                std::thread::sleep(stall);
            }
            x
        })
        .uid("stall")
        .rebalance()
        .map(|x: u64| x)
        .collect()
}

fn timeout_config(tolerable: u32) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = 64;
    cfg.metrics_interval = Duration::from_millis(10);
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    cfg.checkpoint.timeout = Duration::from_millis(60);
    cfg.checkpoint.tolerable_failed_checkpoints = tolerable;
    cfg.checkpoint.directory = tmp(&format!("timeout-{tolerable}"));
    cfg.rate_control = RateControlConfig::fixed(20_000.0);
    cfg
}

#[test]
fn a_checkpoint_that_times_out_is_aborted_and_later_ones_complete() {
    let env = Env::with_config(timeout_config(1_000));
    let out = stalling_job(&env, Duration::from_millis(300));
    let result = env
        .execute("timeout-tolerated")
        .expect("tolerated timeouts");
    let stats = result.checkpoints.expect("checkpoint stats");
    assert!(stats.number_of_failed_checkpoints >= 1, "{stats:?}");
    assert!(stats.number_of_completed_checkpoints >= 2, "{stats:?}");
    let mut v = out.take();
    v.sort_unstable();
    assert_eq!(v, (0..6_000).collect::<Vec<_>>());
}

#[test]
fn more_timeouts_than_tolerated_fail_the_job() {
    let mut cfg = timeout_config(0);
    // The stall repeats at the same record after every restore: no restarts here.
    cfg.restart = Some(weir::RestartStrategy::None);
    let env = Env::with_config(cfg);
    let _ = stalling_job(&env, Duration::from_millis(300));
    match env.execute("timeout-not-tolerated") {
        Err(JobError::CheckpointsFailing {
            failures,
            tolerated,
            ..
        }) => {
            assert_eq!(tolerated, 0);
            assert!(failures >= 1);
        }
        other => panic!("expected CheckpointsFailing, got {other:?}"),
    }
}

const REF_N: u64 = 2_000;
const REF_KEYS: u64 = 3;

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/reference-savepoint-v1")
}

fn reference_job(env: &Env, out: &CollectSink<(u64, u64, u64)>) {
    env.generate(REF_N, |i| i)
        .uid("src")
        .key_by(|x: &u64| x % REF_KEYS)
        .process(
            |k: &u64, s: &mut ValueState<u64>, x: u64, o: &mut Collector<(u64, u64, u64)>| {
                let c = s.get_or_insert_with(|| 0);
                *c += 1;
                o.collect((*k, *c, x));
            },
        )
        .uid("count")
        .collect_into(out);
}

fn reference_config(restore: Option<&Path>, dir: &Path) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_secs(3600));
    cfg.checkpoint.directory = dir.to_owned();
    cfg.checkpoint.restore_from = restore.map(Path::to_owned);
    cfg.rate_control = RateControlConfig::fixed(4_000.0);
    cfg
}

/// Writes the reference savepoint and the output a job resumed from it must produce. Run
/// by hand (`cargo test -p weir-tests --test checkpoint_edges -- --ignored`) only when the
/// format changes on purpose, with a new directory name (`-v2`).
#[test]
#[ignore = "regenerates committed reference data"]
fn regenerate_reference_savepoint() {
    let dir = reference_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let out = CollectSink::default();
    let env = Env::with_config(reference_config(None, &tmp("ref-gen")));
    reference_job(&env, &out);
    let handle = env.start("reference").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    handle.stop_with_savepoint(&dir).unwrap();
    let resumed = resume(&dir);
    std::fs::write(
        dir.join("expected-resumed-output.json"),
        serde_json::to_string(&resumed).unwrap(),
    )
    .unwrap();
}

fn resume(dir: &Path) -> Vec<(u64, u64, u64)> {
    let out = CollectSink::default();
    let env = Env::with_config(reference_config(Some(dir), &tmp("ref-resume")));
    reference_job(&env, &out);
    env.execute("reference-resume")
        .expect("resumes from the reference savepoint");
    let mut v = out.take();
    v.sort_unstable();
    v
}

#[test]
fn the_reference_savepoint_still_restores() {
    let dir = reference_dir();
    let expected: Vec<(u64, u64, u64)> = serde_json::from_slice(
        &std::fs::read(dir.join("expected-resumed-output.json")).expect("reference data"),
    )
    .unwrap();
    assert!(!expected.is_empty());
    assert_eq!(resume(&dir), expected);
}
