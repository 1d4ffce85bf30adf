//! One deployment of a job: its arbiters (threads), the subtask actors placed on them, the
//! backed-up subtasks with their heartbeats, and the sampler that reads their metrics. This
//! module places and stops actors and mails them; it decides nothing (the states do).

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::channel::mpsc::UnboundedSender;

use crate::backup::{BackupGroup, BackupMetrics, BackupPing};
use crate::checkpoint::FINAL_COMMIT;
use crate::config::EnvConfig;
use crate::detector::{Heartbeats, Silence};
use crate::error::JobError;
use crate::event::{JobEvent, SubtaskId};
use crate::graph::Graph;
use crate::metrics::{SubtaskCounters, SubtaskSample};
use crate::plan::{OperatorRegistry, Plan, SubtaskSpec};
use crate::sampler::{OperatorProbe, Sampler, SubtaskProbe};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Mutex};
use crate::task::{NotifyComplete, SetRate, Stop, SubtaskActor};

/// A subtask actor of the current deployment, as the job's handle and controller see it.
#[derive(Clone)]
pub(crate) struct ActorEntry {
    /// Uids of every operator in the actor's chain.
    pub(crate) uids: Vec<String>,
    pub(crate) subtask: usize,
    pub(crate) addr: Addr<SubtaskActor>,
    pub(crate) counters: Arc<SubtaskCounters>,
}

impl ActorEntry {
    /// Puts a control mail in the subtask's system lane (counted for `mailboxQueueSize`).
    pub(crate) fn mail<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubtaskActor: Handler<M>,
    {
        self.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
        self.addr.do_send(msg);
    }

    /// Puts a control mail in the subtask's system lane and waits for its answer, at most
    /// `within`; `None` if the subtask stopped or did not answer in time (the controller
    /// never waits on a hung subtask).
    pub(crate) async fn ask<M>(&self, msg: M, within: Duration) -> Option<M::Result>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubtaskActor: Handler<M>,
    {
        self.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
        match actix_rt::time::timeout(within, self.addr.send(msg)).await {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(_)) | Err(_) => None,
        }
    }
}

/// A backed-up subtask: its group, the arbiters of its primary and backup, and their
/// heartbeats.
pub(crate) struct BackupSlot {
    /// The subtask's index in the deployment.
    pub(crate) actor: usize,
    pub(crate) group: std::sync::Arc<dyn BackupGroup>,
    pub(crate) primary_arbiter: usize,
    pub(crate) backup_arbiter: usize,
    pub(crate) backup: Recipient<BackupPing>,
    pub(crate) heartbeats: Heartbeats,
    /// Promotions of this subtask since a checkpoint last completed (or since a quiet
    /// minute), and when the last was: a primary that keeps failing is not promoted for
    /// ever (see `controller::states::failing_over`).
    pub(crate) recent_promotions: u32,
    pub(crate) last_promotion: Option<Instant>,
}

/// One deployment of the job: its arbiters and actors.
pub(crate) struct Deployment {
    pub(crate) arbiters: Vec<Arbiter>,
    pub(crate) actors: Vec<ActorEntry>,
    pub(crate) sampler: Sampler,
    pub(crate) sources: Vec<bool>,
    pub(crate) finished: Vec<bool>,
    /// Answers to the sampling mail, for the job-level hang detection.
    pub(crate) silence: Silence,
    /// Per subtask: its id (the current primary's epoch, for a backed-up one).
    pub(crate) ids: Vec<SubtaskId>,
    /// The backed-up subtasks.
    pub(crate) backups: Vec<BackupSlot>,
}

/// What placing actors needs from the job.
pub(crate) struct Placement<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) plan: &'a Plan,
    pub(crate) cfg: &'a EnvConfig,
    pub(crate) registry: &'a OperatorRegistry,
    pub(crate) events: &'a UnboundedSender<JobEvent>,
    pub(crate) checkpoint_root: Option<PathBuf>,
    /// The object store checkpoints also go to.
    pub(crate) remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
}

