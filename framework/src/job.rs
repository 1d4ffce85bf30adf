//! Running jobs: deployment on arbiters, the job's verdict, its handle and its result.
//!
//! A job runs on a thread of its own with an actix `System`; its subtask actors are placed
//! round robin on a pool of `Arbiter`s (threads). The job waits for one event per subtask:
//! all finished is success; the first failure, a lost subtask or `cancel()` stops every actor
//! and arbiter and is the job's error. A hung user function cannot be interrupted (threads
//! cannot be killed); the job still returns, and that arbiter thread is left to end on its own
//! (logged). This module owns the lifecycle; planning is `plan`, the actor is `task`.

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::channel::mpsc::{unbounded, UnboundedSender};
use futures::StreamExt;

use crate::backup::{BackupGroup, BackupMetrics, BackupPing};
use crate::checkpoint::align::AlignMode;
use crate::checkpoint::coordinator::{CheckpointStats, Completed, Coordinator};
use crate::checkpoint::store;
use crate::config::EnvConfig;
use crate::error::JobError;
use crate::graph::Graph;
use crate::hooks::{ConfigError, StateError, StateSnapshot};
use crate::metrics::{JobMetrics, SubtaskCounters, SubtaskSample};
use crate::plan::{instantiate, plan, OperatorRegistry, Plan, Restore};
use crate::rate::{RateConfigError, RateControlConfig};
use crate::restart::{RestartStrategy, RestartTracker};
use crate::sampler::{OperatorProbe, RateController, Sampler, SubtaskProbe};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc, Mutex};
use crate::task::{
    AbortCheckpoint, Configure, Driver, JobEvent, NotifyComplete, Ping, Sample, SetRate,
    SnapshotState, Stop, SubtaskActor, SubtaskId, SubtaskStatus, TriggerCheckpoint,
};
use std::collections::BTreeMap;

/// Counters of one operator over all its subtasks, at the end of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperatorResult {
    /// The operator's uid.
    pub uid: String,
    /// Its display name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// Records it received.
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
    /// Records a source refused as malformed (`MalformedPolicy::Skip`).
    pub records_rejected: u64,
}

/// What a completed job reports.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobResult {
    /// The job's name.
    pub name: String,
    /// Wall time from deployment to the last subtask finishing.
    pub duration: Duration,
    /// Per operator, in graph order.
    pub operators: Vec<OperatorResult>,
    /// Checkpoint statistics, with checkpoints on (including `num_restarts`).
    pub checkpoints: Option<CheckpointStats>,
    /// Backed-up subtasks at the end (promotions, failover time, buffer queue); a job that
    /// restarted reports its last run's, with `degraded` set if any run's queue degraded.
    pub backups: Vec<BackupMetrics>,
}

impl JobResult {
    /// The result of the operator with `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorResult> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}

/// Cancels a running job from any thread.
#[derive(Debug, Clone)]
pub struct Canceller {
    events: UnboundedSender<JobEvent>,
}

impl Canceller {
    /// Asks the job to stop; `wait` then returns [`JobError::Cancelled`]. Cancelling a job
    /// that has already ended does nothing.
    pub fn cancel(&self) {
        let _ = self.events.unbounded_send(JobEvent::Cancel);
    }
}

#[derive(Clone)]
struct ActorEntry {
    /// Uids of every operator in the actor's chain.
    uids: Vec<String>,
    subtask: usize,
    addr: Addr<SubtaskActor>,
    counters: Arc<SubtaskCounters>,
}

impl ActorEntry {
    /// Puts a control mail in the subtask's system lane (counted for `mailboxQueueSize`).
    fn mail<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubtaskActor: Handler<M>,
    {
        self.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
        self.addr.do_send(msg);
    }
}

/// A ping already in a subtask's system lane, waiting for its answer.
pub struct PendingPing {
    reply: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<SubtaskStatus, MailboxError>> + Send>,
    >,
}

impl std::fmt::Debug for PendingPing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingPing")
    }
}

impl PendingPing {
    /// Waits for the answer; `None` if the subtask stopped first.
    pub fn wait(self) -> Option<SubtaskStatus> {
        futures::executor::block_on(self.reply).ok()
    }
}

/// A running job.
pub struct JobHandle {
    name: String,
    canceller: Canceller,
    /// The current deployment's subtasks (replaced when the job restarts).
    actors: Arc<Mutex<Vec<ActorEntry>>>,
    metrics: Arc<Mutex<Option<JobMetrics>>>,
    checkpoints: Arc<Mutex<Option<CheckpointStats>>>,
    backups: SharedGroups,
    thread: Option<JoinHandle<Result<JobResult, JobError>>>,
}

/// The backup groups of the current deployment.
type SharedGroups = Arc<Mutex<Vec<std::sync::Arc<dyn BackupGroup>>>>;

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("name", &self.name)
            .field("subtasks", &lock(&self.actors).len())
            .finish()
    }
}

impl JobHandle {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle that cancels this job from another thread.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// Cancels the job.
    pub fn cancel(&self) {
        self.canceller.cancel()
    }

    /// Sends a heartbeat ping through the system lane of the subtask that runs operator `uid`,
    /// subtask `subtask`, and waits for its answer. `None` if there is no such subtask or it
    /// has already stopped.
    pub fn ping(&self, uid: &str, subtask: usize) -> Option<SubtaskStatus> {
        self.send_ping(uid, subtask)?.wait()
    }

    /// Puts a ping in the system lane of that subtask now and returns without waiting; the
    /// answer is read with [`PendingPing::wait`]. `None` if there is no such subtask.
    pub fn send_ping(&self, uid: &str, subtask: usize) -> Option<PendingPing> {
        let entry = self
            .subtasks_of(uid)
            .into_iter()
            .find(|a| a.subtask == subtask)?;
        // `Addr::send` enqueues the mail before it returns the reply future.
        entry.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
        Some(PendingPing {
            reply: Box::pin(entry.addr.send(Ping)),
        })
    }

