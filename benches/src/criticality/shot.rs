//! One shot: a run of the job with one fault, its work directories, the sink that can fail in
//! the harness's place, the watcher that stamps a hang's or a stop's time, and the summary of
//! an operator's shots.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::sink::{Sink, SinkContext};
use weir::{Env, EnvConfig, RestartStrategy, SinkError};
use weir_examples::answers::{uid, Answers};
use weir_testing::{clear_part_files, read_committed, Fault, FaultPlan};

use crate::recovery_support::{
    build_cleaning_job, install_fault_hook, tally, Expected, FlatMapSetup, ProbedSink,
    RecoveryProbe,
};
use crate::{clock_ns, median};

use super::placement::{Injector, Placement};
use super::{CriticalityOptions, OperatorCriticality, JOB, RESTART_ATTEMPTS, WATCH_INTERVAL};

/// The output and checkpoint directories, deleted at the end.
pub(super) struct WorkDirs {
    pub(super) root: PathBuf,
    pub(super) out: PathBuf,
    pub(super) malformed: PathBuf,
    pub(super) checkpoints: PathBuf,
}

impl WorkDirs {
    pub(super) fn new() -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let root =
            std::env::temp_dir().join(format!("weir-criticality-{}-{nanos}", std::process::id()));
        let out = root.join("out");
        let dirs = WorkDirs {
            malformed: out.join("malformed"),
            checkpoints: root.join("checkpoints"),
            out,
            root,
        };
        std::fs::create_dir_all(&dirs.checkpoints)
            .map_err(|e| format!("cannot create {}: {e}", dirs.checkpoints.display()))?;
        Ok(dirs)
    }
}

impl Drop for WorkDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The figures of one run.
#[derive(Debug)]
pub(super) struct Shot {
    pub(super) fired: bool,
    pub(super) recovery_ms: Option<f64>,
    pub(super) output_resume_ms: Option<f64>,
    pub(super) target_replayed: bool,
    pub(super) from_scratch: bool,
    pub(super) restarts: u64,
    pub(super) duplicates: u64,
    pub(super) missing: u64,
    pub(super) unexpected: u64,
    pub(super) wrong_lines: u64,
}

/// A panic of the harness's sink at its subtask's `at_record`-th record, once per run.
#[derive(Debug, Clone)]
pub(super) struct SinkFault {
    pub(super) subtask: usize,
    pub(super) at_record: u64,
    pub(super) fired: Arc<AtomicBool>,
}

/// The exactly-once file sink, failing as a [`FaultPlan`] fault would (the framework does not
/// inject faults into sinks): before the batch holding the fault's record.
pub(super) struct FaultySink {
    pub(super) inner: ProbedSink,
    pub(super) fault: Option<SinkFault>,
    pub(super) seen: u64,
}

impl Sink<String> for FaultySink {
    fn write_batch(&mut self, batch: &mut Vec<String>) -> Result<(), SinkError> {
        if let Some(f) = &self.fault {
            let (from, to) = (self.seen, self.seen + batch.len() as u64);
            self.seen = to;
            if (from..to).contains(&f.at_record) && !f.fired.swap(true, Ordering::SeqCst) {
                panic!(
                    "injected fault: operator `{}` panics at record {}",
                    uid::SINK,
                    f.at_record
                );
            }
        }
        self.inner.write_batch(batch)
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.inner.finish()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.inner.pre_commit(checkpoint)
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        self.inner.commit(checkpoint)
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.inner.initialize(restored)
    }
}

/// Whether the run's fault fired (readable from any thread).
#[derive(Clone)]
pub(super) struct Fired {
    pub(super) plan: FaultPlan,
    pub(super) sink: Option<SinkFault>,
}

impl Fired {
    pub(super) fn get(&self) -> bool {
        self.plan.fired() > 0
            || self
                .sink
                .as_ref()
                .is_some_and(|f| f.fired.load(Ordering::SeqCst))
    }
}

/// Records the fault's time in `probe` if the panic hook did not (a hang or an arbiter stop).
pub(super) fn stamp_fault(probe: &RecoveryProbe) {
    let _ =
        probe
            .fault_ns
            .compare_exchange(0, clock_ns().max(1), Ordering::SeqCst, Ordering::SeqCst);
}

/// The graph of the `recovery` harness ([`build_cleaning_job`]): sink subtasks created after
/// the fault report to `probe` (so only the restarted job's receipt of the target counts), and
/// `sink_fault` makes the main sink fail.
pub(super) fn build(
    env: &Env,
    opts: &CriticalityOptions,
    dirs: &WorkDirs,
    probe: Arc<RecoveryProbe>,
    fired: Fired,
) {
    let answers = Answers::Generated {
        records: opts.records,
        seed: opts.answers_seed,
    };
    let dir = dirs.out.clone();
    build_cleaning_job(
        env,
        &answers,
        opts.parallelism,
        &dirs.out,
        &FlatMapSetup::default(),
        move |cx: &SinkContext| {
            let restarted = fired.get();
            if restarted {
                // The watcher may not have seen an arbiter stop yet.
                stamp_fault(&probe);
            }
            let inner = ProbedSink::create(&dir, cx, restarted.then(|| probe.clone()))?;
            Ok(FaultySink {
                inner,
                fault: fired.sink.clone().filter(|f| f.subtask == cx.subtask),
                seen: 0,
            })
        },
    );
}