impl Placement<'_> {
    /// Starts the subtask actor `id` with `driver` on `arbiter`.
    pub(crate) fn start_actor(
        &self,
        arbiter: &Arbiter,
        id: SubtaskId,
        driver: crate::task::Driver,
        counters: Arc<SubtaskCounters>,
        rx_waker: Arc<crate::sync::AtomicWaker>,
        slot: Arc<Mutex<SubtaskSample>>,
    ) -> Addr<SubtaskActor> {
        let (events, linger, root, remote) = (
            self.events.clone(),
            self.cfg.linger,
            self.checkpoint_root.clone(),
            self.remote.clone(),
        );
        SubtaskActor::start_in_arbiter(&arbiter.handle(), move |_| {
            SubtaskActor::new(
                id, driver, events, counters, rx_waker, linger, slot, root, remote,
            )
        })
    }

    /// Uids of every operator in the chain headed by `head`.
    fn chain_uids(&self, head: usize) -> Vec<String> {
        self.plan
            .head_of
            .iter()
            .enumerate()
            .filter(|&(_, &h)| h == head)
            .map(|(n, _)| self.plan.uids[n].clone())
            .collect()
    }

    fn operator_probes(&self) -> Vec<OperatorProbe> {
        self.graph
            .nodes
            .iter()
            .enumerate()
            .map(|(id, node)| OperatorProbe {
                uid: self.plan.uids[id].clone(),
                name: node.name.clone(),
                head: self.plan.head_of[id],
                is_source: node.is_source,
                counters: self.registry.counters[id].clone(),
            })
            .collect()
    }
}

