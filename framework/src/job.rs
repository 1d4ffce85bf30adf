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

use crate::config::EnvConfig;
use crate::error::JobError;
use crate::graph::Graph;
use crate::hooks::{ConfigError, StateError, StateSnapshot};
use crate::metrics::{JobMetrics, SubtaskCounters, SubtaskSample};
use crate::plan::{instantiate, plan, OperatorRegistry, Plan};
use crate::rate::{RateConfigError, RateControlConfig};
use crate::sampler::{OperatorProbe, RateController, Sampler, SubtaskProbe};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc, Mutex};
use crate::task::{
    Configure, JobEvent, Ping, Sample, SetRate, SnapshotState, Stop, SubtaskActor, SubtaskStatus,
};

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
    actors: Vec<ActorEntry>,
    metrics: Arc<Mutex<Option<JobMetrics>>>,
    thread: Option<JoinHandle<Result<JobResult, JobError>>>,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("name", &self.name)
            .field("subtasks", &self.actors.len())
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

    /// The subtask actors that run operator `uid`, in subtask order.
    fn subtasks_of(&self, uid: &str) -> Vec<&ActorEntry> {
        let mut v: Vec<&ActorEntry> = self
            .actors
            .iter()
            .filter(|a| a.uids.iter().any(|u| u == uid))
            .collect();
        v.sort_by_key(|e| e.subtask);
        v
    }

    /// Changes the `#[weir(config)]` field `key` of operator `uid` to `value` (parsed into the
    /// field's type) in every subtask, between two batches, without stopping the job. A bad
    /// key or value is refused by the first subtask, so no subtask changes.
    pub fn update_config(&self, uid: &str, key: &str, value: &str) -> Result<(), ConfigError> {
        let entries: Vec<&ActorEntry> = self
            .actors
            .iter()
            .filter(|a| a.uids.iter().any(|u| u == uid))
            .collect();
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
        let mut entries: Vec<&ActorEntry> = self
            .actors
            .iter()
            .filter(|a| a.uids.iter().any(|u| u == uid))
            .collect();
        if entries.is_empty() {
            return Err(StateError::NoSuchOperator {
                uid: uid.to_owned(),
            });
        }
        entries.sort_by_key(|e| e.subtask);
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
    let (deployed_tx, deployed_rx) = std_mpsc::channel::<Vec<ActorEntry>>();
    let metrics = Arc::new(Mutex::new(None));
    let metrics_for_thread = metrics.clone();
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
            }))
        })
        .map_err(|e| JobError::Runtime {
            job: job.clone(),
            message: format!("cannot spawn the job thread: {e}"),
        })?;
    // Deployment either sends the actors or ends the thread with an error.
    let actors = match deployed_rx.recv() {
        Ok(actors) => actors,
        Err(_) => {
            let handle = JobHandle {
                name: job,
                canceller,
                actors: Vec::new(),
                metrics,
                thread: Some(thread),
            };
            return match handle.wait() {
                Err(e) => Err(e),
                Ok(_) => unreachable!("a job that did not deploy cannot succeed"),
            };
        }
    };
    Ok(JobHandle {
        name: job,
        canceller,
        actors,
        metrics,
        thread: Some(thread),
    })
}

