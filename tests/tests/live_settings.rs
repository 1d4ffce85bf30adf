//! Live settings under continuous load, every id checked at an exactly-once sink: a checkpoint
//! interval change is seen in the checkpoints that complete, an operator's `#[weir(config)]`
//! field in its output, with `numRestarts` unchanged; a request with one bad value changes
//! nothing and names it; a plan says live or fast restart and why; every request is in the
//! history; a rollback returns to the settings of the last completed checkpoint.
//!
//! Every wait is on an event (checkpoints completed, a record seen), never on the clock.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Endless;
use weir::settings::{Applies, SettingError, INTERVAL, MODE, TIMEOUT};
use weir::{Collector, Env, EnvConfig, JobHandle, Operator, ProcessFunction};
use weir_testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};

const WAIT: Duration = Duration::from_secs(60);

/// Tags each id with its `tag`, a live-configurable field.
#[derive(Clone, Default, Operator)]
struct Tagger {
    #[weir(config)]
    tag: u64,
}

impl ProcessFunction<u64, String> for Tagger {
    fn process(&mut self, x: u64, out: &mut Collector<String>) {
        out.collect(format!("{x} {}", self.tag));
    }
}

struct Job {
    handle: JobHandle,
    stop: Arc<AtomicBool>,
    ended_at: Arc<AtomicU64>,
    out: PathBuf,
}

fn start(name: &str, cfg: EnvConfig) -> Job {
    let out = std::env::temp_dir().join(format!("weir-live-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (s, e, d) = (stop.clone(), ended_at.clone(), out.clone());
    let env = Env::with_config(cfg);
    env.add_source("ids", move |_cx| {
        Ok(Endless {
            next: 0,
            stop: s.clone(),
            ended_at: e.clone(),
            flood: false,
        })
    })
    .uid("ids")
    .rebalance()
    .apply(Tagger::default())
    .uid("tagger")
    .add_sink("exactly_once", move |cx| {
        TwoPhaseFileSink::create(&d, cx, encode_display::<String>)
    })
    .uid("exactly_once");
    Job {
        handle: env.start(name).expect("the job starts"),
        stop,
        ended_at,
        out,
    }
}

/// A job whose periodic checkpoints would come once an hour.
fn hourly() -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_secs(3600));
    cfg
}

fn completed(job: &JobHandle) -> u64 {
    job.checkpoint_stats()
        .map_or(0, |s| s.number_of_completed_checkpoints)
}

fn set(job: &JobHandle, changes: &[(&str, &str)]) -> Result<(), SettingError> {
    let changes: Vec<(String, String)> = changes
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    job.update_settings(&changes).map(|_| ())
}

/// Stops the input, waits for the end; every id once, and the tags seen, in id order.
fn finish(job: Job) -> Vec<u64> {
    job.stop.store(true, Ordering::SeqCst);
    job.handle.wait().expect("the job finishes");
    let end = job.ended_at.load(Ordering::SeqCst);
    let committed = read_committed(&job.out).expect("the sink's output");
    let mut tagged: Vec<(u64, u64)> = committed
        .lines
        .iter()
        .map(|l| {
            let (x, t) = l.split_once(' ').expect("`id tag`");
            (x.parse().unwrap(), t.parse().unwrap())
        })
        .collect();
    let report = ExactlyOnce::new(0..end).check(tagged.iter().map(|&(x, _)| x));
    assert!(report.is_exactly_once(), "{report}");
    tagged.sort_unstable();
    let _ = std::fs::remove_dir_all(&job.out);
    tagged.into_iter().map(|(_, t)| t).collect()
}