/// Places every subtask of `specs` on a pool of arbiters (round robin); a backed-up subtask's
/// primary and backup get arbiters of their own, so a hung primary blocks nothing else and
/// the backup never shares its primary's thread.
pub(crate) fn deploy(at: &Placement<'_>, specs: Vec<SubtaskSpec>) -> Deployment {
    let plain = specs.iter().filter(|s| s.backup.is_none()).count();
    let mut arbiters: Vec<Arbiter> = (0..at.cfg.arbiters.min(plain.max(1)))
        .map(|_| Arbiter::new())
        .collect();
    let pool = arbiters.len();
    let mut next_plain = 0;
    let n = specs.len();
    let (mut ids, mut backups, mut actors, mut probes, mut sources) = (
        Vec::with_capacity(n),
        Vec::new(),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (k, spec) in specs.into_iter().enumerate() {
        let slot = Arc::new(Mutex::new(SubtaskSample::default()));
        let is_source = at.graph.nodes[spec.id.head].is_source;
        sources.push(is_source);
        probes.push(SubtaskProbe {
            head: spec.id.head,
            head_uid: spec.id.head_uid.clone(),
            subtask: spec.id.subtask,
            is_source,
            slot: slot.clone(),
            counters: spec.counters.clone(),
        });
        ids.push(spec.id.clone());
        let arbiter = match &spec.backup {
            None => {
                next_plain += 1;
                (next_plain - 1) % pool
            }
            Some(group) => {
                let slot = backup_slot(at, &mut arbiters, group, spec.id.attempt, k);
                let primary = slot.primary_arbiter;
                backups.push(slot);
                primary
            }
        };
        let entry = ActorEntry {
            uids: at.chain_uids(spec.id.head),
            subtask: spec.id.subtask,
            counters: spec.counters.clone(),
            addr: at.start_actor(
                &arbiters[arbiter],
                spec.id,
                spec.driver,
                spec.counters,
                spec.rx_waker,
                slot,
            ),
        };
        actors.push(entry);
    }
    Deployment {
        arbiters,
        sampler: Sampler::new(probes, at.operator_probes()),
        sources,
        finished: vec![false; actors.len()],
        silence: Silence::new(actors.len(), Instant::now()),
        actors,
        ids,
        backups,
    }
}

/// Two new arbiters, for a backed-up subtask's primary and backup, and its backup started on
/// the second.
fn backup_slot(
    at: &Placement<'_>,
    arbiters: &mut Vec<Arbiter>,
    group: &std::sync::Arc<dyn BackupGroup>,
    attempt: u64,
    k: usize,
) -> BackupSlot {
    arbiters.push(Arbiter::new());
    arbiters.push(Arbiter::new());
    let (p, b) = (arbiters.len() - 2, arbiters.len() - 1);
    let backup = group
        .clone()
        .start_backup(&arbiters[b].handle(), at.events.clone(), attempt, k);
    let policy = group.policy();
    let heartbeats = Heartbeats::new(
        policy.heartbeat_interval,
        policy.heartbeat_timeout,
        Instant::now(),
    );
    let primary = heartbeats.primary.clone();
    group.on_progress(std::sync::Arc::new(move || {
        primary.answered(Instant::now())
    }));
    BackupSlot {
        actor: k,
        group: group.clone(),
        primary_arbiter: p,
        backup_arbiter: b,
        backup,
        heartbeats,
        recent_promotions: 0,
        last_promotion: None,
    }
}

impl Deployment {
    /// Sets (or lifts) the total source rate, split evenly over the source subtasks.
    pub(crate) fn set_rate(&self, rate: Option<f64>) {
        let n = self.sampler.source_subtasks().max(1) as f64;
        for i in self.sampler.source_actors() {
            self.actors[i].mail(SetRate(rate.map(|r| r / n)));
        }
    }

    /// Mails `msg()` to every source subtask.
    pub(crate) fn mail_sources<M>(&self, msg: impl Fn() -> M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubtaskActor: Handler<M>,
    {
        for (i, a) in self.actors.iter().enumerate() {
            if self.sources[i] {
                a.mail(msg());
            }
        }
    }

    /// Mails `msg()` to every subtask that has not finished.
    pub(crate) fn mail_running<M>(&self, msg: impl Fn() -> M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SubtaskActor: Handler<M>,
    {
        for (i, a) in self.actors.iter().enumerate() {
            if !self.finished[i] {
                a.mail(msg());
            }
        }
    }

    /// The backup slot of subtask `actor`, if it is backed up.
    pub(crate) fn slot_of(&self, actor: usize) -> Option<usize> {
        self.backups.iter().position(|b| b.actor == actor)
    }

    /// Whether any backed-up subtask's buffer queue degraded.
    pub(crate) fn degraded(&self) -> bool {
        self.backups.iter().any(|b| b.group.metrics().degraded)
    }

    /// The backup metrics at the deployment's end (`degraded` also if an earlier run's was).
    pub(crate) fn backup_report(&self, degraded_before: bool) -> Vec<BackupMetrics> {
        self.backups
            .iter()
            .map(|b| {
                let mut m = b.group.metrics();
                m.degraded |= degraded_before;
                m
            })
            .collect()
    }

    /// A subtask that went away after it finished (its arbiter stopped), if any: before the
    /// final commit, when no sink has committed the end of its input yet, the job can still
    /// recover from its latest checkpoint without repeating output.
    pub(crate) fn gone_before_final_commit(&self) -> Option<&SubtaskId> {
        self.actors
            .iter()
            .zip(&self.ids)
            .find(|(a, _)| !a.addr.connected())
            .map(|(_, id)| id)
    }

    /// Every subtask finished: sinks commit what they staged last (end of input). The first
    /// failure is the job's.
    pub(crate) async fn commit_final(&self, job: &str) -> Result<(), JobError> {
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

    /// Stops every actor and arbiter; hung subtasks are released first.
    pub(crate) fn stop(self, job: &str, cfg: &EnvConfig) {
        for a in &self.actors {
            a.mail(Stop);
        }
        cfg.faults.release();
        stop_arbiters(self.arbiters, job);
    }

    /// Replaces the failed backup of slot `i` (of `generation`, or the current one) by a fresh
    /// one on a new arbiter; the primary is not disturbed.
    pub(crate) fn replace_backup(
        &mut self,
        i: usize,
        generation: Option<u64>,
        events: &UnboundedSender<JobEvent>,
        attempt: u64,
    ) {
        let slot = &mut self.backups[i];
        if !slot.group.drop_backup(generation) {
            return; // an older backup's report
        }
        tracing::warn!(uid = %slot.group.uid(), subtask = slot.group.subtask(), "backup failed: starting a new one");
        self.arbiters[slot.backup_arbiter].stop();
        self.arbiters.push(Arbiter::new());
        slot.backup_arbiter = self.arbiters.len() - 1;
        slot.backup = slot.group.clone().start_backup(
            &self.arbiters[slot.backup_arbiter].handle(),
            events.clone(),
            attempt,
            slot.actor,
        );
        slot.heartbeats.new_backup(Instant::now());
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

/// The subtask actors among `actors` that run operator `uid`, in subtask order.
pub(crate) fn subtasks_of(actors: &[ActorEntry], uid: &str) -> Vec<ActorEntry> {
    let mut v: Vec<ActorEntry> = actors
        .iter()
        .filter(|a| a.uids.iter().any(|u| u == uid))
        .cloned()
        .collect();
    v.sort_by_key(|e| e.subtask);
    v
}