/// Everything the job thread owns.
struct JobRun {
    graph: Graph,
    plan: Plan,
    cfg: EnvConfig,
    job: String,
    events_tx: UnboundedSender<JobEvent>,
    events_rx: futures::channel::mpsc::UnboundedReceiver<JobEvent>,
    deployed: std_mpsc::Sender<Vec<ActorEntry>>,
    metrics: Arc<Mutex<Option<JobMetrics>>>,
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
    } = run;
    let started = Instant::now();
    let (specs, registry) = instantiate(&graph, &plan, &cfg).map_err(|e| e.into_job_error(&job))?;
    let arbiters: Vec<Arbiter> = (0..cfg.arbiters.min(specs.len().max(1)))
        .map(|_| Arbiter::new())
        .collect();
    let mut actors = Vec::with_capacity(specs.len());
    let mut probes = Vec::with_capacity(specs.len());
    for (k, spec) in specs.into_iter().enumerate() {
        let slot = Arc::new(Mutex::new(SubtaskSample::default()));
        probes.push(SubtaskProbe {
            head: spec.id.head,
            head_uid: spec.id.head_uid.clone(),
            subtask: spec.id.subtask,
            is_source: graph.nodes[spec.id.head].is_source,
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
        let addr =
            SubtaskActor::start_in_arbiter(&arbiters[k % arbiters.len()].handle(), move |_| {
                SubtaskActor::new(
                    spec.id,
                    spec.driver,
                    events,
                    spec.counters,
                    spec.rx_waker,
                    linger,
                    slot,
                )
            });
        actors.push(ActorEntry {
            uids,
            subtask,
            addr,
            counters,
        });
    }
    let mailers: Vec<ActorEntry> = actors
        .iter()
        .map(|a| ActorEntry {
            uids: Vec::new(),
            subtask: a.subtask,
            addr: a.addr.clone(),
            counters: a.counters.clone(),
        })
        .collect();
    drop(events_tx);
    let total = actors.len();
    let _ = deployed.send(actors);
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
    let mut sampler = Sampler::new(probes, operators);
    let mut controller = RateController::new(cfg.rate_control.clone());
    let set_rate = |sampler: &Sampler, rate: Option<f64>| {
        let n = sampler.source_subtasks().max(1) as f64;
        for i in sampler.source_actors() {
            mailers[i].mail(SetRate(rate.map(|r| r / n)));
        }
    };
    if let Some(c) = &controller {
        if c.current.is_some() {
            set_rate(&sampler, c.current);
        }
    }
    let tick_every = match &controller {
        Some(c) => cfg.metrics_interval.min(c.config.update_interval),
        None => cfg.metrics_interval,
    };
    let mut ticks = actix_rt::time::interval(tick_every);
    tracing::info!(subtasks = total, arbiters = arbiters.len(), "job deployed");

    let mut finished = vec![false; total];
    let mut remaining = total;
    let verdict = loop {
        if remaining == 0 {
            break Ok(());
        }
        let event = futures::select_biased! {
            e = events_rx.next() => e,
            at = futures::FutureExt::fuse(ticks.tick()) => {
                let at = at.into_std();
                if let Some(m) = sampler.compute(controller.as_ref().and_then(|c| c.current)) {
                    if let Some(c) = controller.as_mut() {
                        if c.due(at) {
                            if let Some(rate) = c.update(&m, &sampler, at) {
                                set_rate(&sampler, Some(rate));
                            }
                        }
                    }
                    *lock(&metrics) = Some(m);
                }
                sampler.mark();
                for (i, mailer) in mailers.iter().enumerate() {
                    if !finished[i] {
                        mailer.mail(Sample { sent_at: Instant::now() });
                    }
                }
                continue;
            }
        };
        match event {
            Some(JobEvent::RateControl(config)) => {
                let previous = controller.as_ref().and_then(|c| c.current);
                controller = RateController::new(config);
                if let Some(c) = controller.as_mut() {
                    c.inherit(previous);
                }
                match &controller {
                    None => set_rate(&sampler, None),
                    Some(c) => set_rate(&sampler, c.current),
                }
            }
            Some(JobEvent::Finished { actor }) => {
                if !finished[actor] {
                    finished[actor] = true;
                    remaining -= 1;
                }
            }
            Some(JobEvent::Failed(e)) => break Err(e.into_job_error(&job)),
            Some(JobEvent::Lost {
                uid,
                subtask,
                reason,
            }) => {
                break Err(JobError::SubtaskLost {
                    job: job.clone(),
                    uid,
                    subtask,
                    reason,
                })
            }
            Some(JobEvent::Cancel) => break Err(JobError::Cancelled { job: job.clone() }),
            None => {
                break Err(JobError::Runtime {
                    job: job.clone(),
                    message: "every subtask went away without reporting".into(),
                })
            }
        }
    };
    if verdict.is_err() {
        for (i, mailer) in mailers.iter().enumerate() {
            if !finished[i] {
                mailer.mail(Stop);
            }
        }
    }
    stop_arbiters(arbiters, &job);
    match verdict {
        Ok(()) => {
            tracing::info!(elapsed = ?started.elapsed(), "job finished");
            Ok(result(&graph, &plan, &registry, job, started.elapsed()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "job failed");
            Err(e)
        }
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
    }
}