#[test]
fn a_new_checkpoint_interval_and_an_operator_field_apply_live_without_a_restart() {
    let job = start("interval", hourly());
    let h = &job.handle;
    let before = completed(h);
    set(h, &[(INTERVAL, "20ms")]).expect("a live interval change");
    // Three checkpoints complete: with the old interval the first would take an hour.
    wait_for_checkpoint(h, before + 3, WAIT).expect("checkpoints at the new interval");
    assert_eq!(
        h.checkpoint_config().interval,
        Some(Duration::from_millis(20))
    );
    assert_eq!(h.settings()[INTERVAL], "20ms");
    // An operator field: seen in the output from some record on.
    set(h, &[("operator.tagger.tag", "7")]).expect("an operator field");
    let now = completed(h);
    wait_for_checkpoint(h, now + 2, WAIT).expect("checkpoints after the change");
    // The mode, taken by each subtask between two checkpoints; checkpoints go on.
    set(h, &[(MODE, "AT_LEAST_ONCE")]).expect("a mode change");
    let now = completed(h);
    wait_for_checkpoint(h, now + 2, WAIT).expect("checkpoints in the new mode");
    set(h, &[(MODE, "EXACTLY_ONCE")]).expect("back to exactly once");
    let now = completed(h);
    wait_for_checkpoint(h, now + 2, WAIT).expect("checkpoints after");
    assert_eq!(h.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    let tags = finish(job);
    let first7 = tags
        .iter()
        .position(|&t| t == 7)
        .expect("the new tag reached the sink");
    assert!(
        tags[..first7].iter().all(|&t| t == 0),
        "0 before the change"
    );
    assert!(
        tags[first7..].iter().all(|&t| t == 7),
        "7 from the change on"
    );
}

#[test]
fn one_bad_value_changes_nothing_and_names_its_setting() {
    let job = start("bad", hourly());
    let h = &job.handle;
    let before = h.settings();
    let e = set(h, &[(INTERVAL, "20ms"), (MODE, "SOMETIMES")]).unwrap_err();
    assert!(e.to_string().contains(MODE), "{e}");
    let e = set(h, &[(INTERVAL, "20ms"), ("operator.tagger.tag", "seven")]).unwrap_err();
    assert!(e.to_string().contains("operator.tagger.tag"), "{e}");
    let e = set(h, &[("operator.tagger.tag", "7"), (TIMEOUT, "0")]).unwrap_err();
    assert!(e.to_string().contains(TIMEOUT), "{e}");
    let e = set(h, &[("operator.nobody.tag", "7")]).unwrap_err();
    assert!(e.to_string().contains("nobody"), "{e}");
    let e = set(h, &[("no.such.setting", "1")]).unwrap_err();
    assert!(matches!(e, SettingError::Unknown { .. }), "{e}");
    let e = set(h, &[("pipeline.max-parallelism", "256")]).unwrap_err();
    assert!(matches!(e, SettingError::NotLive { .. }), "{e}");
    assert_eq!(h.settings(), before, "nothing changed");
    assert_eq!(
        h.checkpoint_config().interval,
        Some(Duration::from_secs(3600))
    );
    let history = h.settings_history();
    assert_eq!(history.len(), 6, "every request is recorded: {history:?}");
    assert!(history.iter().all(|r| r.outcome != "applied"));
    // A plan says how each change would apply.
    let plan = h
        .plan_settings(&[
            (INTERVAL.into(), "100ms".into()),
            ("pipeline.max-parallelism".into(), "256".into()),
        ])
        .expect("a plan");
    assert!(matches!(plan[0].applies, Applies::Live { .. }));
    assert_eq!(plan[0].old.as_deref(), Some("3600s"));
    assert!(matches!(plan[1].applies, Applies::FastRestart { .. }));
    let tags = finish(job);
    assert!(tags.iter().all(|&t| t == 0), "the operator never changed");
}

#[test]
fn a_rollback_returns_to_the_settings_of_the_last_completed_checkpoint() {
    let job = start("rollback", hourly());
    let h = &job.handle;
    set(h, &[(INTERVAL, "20ms")]).expect("interval");
    let now = completed(h);
    wait_for_checkpoint(h, now + 2, WAIT).expect("checkpoints under it");
    // From now on no periodic checkpoint starts, so the last completed one was taken at 20ms.
    set(h, &[(INTERVAL, "off"), (TIMEOUT, "7s")]).expect("more changes");
    let report = h.rollback_settings().expect("a rollback");
    let names: Vec<&str> = report.applied.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&INTERVAL) && names.contains(&TIMEOUT),
        "{report:?}"
    );
    assert_eq!(h.settings()[INTERVAL], "20ms");
    assert_eq!(
        h.checkpoint_config().interval,
        Some(Duration::from_millis(20))
    );
    assert_ne!(h.settings()[TIMEOUT], "7s");
    let last = h.settings_history().last().cloned().expect("recorded");
    assert_eq!(last.caller, "rollback");
    let now = completed(h);
    wait_for_checkpoint(h, now + 2, WAIT).expect("checkpoints again after the rollback");
    finish(job);
}

