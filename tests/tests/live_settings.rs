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
use weir::testing::{
    encode_display, read_committed, wait_for_checkpoint, ExactlyOnce, TwoPhaseFileSink,
};
use weir::{Collector, Env, EnvConfig, JobHandle, Operator, ProcessFunction};

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