/// The fault of one shot: in the framework's fault plan, or in the harness's sink.
pub(super) fn fault_of(
    opts: &CriticalityOptions,
    op: &str,
    injector: Injector,
    place: &Placement,
) -> Fired {
    let (plan, sink) = match injector {
        Injector::Plan => (
            FaultPlan::new(vec![Fault::new(
                op,
                opts.kind.fault_kind(),
                place.local_record,
            )
            .in_subtask(place.subtask)]),
            None,
        ),
        Injector::HarnessSink => (
            FaultPlan::default(),
            Some(SinkFault {
                subtask: place.subtask,
                at_record: place.local_record,
                fired: Arc::new(AtomicBool::new(false)),
            }),
        ),
    };
    Fired { plan, sink }
}

/// The job's configuration: checkpoints, restarts, failure detection and `plan`'s faults.
pub(super) fn env_config(opts: &CriticalityOptions, dirs: &WorkDirs, plan: FaultPlan) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    if opts.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(Duration::from_millis(opts.checkpoint_interval_ms));
    }
    cfg.checkpoint.directory = dirs.checkpoints.clone();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: RESTART_ATTEMPTS,
        delay: Duration::from_millis(opts.restart_delay_ms),
    });
    cfg.heartbeat_timeout = Duration::from_millis(opts.heartbeat_timeout_ms);
    cfg.metrics_interval = Duration::from_millis((opts.heartbeat_timeout_ms / 5).max(10));
    cfg.faults = plan;
    cfg
}

pub(super) fn run_one(
    opts: &CriticalityOptions,
    dirs: &WorkDirs,
    expected: &Expected,
    op: &str,
    injector: Injector,
    place: &Placement,
) -> Result<Shot, String> {
    for d in [&dirs.out, &dirs.malformed] {
        clear_part_files(d).map_err(|e| format!("cannot prepare {}: {e}", d.display()))?;
    }
    let probe = Arc::new(RecoveryProbe::new(Some(place.target_id)));
    install_fault_hook(probe.clone());
    let fired = fault_of(opts, op, injector, place);
    let cfg = env_config(opts, dirs, fired.plan.clone());
    let env = Env::with_config(cfg);
    build(&env, opts, dirs, probe.clone(), fired.clone());

    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if fired.get() {
                    stamp_fault(&probe);
                    return;
                }
                std::thread::sleep(WATCH_INTERVAL);
            }
        });
        let r = env.execute(JOB);
        done.store(true, Ordering::SeqCst);
        r
    });
    let job_dir = dirs.checkpoints.join(JOB);
    if job_dir.exists() {
        std::fs::remove_dir_all(&job_dir)
            .map_err(|e| format!("cannot remove {}: {e}", job_dir.display()))?;
    }
    let result = result.map_err(|e| format!("the job failed: {e}"))?;

    let committed = read_committed(&dirs.out)
        .map_err(|e| format!("cannot read the output in {}: {e}", dirs.out.display()))?;
    let t = tally(expected, &committed.lines);
    let target = probe.ms_after_fault(&probe.target_after_fault_ns);
    let resume = probe.ms_after_fault(&probe.first_write_after_fault_ns);
    let restored = *probe
        .restored_checkpoint
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let fired = fired.get();
    Ok(Shot {
        fired,
        recovery_ms: target.or(resume),
        output_resume_ms: resume,
        target_replayed: target.is_some(),
        from_scratch: fired && restored.is_none(),
        restarts: result.checkpoints.as_ref().map_or(0, |s| s.num_restarts),
        duplicates: t.duplicates,
        missing: t.missing,
        unexpected: t.unexpected,
        wrong_lines: t.wrong_lines,
    })
}

pub(super) fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

pub(super) fn summarize(op: &str, injector: Injector, shots: &[Shot]) -> OperatorCriticality {
    let each: Vec<f64> = shots.iter().filter_map(|s| s.recovery_ms).collect();
    let resume: Vec<f64> = shots.iter().filter_map(|s| s.output_resume_ms).collect();
    let sum = |f: fn(&Shot) -> u64| shots.iter().map(f).sum::<u64>();
    OperatorCriticality {
        rank: 0,
        uid: op.to_owned(),
        injected_by: injector.name().into(),
        faults: shots.len(),
        mean_recovery_ms: mean(&each),
        p50_recovery_ms: median(&each).unwrap_or(0.0),
        min_recovery_ms: each.iter().copied().reduce(f64::min).unwrap_or(0.0),
        max_recovery_ms: each.iter().copied().reduce(f64::max).unwrap_or(0.0),
        mean_output_resume_ms: mean(&resume),
        recovery_ms_each: each,
        restarts_from_scratch: shots.iter().filter(|s| s.from_scratch).count(),
        restarts: sum(|s| s.restarts),
        target_not_replayed: shots.iter().filter(|s| !s.target_replayed).count(),
        duplicates: sum(|s| s.duplicates),
        missing: sum(|s| s.missing),
        unexpected: sum(|s| s.unexpected),
        wrong_lines: sum(|s| s.wrong_lines),
    }
}