/// A sink whose pre-commit waits while `hold` is set, so a checkpoint cannot complete.
struct HoldingSink {
    hold: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
}

impl weir::sink::Sink<u64> for HoldingSink {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), weir::SinkError> {
        batch.clear();
        Ok(())
    }
    fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<Vec<u8>>, weir::SinkError> {
        if self.hold.load(Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
        Ok(None)
    }
}

#[test]
fn a_new_timeout_and_tolerated_failures_are_seen_when_a_checkpoint_cannot_complete() {
    let (hold, held) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    let env = Env::with_config(cfg);
    let (h2, held2) = (hold.clone(), held.clone());
    common::endless_ids(&env, &stop, &ended_at)
        .add_sink("holding", move |_cx| {
            Ok(HoldingSink {
                hold: h2.clone(),
                held: held2.clone(),
            })
        })
        .uid("holding");
    let job = env.start("timeout").expect("starts");
    common::two_more_checkpoints(&job);
    // Without the change, a checkpoint held for the 10-minute timeout would just wait; and
    // with no tolerated failure, its failure would restart the job.
    set(
        &job,
        &[(TIMEOUT, "50ms"), (weir::settings::TOLERABLE, "100")],
    )
    .expect("live change");
    hold.store(true, Ordering::SeqCst);
    // Bounded only so that a regression fails instead of hanging.
    let deadline = std::time::Instant::now() + WAIT;
    while job
        .checkpoint_stats()
        .is_none_or(|s| s.number_of_failed_checkpoints == 0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the new timeout never failed the held checkpoint"
        );
        std::thread::yield_now();
    }
    assert!(
        held.load(Ordering::SeqCst) > 0,
        "the sink held a checkpoint"
    );
    assert_eq!(
        job.checkpoint_stats().map(|s| s.num_restarts),
        Some(0),
        "tolerated"
    );
    let failed = job
        .checkpoint_stats()
        .map_or(0, |s| s.number_of_failed_checkpoints);
    hold.store(false, Ordering::SeqCst);
    common::two_more_checkpoints(&job);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    assert!(failed >= 1);
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
}

#[test]
fn a_backup_policy_changes_live_and_a_bad_one_is_refused() {
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(20));
    let env = Env::with_config(cfg.clone());
    common::endless_ids(&env, &stop, &ended_at)
        .rebalance()
        .map(|x: u64| x * 2)
        .uid("double")
        .with_backup()
        .discard();
    let job = env.start("backup-policy").expect("starts");
    common::two_more_checkpoints(&job);
    let e = set(&job, &[("backup.double.heartbeat-timeout", "1h")]).unwrap_err();
    assert!(e.to_string().contains("heartbeat_timeout"), "{e}");
    let e = set(&job, &[("backup.nobody.heartbeat-timeout", "50ms")]).unwrap_err();
    assert!(e.to_string().contains("nobody"), "{e}");
    let e = set(&job, &[("backup.double.heartbeat-period", "50ms")]).unwrap_err();
    assert!(e.to_string().contains("heartbeat-interval"), "{e}");
    set(
        &job,
        &[
            ("backup.double.heartbeat-interval", "5ms"),
            ("backup.double.heartbeat-timeout", "80ms"),
        ],
    )
    .expect("a live backup policy");
    assert_eq!(job.settings()["backup.double.heartbeat-timeout"], "80ms");
    common::two_more_checkpoints(&job);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
}

/// The newest completed checkpoint, if any.
fn newest_completed(job: &JobHandle) -> Option<weir::CheckpointRecord> {
    job.checkpoint_stats()?
        .history
        .into_iter()
        .rev()
        .find(|r| r.status == weir::CheckpointStatus::Completed)
}

/// Waits (at most [`WAIT`], so that a regression fails instead of hanging) until `what` holds.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_mode_and_the_alignment_are_seen_in_how_the_subtasks_take_their_checkpoints() {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    let job = start("modes", cfg);
    let h = &job.handle;
    common::two_more_checkpoints(h);
    let r = newest_completed(h).expect("a checkpoint");
    assert!(!r.at_least_once && !r.is_unaligned, "{r:?}");
    set(h, &[(MODE, "AT_LEAST_ONCE")]).expect("a mode change");
    wait_until("an at-least-once checkpoint", || {
        newest_completed(h).is_some_and(|r| r.at_least_once && !r.is_unaligned)
    });
    set(
        h,
        &[(MODE, "EXACTLY_ONCE"), (weir::settings::UNALIGNED, "true")],
    )
    .expect("unaligned");
    wait_until("an unaligned checkpoint", || {
        newest_completed(h).is_some_and(|r| r.is_unaligned && !r.at_least_once)
    });
    set(h, &[(weir::settings::UNALIGNED, "false")]).expect("aligned again");
    wait_until("an aligned checkpoint", || {
        newest_completed(h).is_some_and(|r| !r.is_unaligned && !r.at_least_once)
    });
    assert_eq!(h.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    finish(job);
}