    /// Takes a savepoint of the running job into `dir` (a directory that holds no savepoint)
    /// and returns its path once it is complete. A savepoint is a checkpoint in a place of
    /// your choosing that is never deleted automatically; start a job from it with
    /// `CheckpointConfig::restore_from`.
    pub fn savepoint(
        &self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<std::path::PathBuf, JobError> {
        self.request_savepoint(dir.as_ref(), false)
    }

    /// Takes a savepoint into `dir`, then stops the job; returns the savepoint's path and the
    /// job's result. Output after the savepoint is not committed: a job started from the
    /// savepoint produces it.
    pub fn stop_with_savepoint(
        self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<(std::path::PathBuf, JobResult), JobError> {
        let path = self.request_savepoint(dir.as_ref(), true)?;
        let result = self.wait()?;
        Ok((path, result))
    }

    fn request_savepoint(
        &self,
        dir: &std::path::Path,
        stop: bool,
    ) -> Result<std::path::PathBuf, JobError> {
        let (reply, answer) = std_mpsc::channel();
        let _ = self.canceller.events.unbounded_send(JobEvent::Savepoint {
            dir: dir.to_owned(),
            stop,
            reply,
        });
        let message = match answer.recv() {
            Ok(Ok(path)) => return Ok(path),
            Ok(Err(message)) => message,
            Err(_) => "the job ended before the savepoint completed".to_string(),
        };
        Err(JobError::Savepoint {
            job: self.name.clone(),
            dir: dir.to_owned(),
            message,
        })
    }

    /// The checkpoint statistics (`None` with checkpoints off, or before the first one).
    pub fn checkpoint_stats(&self) -> Option<CheckpointStats> {
        lock(&self.checkpoints).clone()
    }

    /// The subtask actors that run operator `uid`, in subtask order.
    fn subtasks_of(&self, uid: &str) -> Vec<ActorEntry> {
        let mut v: Vec<ActorEntry> = lock(&self.actors)
            .iter()
            .filter(|a| a.uids.iter().any(|u| u == uid))
            .cloned()
            .collect();
        v.sort_by_key(|e| e.subtask);
        v
    }

    /// Changes the `#[weir(config)]` field `key` of operator `uid` to `value` (parsed into the
    /// field's type) in every subtask, between two batches, without stopping the job. A bad
    /// key or value is refused by the first subtask, so no subtask changes.
    pub fn update_config(&self, uid: &str, key: &str, value: &str) -> Result<(), ConfigError> {
        let entries = self.subtasks_of(uid);
        if entries.is_empty() {
            return Err(ConfigError::NoSuchOperator {
                uid: uid.to_owned(),
            });
        }
        for entry in entries {
            entry.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
            let reply = futures::executor::block_on(entry.addr.send(Configure {
                uid: uid.to_owned(),
                key: key.to_owned(),
                value: value.to_owned(),
            }));
            match reply {
                Ok(r) => r?,
                Err(_) => {
                    return Err(ConfigError::NoSuchOperator {
                        uid: uid.to_owned(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Snapshots the `#[weir(state)]` fields of operator `uid` in every subtask (in subtask
    /// order), each between two of its batches. Give the result to
    /// [`DataStream::with_initial_state`](crate::DataStream::with_initial_state) to start a
    /// job from it.
    pub fn snapshot_state(&self, uid: &str) -> Result<Vec<StateSnapshot>, StateError> {
        let entries = self.subtasks_of(uid);
        if entries.is_empty() {
            return Err(StateError::NoSuchOperator {
                uid: uid.to_owned(),
            });
        }
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            entry.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
            let reply = futures::executor::block_on(entry.addr.send(SnapshotState {
                uid: uid.to_owned(),
            }));
            match reply {
                Ok(r) => out.push(r?),
                Err(_) => {
                    return Err(StateError::NoSuchOperator {
                        uid: uid.to_owned(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// The job's metrics over the last metrics interval (`None` before the first interval
    /// has passed).
    pub fn metrics(&self) -> Option<JobMetrics> {
        lock(&self.metrics).clone()
    }

    /// Changes the sources' rate control while the job runs (enable, disable, rates, gains).
    /// The new settings take effect at the next update; disabling lifts the limit at once.
    pub fn set_rate_control(&self, config: RateControlConfig) -> Result<(), RateConfigError> {
        config.validate()?;
        let _ = self
            .canceller
            .events
            .unbounded_send(JobEvent::RateControl(config));
        Ok(())
    }

    /// Metrics of every backed-up subtask (buffer queue, promotions, failover time), in
    /// operator then subtask order; empty when no operator is backed up.
    pub fn backup_metrics(&self) -> Vec<BackupMetrics> {
        lock(&self.backups).iter().map(|g| g.metrics()).collect()
    }

    /// Waits for the job to end.
    pub fn wait(mut self) -> Result<JobResult, JobError> {
        let thread = self.thread.take().expect("a handle is waited on once");
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(JobError::Runtime {
                job: self.name.clone(),
                message: "the job thread panicked".into(),
            }),
        }
    }
}

/// Plans `graph` and starts it on a job thread; returns once every subtask is deployed.
pub(crate) fn start(graph: Graph, cfg: EnvConfig, name: &str) -> Result<JobHandle, JobError> {
    let job = name.to_owned();
    let plan = plan(&graph, &cfg).map_err(|source| JobError::Plan {
        job: job.clone(),
        source,
    })?;
    let (events_tx, events_rx) = unbounded::<JobEvent>();
    let (deployed_tx, deployed_rx) = std_mpsc::channel::<()>();
    let metrics = Arc::new(Mutex::new(None));
    let metrics_for_thread = metrics.clone();
    let actors = Arc::new(Mutex::new(Vec::new()));
    let actors_for_thread = actors.clone();
    let checkpoints = Arc::new(Mutex::new(None));
    let checkpoints_for_thread = checkpoints.clone();
    let backups: SharedGroups = Arc::new(Mutex::new(Vec::new()));
    let backups_for_thread = backups.clone();
    let canceller = Canceller {
        events: events_tx.clone(),
    };
    let job_for_thread = job.clone();
    let thread = std::thread::Builder::new()
        .name(format!("weir-job-{job}"))
        .spawn(move || {
            let span = tracing::info_span!("job", name = %job_for_thread);
            let _enter = span.enter();
            let system = actix_rt::System::new();
            system.block_on(run(JobRun {
                graph,
                plan,
                cfg,
                job: job_for_thread,
                events_tx,
                events_rx,
                deployed: deployed_tx,
                metrics: metrics_for_thread,
                actors: actors_for_thread,
                checkpoints: checkpoints_for_thread,
                backups: backups_for_thread,
            }))
        })
        .map_err(|e| JobError::Runtime {
            job: job.clone(),
            message: format!("cannot spawn the job thread: {e}"),
        })?;
    // Deployment either signals or ends the thread with an error.
    let handle = JobHandle {
        name: job,
        canceller,
        actors,
        metrics,
        checkpoints,
        backups,
        thread: Some(thread),
    };
    match deployed_rx.recv() {
        Ok(()) => Ok(handle),
        Err(_) => match handle.wait() {
            Err(e) => Err(e),
            Ok(_) => unreachable!("a job that did not deploy cannot succeed"),
        },
    }
}

/// Everything the job thread owns.
struct JobRun {
    graph: Graph,
    plan: Plan,
    cfg: EnvConfig,
    job: String,
    events_tx: UnboundedSender<JobEvent>,
    events_rx: futures::channel::mpsc::UnboundedReceiver<JobEvent>,
    deployed: std_mpsc::Sender<()>,
    metrics: Arc<Mutex<Option<JobMetrics>>>,
    actors: Arc<Mutex<Vec<ActorEntry>>>,
    checkpoints: Arc<Mutex<Option<CheckpointStats>>>,
    backups: SharedGroups,
}

async fn run(run: JobRun) -> Result<JobResult, JobError> {
    let JobRun {
        graph,
        plan,
        cfg,
        job,
        events_tx,
        mut events_rx,
        deployed,
        metrics,
        actors: shared_actors,
        checkpoints: shared_stats,
        backups: shared_groups,
    } = run;
    let started = Instant::now();
    let registry = OperatorRegistry::new(&plan);
    // A directory per run: a new run never restores another run's checkpoints.
    let checkpoint_root = Some(cfg.checkpoint.directory.join(&job).join(run_id()));
    let mut coordinator = Some(Coordinator::new(&cfg.checkpoint, 0, 1));
    let mut restarts = RestartTracker::new(cfg.restart.clone().unwrap_or_else(|| {
        if cfg.checkpoint.interval.is_some() {
            RestartStrategy::default_with_checkpoints()
        } else {
            RestartStrategy::None
        }
    }));
    let mut controller = RateController::new(cfg.rate_control.clone());
    let mut deployed = Some(deployed);
    let mut restore: Option<Restore> = match &cfg.checkpoint.restore_from {
        None => None,
        Some(dir) => match store::load_dir(
            dir,
            &plan.uids,
            &plan.parallelism,
            cfg.checkpoint.allow_non_restored_state,
        ) {
            Ok((checkpoint, states)) => {
                tracing::info!(savepoint = %dir.display(), checkpoint, "starting from a savepoint");
                Some(Restore { checkpoint, states })
            }
            Err(e) => {
                drop(deployed);
                return Err(JobError::Runtime {
                    job,
                    message: format!("cannot start from savepoint {}: {e}", dir.display()),
                });
            }
        },
    };
    let mut attempt: u64 = 0;
    let mut num_restarts: u64 = 0;
    let mut degraded_before = false;
    loop {
        cfg.faults.rearm();
        let specs = match instantiate(&graph, &plan, &cfg, &registry, restore.as_ref(), attempt) {
            Ok(specs) => specs,
            Err(e) => {
                let e = e.into_job_error(&job);
                if let Some(d) = deployed.take() {
                    drop(d);
                }
                return Err(e);
            }
        };
        let mut dep = deploy(
            &graph,
            &plan,
            &cfg,
            specs,
            &events_tx,
            &registry,
            checkpoint_root.clone(),
        );
        *lock(&shared_actors) = dep.actors.clone();
        *lock(&shared_groups) = dep.backups.iter().map(|b| b.group.clone()).collect();
        if let Some(d) = deployed.take() {
            let _ = d.send(());
        }
        if let Some(c) = coordinator.as_mut() {
            c.reset(
                dep.actors.len(),
                restore.as_ref().map_or(1, |r| r.checkpoint + 1),
                Instant::now(),
            );
            if let Some(r) = &restore {
                c.stats.last_restored_checkpoint_id = Some(r.checkpoint);
            }
            c.stats.num_restarts = num_restarts;
        }
        tracing::info!(attempt, subtasks = dep.actors.len(), arbiters = dep.arbiters.len(), restored = ?restore.as_ref().map(|r| r.checkpoint), "job deployed");
        let verdict = supervise(
            &mut dep,
            &mut events_rx,
            &cfg,
            &job,
            attempt,
            &Failover {
                graph: &graph,
                plan: &plan,
                registry: &registry,
                events: &events_tx,
                actors: &shared_actors,
            },
            &metrics,
            &mut controller,
            coordinator.as_mut(),
            checkpoint_root.as_deref(),
            &shared_stats,
        )
        .await;
        let failure = match verdict {
            Ok(Outcome::Stopped) => {
                // Stopped with a savepoint: what came after it is not committed (a job
                // started from the savepoint produces it again).
                dep.stop(&job, &cfg);
                tracing::info!(elapsed = ?started.elapsed(), "job stopped with a savepoint");
                // The run is over: its checkpoints are of no further use (savepoints are
                // elsewhere). A failed run keeps them.
                if let Some(root) = &checkpoint_root {
                    let _ = std::fs::remove_dir_all(root);
                }
                let mut r = result(&graph, &plan, &registry, job, started.elapsed());
                r.checkpoints = lock(&shared_stats).clone();
                return Ok(r);
            }
            Ok(Outcome::Finished) => {
                if let Err(e) = dep.commit_final(&job).await {
                    dep.stop(&job, &cfg);
                    tracing::warn!(error = %e, "final commit failed");
                    return Err(e);
                }
                let backups = backup_report(&dep, degraded_before);
                dep.stop(&job, &cfg);
                tracing::info!(elapsed = ?started.elapsed(), "job finished");
                // The run is over: its checkpoints are of no further use (savepoints are
                // elsewhere). A failed run keeps them.
                if let Some(root) = &checkpoint_root {
                    let _ = std::fs::remove_dir_all(root);
                }
                let mut r = result(&graph, &plan, &registry, job, started.elapsed());
                r.backups = backups;
                r.checkpoints = lock(&shared_stats).clone().map(|mut s| {
                    s.num_restarts = num_restarts;
                    s
                });
                return Ok(r);
            }
            Err(e) => e,
        };
        degraded_before |= dep.backups.iter().any(|b| b.group.metrics().degraded);
        dep.stop(&job, &cfg);
        // Like Flink, too many failed checkpoints is a failure the restart strategy handles.
        let restartable = !matches!(failure, JobError::Cancelled { .. });
        let delay = if restartable {
            restarts.on_failure(Instant::now())
        } else {
            None
        };
        let Some(delay) = delay else {
            tracing::warn!(error = %failure, "job failed");
            if num_restarts > 0 && restartable {
                return Err(JobError::RestartsExhausted {
                    job,
                    restarts: num_restarts,
                    last: Box::new(failure),
                });
            }
            return Err(failure);
        };
        num_restarts += 1;
        attempt += 1;
        tracing::warn!(error = %failure, restart = num_restarts, ?delay, "job failed; restarting from the last complete checkpoint");
        actix_rt::time::sleep(delay).await;
        restore = match &checkpoint_root {
            Some(root) => store::load_latest(root, &plan.uids)
                .map(|(checkpoint, states)| Restore { checkpoint, states }),
            None => None,
        };
        if let Some(s) = lock(&shared_stats).as_mut() {
            s.num_restarts = num_restarts;
        }
    }
}

/// One deployment of the job: its arbiters and actors.
struct Deployment {
    arbiters: Vec<Arbiter>,
    actors: Vec<ActorEntry>,
    sampler: Sampler,
    sources: Vec<bool>,
    finished: Vec<bool>,
    last_seen: Vec<Instant>,
    /// Per subtask: its id (the current primary's epoch, for a backed-up one).
    ids: Vec<crate::task::SubtaskId>,
    /// The backed-up subtasks.
    backups: Vec<BackupSlot>,
}

/// A backed-up subtask: its group, and the heartbeats of its primary and backup.
struct BackupSlot {
    actor: usize,
    group: std::sync::Arc<dyn BackupGroup>,
    primary_arbiter: usize,
    backup_arbiter: usize,
    backup: Recipient<BackupPing>,
    primary_seen: Arc<Mutex<Instant>>,
    backup_seen: Arc<Mutex<Instant>>,
    /// When the last heartbeat pings went out.
    pinged: Instant,
}

/// What a failover needs besides the deployment.
struct Failover<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    registry: &'a OperatorRegistry,
    events: &'a UnboundedSender<JobEvent>,
    actors: &'a Arc<Mutex<Vec<ActorEntry>>>,
}

impl Deployment {
    /// Every subtask finished: sinks commit what they staged last (end of input). The first
    /// failure is the job's.
    async fn commit_final(&self, job: &str) -> Result<(), JobError> {
        for a in &self.actors {
            match a.addr.send(NotifyComplete(FINAL_COMMIT)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.into_job_error(job)),
                Err(_) => {
                    return Err(JobError::Runtime {
                        job: job.to_owned(),
                        message: "a subtask went away before the final commit".into(),
                    })
                }
            }
        }
        Ok(())
    }

    fn stop(self, job: &str, cfg: &EnvConfig) {
        for a in &self.actors {
            a.mail(Stop);
        }
        cfg.faults.release();
        stop_arbiters(self.arbiters, job);
    }
}

/// A name unique to this run of a job (time, process, sequence).
fn run_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("run-{millis}-{}-{seq}", std::process::id())
}

/// The id of the commit made when a job's input has ended.
pub(crate) const FINAL_COMMIT: u64 = u64::MAX;

#[allow(clippy::too_many_arguments)]
fn deploy(
    graph: &Graph,
    plan: &Plan,
    cfg: &EnvConfig,
    specs: Vec<crate::plan::SubtaskSpec>,
    events_tx: &UnboundedSender<JobEvent>,
    registry: &OperatorRegistry,
    checkpoint_root: Option<std::path::PathBuf>,
) -> Deployment {
    let plain = specs.iter().filter(|s| s.backup.is_none()).count();
    let mut arbiters: Vec<Arbiter> = (0..cfg.arbiters.min(plain.max(1)))
        .map(|_| Arbiter::new())
        .collect();
    let pool = arbiters.len();
    let mut next_plain = 0;
    let mut ids = Vec::with_capacity(specs.len());
    let mut backups = Vec::new();
    let mut actors = Vec::with_capacity(specs.len());
    let mut probes = Vec::with_capacity(specs.len());
    let mut sources = Vec::with_capacity(specs.len());
    for (k, spec) in specs.into_iter().enumerate() {
        let slot = Arc::new(Mutex::new(SubtaskSample::default()));
        let is_source = graph.nodes[spec.id.head].is_source;
        sources.push(is_source);
        probes.push(SubtaskProbe {
            head: spec.id.head,
            head_uid: spec.id.head_uid.clone(),
            subtask: spec.id.subtask,
            is_source,
            slot: slot.clone(),
            counters: spec.counters.clone(),
        });
        let counters = spec.counters.clone();
        let uids = plan
            .head_of
            .iter()
            .enumerate()
            .filter(|&(_, &h)| h == spec.id.head)
            .map(|(n, _)| plan.uids[n].clone())
            .collect();
        let subtask = spec.id.subtask;
        let events = events_tx.clone();
        let linger = cfg.linger;
        let root = checkpoint_root.clone();
        ids.push(spec.id.clone());
        // A backed-up primary and its backup get arbiters of their own: a hung primary
        // blocks nothing else, and the backup never shares its primary's thread.
        let arbiter = match &spec.backup {
            None => {
                next_plain += 1;
                (next_plain - 1) % pool
            }
            Some(group) => {
                arbiters.push(Arbiter::new());
                arbiters.push(Arbiter::new());
                let (p, b) = (arbiters.len() - 2, arbiters.len() - 1);
                let backup = group.clone().start_backup(
                    &arbiters[b].handle(),
                    events_tx.clone(),
                    spec.id.attempt,
                    k,
                );
                let now = Instant::now();
                backups.push(BackupSlot {
                    actor: k,
                    group: group.clone(),
                    primary_arbiter: p,
                    backup_arbiter: b,
                    backup,
                    primary_seen: Arc::new(Mutex::new(now)),
                    backup_seen: Arc::new(Mutex::new(now)),
                    pinged: now,
                });
                p
            }
        };
        let addr = SubtaskActor::start_in_arbiter(&arbiters[arbiter].handle(), move |_| {
            SubtaskActor::new(
                spec.id,
                spec.driver,
                events,
                spec.counters,
                spec.rx_waker,
                linger,
                slot,
                root,
            )
        });
        actors.push(ActorEntry {
            uids,
            subtask,
            addr,
            counters,
        });
    }
    let operators = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(id, node)| OperatorProbe {
            uid: plan.uids[id].clone(),
            name: node.name.clone(),
            head: plan.head_of[id],
            is_source: node.is_source,
            counters: registry.counters[id].clone(),
        })
        .collect();
    let n = actors.len();
    Deployment {
        arbiters,
        actors,
        sampler: Sampler::new(probes, operators),
        sources,
        finished: vec![false; n],
        last_seen: vec![Instant::now(); n],
        ids,
        backups,
    }
}

/// The backup metrics of a deployment at its end.
fn backup_report(dep: &Deployment, degraded_before: bool) -> Vec<BackupMetrics> {
    dep.backups
        .iter()
        .map(|b| {
            let mut m = b.group.metrics();
            m.degraded |= degraded_before;
            m
        })
        .collect()
}

/// Replaces a failed backup (of `generation`, or the current one) by a fresh one on a new
/// arbiter; the primary is not disturbed.
fn replace_backup(
    dep: &mut Deployment,
    i: usize,
    generation: Option<u64>,
    fo: &Failover<'_>,
    attempt: u64,
) {
    let slot = &mut dep.backups[i];
    if !slot.group.drop_backup(generation) {
        return; // an older backup's report
    }
    tracing::warn!(uid = %slot.group.uid(), subtask = slot.group.subtask(), "backup failed: starting a new one");
    dep.arbiters[slot.backup_arbiter].stop();
    dep.arbiters.push(Arbiter::new());
    slot.backup_arbiter = dep.arbiters.len() - 1;
    slot.backup = slot.group.clone().start_backup(
        &dep.arbiters[slot.backup_arbiter].handle(),
        fo.events.clone(),
        attempt,
        slot.actor,
    );
    *lock(&slot.backup_seen) = Instant::now();
}

/// Promotes the backup of `dep.backups[i]` (the paper's Algorithm 2, with fencing): the old
/// primary is fenced, the downstream channels say how far they got, the backup becomes the
/// primary on its arbiter and replays, a fresh backup starts on a new arbiter, and checkpoints
/// in flight are aborted (the new primary never saw their barriers). `Err` when no promotion
/// is possible (the caller restarts the job).
#[allow(clippy::too_many_arguments)]
fn failover(
    dep: &mut Deployment,
    i: usize,
    reason: &str,
    fo: &Failover<'_>,
    cfg: &EnvConfig,
    attempt: u64,
    coordinator: Option<&mut Coordinator>,
    checkpoint_root: Option<&std::path::Path>,
    savepoints: &mut std::collections::HashMap<u64, SavepointRequest>,
) -> Result<(), String> {
    let started = Instant::now();
    let k = dep.backups[i].actor;
    let group = dep.backups[i].group.clone();
    let old = dep.ids[k].clone();
    tracing::warn!(uid = %old.head_uid, subtask = old.subtask, reason, "primary failed: promoting its backup");
    let promotion = group.begin_promotion()?;
    let head = crate::plan::build_promoted(
        fo.graph,
        fo.plan,
        cfg,
        fo.registry,
        old.head,
        old.subtask,
        promotion.senders,
        promotion.routed_before,
        promotion.restore,
        promotion.records_before,
    )
    .map_err(|e| format!("cannot build the promoted operator: {e:?}"))?;
    let stale = match coordinator {
        Some(c) => {
            let (aborted, newest) = c.abort_for_failover();
            for id in &aborted {
                if let Some(sp) = savepoints.remove(id) {
                    let _ = sp.reply.send(Err(format!(
                        "savepoint {id} aborted: `{}` failed over",
                        old.head_uid
                    )));
                }
                for (a, entry) in dep.actors.iter().enumerate() {
                    if a != k && !dep.finished[a] {
                        entry.mail(AbortCheckpoint(*id));
                    }
                }
            }
            newest
        }
        None => 0,
    };
    let gate = group.clone().finish_promotion(head, stale);
    let mode = match cfg.checkpoint.mode {
        crate::checkpoint::CheckpointMode::ExactlyOnce => AlignMode::ExactlyOnce,
        crate::checkpoint::CheckpointMode::AtLeastOnce => AlignMode::AtLeastOnce,
    };
    let driver = Driver::inputs(
        vec![gate],
        None,
        mode,
        cfg.checkpoint.unaligned,
        cfg.checkpoint.aligned_checkpoint_timeout,
        old.head_uid.clone(),
    );
    let id = SubtaskId {
        epoch: promotion.epoch,
        ..old.clone()
    };
    dep.ids[k] = id.clone();
    let slot = dep.sampler.probes()[k].slot.clone();
    let counters = dep.actors[k].counters.clone();
    let (events, linger, root) = (
        fo.events.clone(),
        cfg.linger,
        checkpoint_root.map(|r| r.to_path_buf()),
    );
    let waker = promotion.waker;
    let b = &mut dep.backups[i];
    let arbiter = b.backup_arbiter;
    let addr = SubtaskActor::start_in_arbiter(&dep.arbiters[arbiter].handle(), move |_| {
        SubtaskActor::new(id, driver, events, counters, waker, linger, slot, root)
    });
    dep.actors[k].addr = addr;
    *lock(fo.actors) = dep.actors.clone();
    // The old primary's arbiter: stopped (a hung thread ends when its function returns).
    dep.arbiters[b.primary_arbiter].stop();
    b.primary_arbiter = arbiter;
    *lock(&b.primary_seen) = Instant::now();
    dep.last_seen[k] = Instant::now();
    // A fresh backup, so the next failure is as fast as this one.
    dep.arbiters.push(Arbiter::new());
    b.backup_arbiter = dep.arbiters.len() - 1;
    b.backup = group.clone().start_backup(
        &dep.arbiters[b.backup_arbiter].handle(),
        fo.events.clone(),
        attempt,
        k,
    );
    *lock(&b.backup_seen) = Instant::now();
    let took = started.elapsed();
    group.promoted(took);
    tracing::warn!(uid = %old.head_uid, subtask = old.subtask, epoch = promotion.epoch, reprocessed = promotion.reprocessed, replayed = promotion.replayed, ?took, "backup promoted");
    Ok(())
}

/// How a deployment ended without failing.
enum Outcome {
    /// Every subtask finished.
    Finished,
    /// Stopped after a savepoint.
    Stopped,
}

struct SavepointRequest {
    dir: std::path::PathBuf,
    stop: bool,
    reply: std_mpsc::Sender<Result<std::path::PathBuf, String>>,
}

/// Runs one deployment until every subtask finished (`Ok`) or the first failure.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    dep: &mut Deployment,
    events_rx: &mut futures::channel::mpsc::UnboundedReceiver<JobEvent>,
    cfg: &EnvConfig,
    job: &str,
    attempt: u64,
    fo: &Failover<'_>,
    metrics: &Arc<Mutex<Option<JobMetrics>>>,
    controller: &mut Option<RateController>,
    mut coordinator: Option<&mut Coordinator>,
    checkpoint_root: Option<&std::path::Path>,
    shared_stats: &Arc<Mutex<Option<CheckpointStats>>>,
) -> Result<Outcome, JobError> {
    let mut savepoints: std::collections::HashMap<u64, SavepointRequest> = Default::default();
    let fail_savepoint = |sp: SavepointRequest, why: String| {
        let _ = sp.reply.send(Err(why));
    };
    let set_rate = |dep: &Deployment, rate: Option<f64>| {
        let n = dep.sampler.source_subtasks().max(1) as f64;
        for i in dep.sampler.source_actors() {
            dep.actors[i].mail(SetRate(rate.map(|r| r / n)));
        }
    };
    if let Some(c) = controller.as_ref() {
        if c.current.is_some() {
            set_rate(dep, c.current);
        }
    }
    let mut tick_every = match controller.as_ref() {
        Some(c) => cfg.metrics_interval.min(c.config.update_interval),
        None => cfg.metrics_interval,
    };
    if let Some(i) = cfg.checkpoint.interval {
        tick_every = tick_every.min(i);
    }
    let mut ticks = actix_rt::time::interval(tick_every);
    // Heartbeats of backed-up primaries and their backups.
    // Pings go out every heartbeat interval; silence is checked more often, so a hang is
    // caught within 10 ms of its timeout.
    let hb_every = dep
        .backups
        .iter()
        .map(|b| {
            b.group
                .policy()
                .heartbeat_interval
                .min(Duration::from_millis(10))
        })
        .min()
        .unwrap_or(Duration::from_secs(3600));
    let mut heartbeats = actix_rt::time::interval(hb_every);
    let total = dep.actors.len();
    let mut remaining = total;
    // Promotes the backup of `dep.backups[$i]` (see `failover`).
    macro_rules! promote {
        ($i:expr, $why:expr) => {
            failover(
                dep,
                $i,
                $why,
                fo,
                cfg,
                attempt,
                coordinator.as_deref_mut(),
                checkpoint_root,
                &mut savepoints,
            )
        };
    }
    let lost = |uid: String, subtask: usize, reason: String| JobError::SubtaskLost {
        job: job.to_owned(),
        uid,
        subtask,
        reason,
    };
    loop {
        if remaining == 0 {
            for (_, sp) in savepoints.drain() {
                fail_savepoint(sp, "the job finished before the savepoint completed".into());
            }
            return Ok(Outcome::Finished);
        }
        let event = futures::select_biased! {
            e = events_rx.next() => e,
            _ = futures::FutureExt::fuse(heartbeats.tick()) => {
                let now = Instant::now();
                for i in 0..dep.backups.len() {
                    let b = &dep.backups[i];
                    let (k, timeout) = (b.actor, b.group.policy().heartbeat_timeout);
                    let ping = now.saturating_duration_since(b.pinged) >= b.group.policy().heartbeat_interval;
                    if ping {
                        dep.backups[i].pinged = now;
                    }
                    let b = &dep.backups[i];
                    if !dep.finished[k] {
                        let seen = *lock(&b.primary_seen);
                        if now.saturating_duration_since(seen) > timeout {
                            let why = format!("no heartbeat answer for {timeout:?} (hung)");
                            promote!(i, &why)
                                .map_err(|m| lost(dep.ids[k].head_uid.clone(), dep.ids[k].subtask, m))?;
                            continue;
                        }
                        if ping {
                            let (addr, seen) = (dep.actors[k].addr.clone(), b.primary_seen.clone());
                            actix_rt::spawn(async move {
                                if addr.send(Ping).await.is_ok() {
                                    *lock(&seen) = Instant::now();
                                }
                            });
                        }
                    }
                    let seen = *lock(&b.backup_seen);
                    if now.saturating_duration_since(seen) > timeout {
                        replace_backup(dep, i, None, fo, attempt);
                        continue;
                    }
                    if !ping {
                        continue;
                    }
                    let (addr, seen) = (b.backup.clone(), b.backup_seen.clone());
                    actix_rt::spawn(async move {
                        if addr.send(BackupPing).await.is_ok() {
                            *lock(&seen) = Instant::now();
                        }
                    });
                }
                continue;
            }
            at = futures::FutureExt::fuse(ticks.tick()) => {
                let at = at.into_std();
                let now = Instant::now();
                if let Some(m) = dep.sampler.compute(controller.as_ref().and_then(|c| c.current)) {
                    if let Some(c) = controller.as_mut() {
                        if c.due(at) {
                            if let Some(rate) = c.update(&m, &dep.sampler, at) {
                                set_rate(dep, Some(rate));
                            }
                        }
                    }
                    *lock(metrics) = Some(m);
                }
                // Heartbeats: a subtask that answered no sampling mail for too long is hung.
                for (i, probe) in dep.sampler.probes().iter().enumerate() {
                    if let Some(t) = lock(&probe.slot).at {
                        dep.last_seen[i] = dep.last_seen[i].max(t);
                    }
                    if !dep.finished[i]
                        && now.saturating_duration_since(dep.last_seen[i]) > cfg.heartbeat_timeout
                    {
                        return Err(lost(
                            probe.head_uid.clone(),
                            probe.subtask,
                            format!("no answer to the system lane for {:?} (hung)", cfg.heartbeat_timeout),
                        ));
                    }
                }
                dep.sampler.mark();
                for (i, a) in dep.actors.iter().enumerate() {
                    if !dep.finished[i] {
                        a.mail(Sample { sent_at: Instant::now() });
                    }
                }
                if let Some(c) = coordinator.as_deref_mut() {
                    let expired = match c.expire(now) {
                        Ok(expired) => expired,
                        Err(failures) => {
                            return Err(JobError::CheckpointsFailing {
                                job: job.to_owned(),
                                failures,
                                tolerated: cfg.checkpoint.tolerable_failed_checkpoints,
                            })
                        }
                    };
                    for id in expired {
                        if let Some(sp) = savepoints.remove(&id) {
                            fail_savepoint(sp, format!("savepoint {id} timed out"));
                        }
                    }
                    if let Some(id) = c.maybe_trigger(now) {
                        tracing::debug!(checkpoint = id, "triggering checkpoint");
                        for (i, a) in dep.actors.iter().enumerate() {
                            if dep.sources[i] {
                                a.mail(TriggerCheckpoint { id, sent_at: now });
                            }
                        }
                    }
                    *lock(shared_stats) = Some(c.stats.clone());
                }
                continue;
            }
        };
        let Some(event) = event else {
            return Err(JobError::Runtime {
                job: job.to_owned(),
                message: "the job's event channel closed".into(),
            });
        };
        match event {
            JobEvent::RateControl(config) => {
                let previous = controller.as_ref().and_then(|c| c.current);
                *controller = RateController::new(config);
                if let Some(c) = controller.as_mut() {
                    c.inherit(previous);
                }
                set_rate(dep, controller.as_ref().and_then(|c| c.current));
            }
            JobEvent::Cancel => {
                return Err(JobError::Cancelled {
                    job: job.to_owned(),
                })
            }
            JobEvent::Savepoint { dir, stop, reply } => {
                let Some(c) = coordinator.as_deref_mut() else {
                    let _ = reply.send(Err("checkpoints are not available".into()));
                    continue;
                };
                let now = Instant::now();
                let id = c.force(now);
                tracing::info!(checkpoint = id, dir = %dir.display(), stop, "triggering a savepoint");
                for (i, a) in dep.actors.iter().enumerate() {
                    if dep.sources[i] {
                        a.mail(TriggerCheckpoint { id, sent_at: now });
                    }
                }
                savepoints.insert(id, SavepointRequest { dir, stop, reply });
            }
            JobEvent::Finished {
                attempt: a,
                actor,
                epoch,
            } if a == attempt && epoch == dep.ids[actor].epoch && !dep.finished[actor] => {
                dep.finished[actor] = true;
                remaining -= 1;
                if !dep.sources[actor] {
                    // A finished operator could not be restored consistently.
                    if let Some(c) = coordinator.as_deref_mut() {
                        c.stop_triggering();
                    }
                }
            }
            JobEvent::Failed {
                attempt: a,
                actor,
                epoch,
                error,
            } if a == attempt => {
                if epoch != dep.ids[actor].epoch {
                    continue; // a fenced primary
                }
                match dep.backups.iter().position(|b| b.actor == actor) {
                    Some(i) => {
                        let why = format!("{:?}", error);
                        if let Err(m) = promote!(i, &why) {
                            tracing::warn!(reason = %m, "promotion impossible: restarting the job");
                            return Err(error.into_job_error(job));
                        }
                    }
                    None => return Err(error.into_job_error(job)),
                }
            }
            JobEvent::Lost {
                attempt: a,
                actor,
                epoch,
                uid,
                subtask,
                reason,
            } if a == attempt => {
                if epoch != dep.ids[actor].epoch {
                    continue;
                }
                match dep.backups.iter().position(|b| b.actor == actor) {
                    Some(i) => {
                        promote!(i, &reason).map_err(|m| {
                            lost(uid, subtask, format!("{reason}; promotion impossible: {m}"))
                        })?;
                    }
                    None => return Err(lost(uid, subtask, reason)),
                }
            }
            JobEvent::BackupLost {
                attempt: a,
                actor,
                generation,
            } if a == attempt => {
                if let Some(i) = dep.backups.iter().position(|b| b.actor == actor) {
                    replace_backup(dep, i, Some(generation), fo, attempt);
                }
            }
            JobEvent::Ack {
                attempt: a,
                id,
                actor,
                files,
                alignment,
                start_delay,
            } if a == attempt => {
                let (Some(c), Some(root)) = (coordinator.as_deref_mut(), checkpoint_root) else {
                    continue;
                };
                if let Some(done) = c.ack(id, actor, files, alignment, start_delay, Instant::now())
                {
                    let meta = metadata(job, dep, &done);
                    match store::write_metadata(root, &meta) {
                        Ok(()) => {
                            tracing::info!(checkpoint = done.id, duration = ?done.duration, size = done.size, "checkpoint complete");
                            store::retain(root, cfg.checkpoint.retained);
                            for a in &dep.actors {
                                a.mail(NotifyComplete(done.id));
                            }
                            if let Some(sp) = savepoints.remove(&done.id) {
                                match store::copy_to(root, done.id, &sp.dir) {
                                    Ok(()) => {
                                        tracing::info!(savepoint = %sp.dir.display(), "savepoint complete");
                                        let _ = sp.reply.send(Ok(sp.dir.clone()));
                                        if sp.stop {
                                            return Ok(Outcome::Stopped);
                                        }
                                    }
                                    Err(e) => fail_savepoint(sp, e.to_string()),
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(checkpoint = done.id, error = %e, "cannot write checkpoint metadata");
                            if let Err(failures) = c.fail_one(done.id) {
                                return Err(JobError::CheckpointsFailing {
                                    job: job.to_owned(),
                                    failures,
                                    tolerated: cfg.checkpoint.tolerable_failed_checkpoints,
                                });
                            }
                        }
                    }
                    *lock(shared_stats) = Some(c.stats.clone());
                }
            }
            JobEvent::Declined {
                attempt: a,
                id,
                reason,
            } if a == attempt => {
                tracing::warn!(checkpoint = id, reason, "checkpoint declined");
                if let Some(sp) = savepoints.remove(&id) {
                    fail_savepoint(sp, format!("savepoint declined: {reason}"));
                }
                if let Some(c) = coordinator.as_deref_mut() {
                    if let Err(failures) = c.fail_one(id) {
                        return Err(JobError::CheckpointsFailing {
                            job: job.to_owned(),
                            failures,
                            tolerated: cfg.checkpoint.tolerable_failed_checkpoints,
                        });
                    }
                }
            }
            // Events of an earlier run of the job.
            _ => {}
        }
    }
}

fn metadata(job: &str, dep: &Deployment, done: &Completed) -> store::CheckpointMetadata {
    let mut states: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for f in &done.files {
        states
            .entry(f.uid.clone())
            .or_default()
            .insert(f.subtask, f.file.clone());
    }
    let mut parallelism = BTreeMap::new();
    for p in dep.sampler.probes() {
        let e = parallelism.entry(p.head_uid.clone()).or_insert(0);
        *e = (*e).max(p.subtask + 1);
    }
    store::CheckpointMetadata {
        format_version: store::FORMAT_VERSION,
        checkpoint_id: done.id,
        job: job.to_owned(),
        states,
        parallelism,
        size: done.size,
    }
}

/// Stops every arbiter and waits a bounded time for their threads.
fn stop_arbiters(arbiters: Vec<Arbiter>, job: &str) {
    for a in &arbiters {
        a.stop();
    }
    let (tx, rx) = std_mpsc::channel();
    let joiner = std::thread::spawn(move || {
        for a in arbiters {
            let _ = a.join();
        }
        let _ = tx.send(());
    });
    if rx.recv_timeout(Duration::from_secs(5)).is_ok() {
        let _ = joiner.join();
    } else {
        tracing::warn!(
            job,
            "an arbiter thread did not stop within 5 s (user code hung); leaving it"
        );
    }
}

fn result(
    graph: &Graph,
    plan: &Plan,
    registry: &OperatorRegistry,
    name: String,
    duration: Duration,
) -> JobResult {
    let operators = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(id, node)| {
            let (mut i, mut o, mut r) = (0, 0, 0);
            for c in &registry.counters[id] {
                let (a, b, c) = c.snapshot();
                i += a;
                o += b;
                r += c;
            }
            OperatorResult {
                uid: plan.uids[id].clone(),
                name: node.name.clone(),
                parallelism: plan.parallelism[id],
                records_in: i,
                records_out: o,
                records_rejected: r,
            }
        })
        .collect::<Vec<OperatorResult>>();
    // A part (a source's malformed-line split) reports its rejections on its owner.
    let mut operators = operators;
    for (id, node) in graph.nodes.iter().enumerate() {
        if let Some(owner) = node.part_of {
            operators[owner].records_rejected += operators[id].records_rejected;
        }
    }
    JobResult {
        name,
        duration,
        operators,
        checkpoints: None,
        backups: Vec::new(),
    }
}