#[test]
fn a_min_pause_spaces_the_checkpoints_out() {
    const PAUSE_MS: u64 = 300;
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    let job = start("min-pause", cfg);
    let h = &job.handle;
    common::two_more_checkpoints(h);
    set(h, &[(weir::settings::MIN_PAUSE, "300ms")]).expect("a min pause");
    let from = newest_completed(h).map_or(0, |r| r.id);
    wait_for_checkpoint(h, completed(h) + 3, WAIT).expect("checkpoints under the pause");
    let done: Vec<weir::CheckpointRecord> = h
        .checkpoint_stats()
        .expect("stats")
        .history
        .into_iter()
        .filter(|r| r.status == weir::CheckpointStatus::Completed && r.id > from)
        .collect();
    let mut pairs = 0;
    for w in done.windows(2) {
        if w[1].id != w[0].id + 1 {
            continue;
        }
        pairs += 1;
        let ended = w[0].latest_ack_timestamp_ms.expect("acknowledged");
        // Milliseconds rounded down on both sides: at most 1 ms lost.
        assert!(
            w[1].trigger_timestamp_ms + 1 >= ended + PAUSE_MS,
            "checkpoint {} began {} ms after {} ended",
            w[1].id,
            w[1].trigger_timestamp_ms.saturating_sub(ended),
            w[0].id
        );
    }
    assert!(pairs >= 1, "{done:?}");
    assert_eq!(h.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    finish(job);
}

#[test]
fn more_concurrent_checkpoints_start_while_one_is_held() {
    let (hold, held) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(10));
    let env = Env::with_config(cfg);
    let (h2, held2) = (hold.clone(), held.clone());
    common::endless_ids(&env, &stop, &ended_at)
        .add_sink("holding", move |_cx| {
            Ok(HoldingSink {
                hold: h2.clone(),
                held: held2.clone(),
            })
        })
        .uid("holding");
    let job = env.start("concurrent").expect("starts");
    common::two_more_checkpoints(&job);
    hold.store(true, Ordering::SeqCst);
    wait_until("a held checkpoint", || held.load(Ordering::SeqCst) > 0);
    let in_progress = || {
        job.checkpoint_stats()
            .map_or(0, |s| s.number_of_in_progress_checkpoints)
    };
    // One at a time (the default): twenty trigger intervals start nothing more.
    for _ in 0..200 {
        assert!(in_progress() <= 1, "{} in progress", in_progress());
        std::thread::sleep(Duration::from_millis(1));
    }
    set(&job, &[(weir::settings::MAX_CONCURRENT, "3")]).expect("live change");
    wait_until("a second checkpoint in progress", || in_progress() >= 2);
    for _ in 0..200 {
        assert!(in_progress() <= 3, "{} in progress", in_progress());
        std::thread::sleep(Duration::from_millis(1));
    }
    hold.store(false, Ordering::SeqCst);
    common::two_more_checkpoints(&job);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
}

/// Records seen by a counting map, and the number of them at most `rate` per second allows
/// over `wait` from now (the limit shows as an upper bound only: a slow machine is slower).
fn at_most(seen: &AtomicU64, rate: f64, wait: Duration) {
    // Records already read before the change drain first.
    std::thread::sleep(Duration::from_millis(300));
    let (t0, c0) = (std::time::Instant::now(), seen.load(Ordering::SeqCst));
    std::thread::sleep(wait);
    let (secs, n) = (t0.elapsed().as_secs_f64(), seen.load(Ordering::SeqCst) - c0);
    // The bucket's burst (at most 100 ms of records) and one batch in a channel.
    let allowed = rate * (secs + 0.1) + 64.0;
    assert!(
        (n as f64) <= allowed,
        "{n} records in {secs:.2} s at {rate} per second"
    );
}

#[test]
fn the_source_rate_and_the_rate_controller_change_live() {
    use weir::settings::{RATE_ENABLED, RATE_INITIAL, RATE_MAX, RATE_MIN, RATE_P, SOURCE_RATE};
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let seen = Arc::new(AtomicU64::new(0));
    let env = Env::with_config(hourly());
    let s2 = seen.clone();
    common::endless_ids(&env, &stop, &ended_at)
        .map(move |x: u64| {
            s2.fetch_add(1, Ordering::SeqCst);
            x
        })
        .uid("count")
        .discard();
    let job = env.start("rate").expect("starts");
    let grows_by = |n: u64| {
        let c0 = seen.load(Ordering::SeqCst);
        wait_until(&format!("{n} more records"), || {
            seen.load(Ordering::SeqCst) >= c0 + n
        });
    };
    grows_by(20_000);
    set(&job, &[(SOURCE_RATE, "200")]).expect("a fixed rate");
    assert_eq!(job.settings()[SOURCE_RATE], "200");
    at_most(&seen, 200.0, Duration::from_secs(1));
    set(&job, &[(RATE_ENABLED, "false")]).expect("no rate control");
    assert_eq!(job.settings()[SOURCE_RATE], "off");
    // At 200 per second this would take 100 s.
    grows_by(20_000);
    set(
        &job,
        &[
            (RATE_ENABLED, "true"),
            (RATE_INITIAL, "300"),
            (RATE_MIN, "100"),
            (RATE_MAX, "300"),
            (RATE_P, "0.5"),
        ],
    )
    .expect("a controlled rate");
    assert_eq!(job.settings()[SOURCE_RATE], "controlled");
    assert_eq!(job.settings()[RATE_P], "0.5");
    at_most(&seen, 300.0, Duration::from_secs(1));
    let e = set(&job, &[(RATE_MIN, "500")]).unwrap_err();
    assert!(e.to_string().contains(RATE_MAX), "{e}");
    let e = set(&job, &[(RATE_INITIAL, "fast")]).unwrap_err();
    assert!(e.to_string().contains(RATE_INITIAL), "{e}");
    assert_eq!(job.settings()[RATE_MIN], "100", "nothing changed");
    set(&job, &[(SOURCE_RATE, "off")]).expect("off");
    grows_by(20_000);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
}

#[test]
fn a_shorter_backup_heartbeat_timeout_is_seen_promoting_a_hung_primary() {
    use weir_testing::{Fault, FaultKind, FaultPlan};
    weir_testing::quiet_released_hangs();
    const OLD_TIMEOUT: Duration = Duration::from_secs(60);
    let (stop, ended_at) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let plan = FaultPlan::new(vec![
        Fault::new("double", FaultKind::Hang, 0).after_checkpoints(1)
    ]);
    let mut cfg = hourly();
    cfg.heartbeat_timeout = Duration::from_secs(120);
    cfg.faults = plan.clone();
    let env = Env::with_config(cfg);
    let out = weir::CollectSink::default();
    common::endless_ids(&env, &stop, &ended_at)
        .rebalance()
        .map(|x: u64| x)
        .uid("double")
        .with_backup_policy(
            weir::BackupPolicy::default().heartbeat(Duration::from_millis(10), OLD_TIMEOUT),
        )
        .collect_into(&out);
    let job = env.start("backup-timeout").expect("starts");
    set(&job, &[("backup.double.heartbeat-timeout", "100ms")]).expect("a live timeout");
    // The hang comes after the first checkpoint.
    job.monitor().trigger_checkpoint().expect("a checkpoint");
    wait_until("the hang", || plan.fired() == 1);
    let hung = std::time::Instant::now();
    wait_until("a promotion", || {
        job.backup_metrics().iter().any(|m| m.promotions >= 1)
    });
    assert!(
        hung.elapsed() < OLD_TIMEOUT,
        "promoted after {:?}",
        hung.elapsed()
    );
    set(&job, &[(INTERVAL, "20ms")]).expect("periodic checkpoints");
    common::two_more_checkpoints(&job);
    assert_eq!(job.checkpoint_stats().map(|s| s.num_restarts), Some(0));
    stop.store(true, Ordering::SeqCst);
    job.wait().expect("finishes");
    let end = ended_at.load(Ordering::SeqCst);
    let report = ExactlyOnce::new(0..end).check(out.take());
    assert!(report.is_exactly_once(), "{report}");
}
