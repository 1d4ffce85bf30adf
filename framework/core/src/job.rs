//! The handle of a running job ([`JobHandle`]), the cloneable view of it every observer uses
//! ([`JobMonitor`]), and how a job starts: planned, then run by its controller on a thread of
//! its own with an actix `System`.
//!
//! The controller is the only writer of a job's state: every change (settings, operator
//! config, rescale, rebalance, graph replacement, savepoint, rate control, cancel) is a
//! command it answers, and what a monitor reads is the one immutable view it last published
//! (`controller::view`). A monitor talks to subtasks directly only to read (pings, state
//! snapshots). The job's lifecycle is the controller's (`controller`); planning is `plan`.

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use actix::prelude::*;

use crate::backup::BackupMetrics;
use crate::checkpoint::coordinator::CheckpointStats;
use crate::config::EnvConfig;
use crate::controller::deployment::subtasks_of;
use crate::controller::{self, Command, Commands, JobResult, JobStatus, JobView, Launch, Views};
use crate::error::JobError;
use crate::failure::FailureRecord;
use crate::graph::Graph;
use crate::hooks::{ConfigError, StateError, StateSnapshot};
use crate::metrics::JobMetrics;
use crate::plan::plan;
use crate::plan::VertexInfo;
use crate::rate::{RateConfigError, RateControlConfig};
use crate::replace::{ReplaceError, ReplaceOptions, ReplaceReport};
use crate::rescale::{RescaleError, RescaleReport};
use crate::savepoint::SavepointRequest;
pub use crate::settings::RollbackReport;
use crate::settings::{ChangeRecord, PlannedChange, SettingError};
use crate::sync::atomic::Ordering;
use crate::task::{Ping, SnapshotState, SubtaskStatus};

/// How long a rebalance of an operator whose load was not being counted lets it count
/// before it rebalances ([`JobMonitor::rebalance`]).
const LOAD_OBSERVED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Cancels a running job from any thread.
#[derive(Debug, Clone)]
pub struct Canceller {
    commands: Commands,
}

impl Canceller {
    /// Asks the job to stop; `wait` then returns [`JobError::Cancelled`]. Cancelling a job
    /// that has already ended does nothing.
    pub fn cancel(&self) {
        // `wait` is how a handle's owner learns the job's end.
        self.commands.cancel();
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

/// A running job: its owner's handle. It waits for the job's end ([`wait`](Self::wait),
/// [`stop_with_savepoint`](Self::stop_with_savepoint)) and owns what lives as long as the
/// job (its REST server); everything else — reading the job and steering it — is the
/// [`JobMonitor`]'s, which the handle dereferences to (`job.rescale(..)`, `job.metrics()`)
/// and hands out to other threads ([`monitor`](Self::monitor)).
pub struct JobHandle {
    monitor: JobMonitor,
    /// What lives as long as the handle (the REST server of `Env::serve_rest`).
    #[cfg_attr(not(feature = "rest"), allow(dead_code))]
    pub(crate) attached: Vec<Box<dyn std::any::Any + Send>>,
    thread: Option<JoinHandle<Result<JobResult, JobError>>>,
}

/// A cloneable view of a running job for any thread (the REST server, dashboards, agents, the
/// job's own [`JobHandle`]): what the job is now (identity, vertices, status, metrics,
/// checkpoint statistics, settings — one consistent moment, as its controller last published
/// it), and the commands that steer it (settings, rescale, replace, savepoints, cancel), each
/// answered by the controller in the order it takes them. It stays valid after the job ends
/// (it then reports the final status).
#[derive(Clone)]
pub struct JobMonitor {
    id: String,
    name: String,
    start_time_ms: u64,
    views: Views,
    commands: Commands,
    /// The job's settings at start (a replacement's graph is built with them).
    env_config: std::sync::Arc<EnvConfig>,
    /// The graph versions the job can be replaced by.
    graphs: std::sync::Arc<Vec<(String, GraphFactory)>>,
}

impl std::fmt::Debug for JobMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobMonitor")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

/// Sends a command built around its reply sender and waits for the answer; `ended` if the
/// job ended before answering.
fn ask<T>(
    commands: &Commands,
    command: impl FnOnce(std_mpsc::Sender<T>) -> Command,
    ended: impl FnOnce() -> T,
) -> T {
    let (reply, answer) = std_mpsc::channel();
    if !commands.send(command(reply)) {
        return ended();
    }
    answer.recv().unwrap_or_else(|_| ended())
}

impl JobMonitor {
    /// The job's id: 32 hexadecimal digits, unique per start (as Flink's job ids).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When the job started, in milliseconds since the Unix epoch.
    pub fn start_time_ms(&self) -> u64 {
        self.start_time_ms
    }

    /// The job as its controller last published it: one consistent moment.
    pub(crate) fn view(&self) -> std::sync::Arc<JobView> {
        self.views.load()
    }

    /// The job's vertices, in graph order, at their current parallelism.
    pub fn vertices(&self) -> Vec<VertexInfo> {
        self.view().vertices.clone()
    }

    /// The readings operators publish beside their counters (a lookup's cache hits, misses,
    /// size and strategy, ...): (uid, subtask, name, value), by uid and subtask. Read by the
    /// REST server only (feature `rest`).
    #[cfg(feature = "rest")]
    pub(crate) fn operator_gauges(&self) -> Vec<(String, usize, &'static str, String)> {
        let view = self.view();
        let mut out = Vec::new();
        for (uid, g) in &view.gauges {
            for (subtask, values) in g.read() {
                for (name, value) in g.names().iter().zip(values) {
                    out.push((uid.clone(), subtask, *name, value));
                }
            }
        }
        out
    }

    /// How often the job was rescaled, and what the last rescale did.
    pub fn rescale_stats(&self) -> crate::rescale::RescaleStats {
        self.view().rescales.clone()
    }

    /// Changes the parallelism of operator `uid` while the job runs, and returns once the job
    /// runs at the new parallelism.
    ///
    /// The change happens at a checkpoint barrier: the sources pause after emitting it, every
    /// subtask snapshots at it (sinks commit what came before it), and the states are handed
    /// to the controller in memory. A keyed operator's state is dealt to the new subtasks by
    /// key group (no subtask gets more than ⌈groups / parallelism⌉ groups), a derived
    /// operator's `#[weir(operator_state)]` fields are split or unioned, and the job's
    /// subtasks are redeployed on new arbiters at once from those states, with the same
    /// REST server, handle and metrics. Chains are re-planned: an operator chained to its
    /// input at equal parallelism runs as its own vertex after the change. Nothing is lost
    /// or duplicated, and records of one key keep their order. Backed-up operators get
    /// backups for their new subtasks.
    ///
    /// Refused, with nothing changed: an unknown uid, parallelism 0 or above
    /// `max_parallelism`, sources and sinks (their state belongs to one subtask), two-input
    /// operators, a per-subtask field with no redistribution rule, a graph the new
    /// parallelism makes invalid (an explicit `forward()` edge), unaligned checkpoints, and a
    /// rescale while another rescale or a savepoint is in progress. If the rescale's
    /// checkpoint fails, or the job fails before the new subtasks run, the job keeps (or
    /// recovers at) its old parallelism and the error says so; if the new subtasks cannot be
    /// built, it goes back to the old parallelism from the same checkpoint.
    ///
    /// ```no_run
    /// # fn demo(job: &weir::JobHandle) -> Result<(), weir::RescaleError> {
    /// let report = job.rescale("counts", 4)?;
    /// println!("paused {:?}", report.pause);
    /// # Ok(()) }
    /// ```
    pub fn rescale(&self, uid: &str, parallelism: usize) -> Result<RescaleReport, RescaleError> {
        self.rescale_to(crate::controller::RescaleTarget::Operators(vec![(
            uid.to_owned(),
            parallelism,
        )]))
    }

    /// Changes the parallelism of several operators at one barrier (uid, parallelism); see
    /// [`rescale`](Self::rescale).
    pub fn rescale_operators(
        &self,
        changes: &[(String, usize)],
    ) -> Result<RescaleReport, RescaleError> {
        self.rescale_to(crate::controller::RescaleTarget::Operators(
            changes.to_vec(),
        ))
    }

    /// Changes the parallelism of every operator that follows the job's default parallelism
    /// and can be rescaled; sources and sinks keep theirs, and
    /// [`RescaleReport::kept`] says which and why. See [`rescale`](Self::rescale).
    pub fn rescale_job(&self, parallelism: usize) -> Result<RescaleReport, RescaleError> {
        self.rescale_to(crate::controller::RescaleTarget::Job(parallelism))
    }

    /// Assigns the key groups of keyed operator `uid` to its subtasks again by observed load,
    /// at the parallelism it has: the records its inputs sent to each key group since its
    /// key groups were last assigned are dealt so that the hottest subtask carries as little
    /// as the groups allow ([`balance_by_load`](crate::key_group::balance_by_load)). An
    /// operator not set to [`key_groups_by_load`](crate::DataStream::key_groups_by_load) has
    /// its load counted from its first rebalance on (counting costs its keyed edges an add
    /// per record): that first call counts for a second before it rebalances. It moves
    /// state the way a rescale does, at a checkpoint barrier, with nothing lost or duplicated
    /// and each key's records in order; [`RescaleReport::rebalanced`] says what each subtask
    /// carried before and carries now. The assignment is recorded in checkpoints and
    /// savepoints: a restart keeps it, and a restore at another assignment deals the state
    /// to it. Refused for an operator without keyed state and before any record arrived;
    /// nothing changes when the assignment is already the best one.
    ///
    /// ```no_run
    /// # fn demo(job: &weir::JobHandle) -> Result<(), weir::RescaleError> {
    /// let report = job.rebalance("counts")?;
    /// for r in &report.rebalanced {
    ///     let (before, after) = r.hottest_share();
    ///     println!("{}: hottest subtask {before:.2} -> {after:.2} of the load", r.uid);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn rebalance(&self, uid: &str) -> Result<RescaleReport, RescaleError> {
        let target = || crate::controller::RescaleTarget::Rebalance(uid.to_owned());
        match self.rescale_to(target()) {
            // Its keyed edges count from now on: once more after they have seen some load.
            Err(RescaleError::LoadNotObserved { .. }) => {
                std::thread::sleep(LOAD_OBSERVED_FOR);
                self.rescale_to(target())
            }
            other => other,
        }
    }

    fn rescale_to(
        &self,
        target: crate::controller::RescaleTarget,
    ) -> Result<RescaleReport, RescaleError> {
        ask(
            &self.commands,
            |reply| Command::Rescale(crate::controller::RescaleRequest { target, reply }),
            || Err(RescaleError::JobEnded),
        )
    }

    /// The job's checkpoint settings now (they change live: [`update_settings`](Self::update_settings)).
    pub fn checkpoint_config(&self) -> crate::checkpoint::CheckpointConfig {
        self.view().checkpoint_config.clone()
    }

    /// The names of the graph versions registered for the job ([`Env::register_graph`]).
    ///
    /// [`Env::register_graph`]: crate::Env::register_graph
    pub fn registered_graphs(&self) -> Vec<String> {
        self.graphs.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Replaces the graph by the version registered as `name` ([`Env::register_graph`]); see
    /// [`replace`](Self::replace).
    ///
    /// A test that collects the output should give every graph version the same handle
    /// ([`DataStream::collect_into`](crate::DataStream::collect_into)): a commit repeated
    /// across the replacement is recognized within one handle, not across two.
    ///
    /// [`Env::register_graph`]: crate::Env::register_graph
    pub fn replace_with(
        &self,
        name: &str,
        options: ReplaceOptions,
    ) -> Result<ReplaceReport, ReplaceError> {
        let Some((_, build)) = self.graphs.iter().find(|(n, _)| n == name) else {
            return Err(ReplaceError::UnknownGraph {
                name: name.to_owned(),
                known: self.registered_graphs().join(", "),
            });
        };
        let graph = build(&self.build_config());
        self.replace_graph(graph, options)
    }

    /// Sends `graph` to replace the running one and waits for the answer.
    pub(crate) fn replace_graph(
        &self,
        graph: Graph,
        options: ReplaceOptions,
    ) -> Result<ReplaceReport, ReplaceError> {
        let graph = Box::new(graph);
        ask(
            &self.commands,
            |reply| {
                Command::Replace(crate::controller::ReplaceRequest {
                    graph,
                    options,
                    reply,
                })
            },
            || Err(ReplaceError::JobEnded),
        )
    }

    /// The settings a replacement's graph is built with: the job's, with its checkpoint
    /// settings as they are now.
    pub(crate) fn build_config(&self) -> EnvConfig {
        let mut cfg = (*self.env_config).clone();
        cfg.checkpoint = self.checkpoint_config();
        cfg
    }

    /// Every live setting's value now, by name (see [`crate::settings`]).
    pub fn settings(&self) -> std::collections::BTreeMap<String, String> {
        self.view().settings.clone()
    }

    /// Every settings change asked for (applied or refused), oldest first, in the order the
    /// job took them.
    pub fn settings_history(&self) -> Vec<ChangeRecord> {
        self.view().settings_history.clone()
    }

    /// How each change would apply (live, and when; or why it needs a fast restart), without
    /// applying anything. An unknown setting or a bad value is an error.
    pub fn plan_settings(
        &self,
        changes: &[(String, String)],
    ) -> Result<Vec<PlannedChange>, SettingError> {
        let view = self.view();
        changes
            .iter()
            .map(|(n, v)| crate::settings::plan_one(n, v, &view.settings))
            .collect()
    }

    /// Changes live settings while the job runs, all or none: checkpoint interval, timeout,
    /// mode, unaligned, min pause, tolerated failures, concurrency (from the next trigger;
    /// alignment in each subtask between two checkpoints), the sources' rate, and operators'
    /// `#[weir(config)]` fields (`operator.<uid>.<key>`, between two batches). Every value is
    /// checked first, operator fields on a copy of the operator: one bad value changes
    /// nothing and names the setting. Nothing restarts. `caller` is recorded in the history.
    /// The job's controller takes changes one at a time, in the order they arrive.
    ///
    /// ```no_run
    /// # fn demo(job: &weir::JobMonitor) -> Result<(), weir::settings::SettingError> {
    /// job.update_settings_as(
    ///     &[("execution.checkpointing.interval".into(), "100ms".into())],
    ///     "ops",
    /// )?;
    /// # Ok(()) }
    /// ```
    pub fn update_settings_as(
        &self,
        changes: &[(String, String)],
        caller: &str,
    ) -> Result<Vec<PlannedChange>, SettingError> {
        let request = |reply| {
            Command::Settings(crate::controller::SettingsRequest {
                changes: changes.to_vec(),
                caller: caller.to_owned(),
                reply,
            })
        };
        ask(&self.commands, request, || {
            Err(SettingError::Busy("the job has ended".into()))
        })
    }

    /// Changes live settings as the Rust API (recorded as caller `rust`); see
    /// [`update_settings_as`](Self::update_settings_as).
    pub fn update_settings(
        &self,
        changes: &[(String, String)],
    ) -> Result<Vec<PlannedChange>, SettingError> {
        self.update_settings_as(changes, "rust")
    }

    /// Returns every setting changed since the last completed checkpoint to its value then
    /// (recorded as caller `rollback`); settings with no earlier known value (an operator
    /// field first changed after that checkpoint) are listed as kept.
    pub fn rollback_settings(&self) -> Result<RollbackReport, SettingError> {
        ask(&self.commands, Command::RollbackSettings, || {
            Err(SettingError::Busy("the job has ended".into()))
        })
    }

    /// Changes the `#[weir(config)]` field `key` of operator `uid` to `value` (parsed into the
    /// field's type) in every subtask, between two batches, without stopping the job. A bad
    /// key or value is refused by the first subtask, so no subtask changes.
    pub fn update_config(&self, uid: &str, key: &str, value: &str) -> Result<(), ConfigError> {
        let request = |reply| {
            Command::Configure(crate::controller::ConfigureRequest {
                uid: uid.to_owned(),
                key: key.to_owned(),
                value: value.to_owned(),
                reply,
            })
        };
        ask(&self.commands, request, || {
            Err(ConfigError::NoSuchOperator {
                uid: uid.to_owned(),
            })
        })
    }

    /// Changes the sources' rate control while the job runs (enable, disable, rates, gains).
    /// The new settings take effect at the next update; disabling lifts the limit at once.
    pub fn set_rate_control(&self, config: RateControlConfig) -> Result<(), RateConfigError> {
        config.validate()?;
        // The controller answers once the change is applied; like a config change sent to a
        // running job, this call does not wait for it.
        let (reply, _applied) = std_mpsc::channel();
        self.commands.send(Command::SetRateControl(config, reply));
        Ok(())
    }

    /// The job's status now.
    pub fn status(&self) -> JobStatus {
        self.view().status
    }

    /// When the job ended, in milliseconds since the Unix epoch (`None` while it runs).
    pub fn end_time_ms(&self) -> Option<u64> {
        self.view().ended_ms
    }

    /// The job's metrics over the last metrics interval (`None` before the first interval
    /// has passed).
    pub fn metrics(&self) -> Option<JobMetrics> {
        self.view().metrics.clone()
    }

    /// The checkpoint statistics: zero counts before the first checkpoint; with checkpoints
    /// off, `None` until a savepoint or a restart.
    pub fn checkpoint_stats(&self) -> Option<CheckpointStats> {
        self.view().checkpoints.clone()
    }

    /// Metrics of every backed-up subtask (buffer queue, promotions, failover time), in
    /// operator then subtask order; empty when no operator is backed up.
    pub fn backup_metrics(&self) -> Vec<BackupMetrics> {
        self.view().backups.iter().map(|g| g.metrics()).collect()
    }

    /// Every failure that restarted the job or ended it, oldest first: when, which attempt
    /// (0 for the first deployment), the error's text, whether it was
    /// [transient or deterministic](crate::FailureClass), and whether the job restarted (after what
    /// delay) or failed. Empty while nothing has failed; failures a backup took over without
    /// a restart are not in it ([`promotions`](Self::promotions)).
    ///
    /// ```
    /// let env = weir::Env::new();
    /// env.generate(10, |i| i).discard();
    /// let job = env.start("no-failures").unwrap();
    /// let history = job.failures();
    /// job.wait().unwrap();
    /// assert!(history.is_empty());
    /// ```
    pub fn failures(&self) -> Vec<FailureRecord> {
        self.view().failures.clone()
    }

    /// Every backup promoted in place of its failed primary, oldest first: the failovers
    /// that restarted nothing (restarts are in [`failures`](Self::failures)).
    pub fn promotions(&self) -> Vec<crate::PromotionRecord> {
        self.view().promotions.clone()
    }

    /// Asks the job to stop ([`JobError::Cancelled`]); does not wait.
    pub fn cancel(&self) {
        self.commands.cancel();
    }

    /// Triggers a checkpoint now and returns its id (its progress is in
    /// [`CheckpointStats::history`]); `Err` says why none could be triggered.
    pub fn trigger_checkpoint(&self) -> Result<u64, String> {
        let (reply, answer) = std_mpsc::channel();
        self.commands.send(Command::TriggerCheckpoint(reply));
        match answer.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(r) => r,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                Err("the job did not answer within 10 s (it is stopping)".into())
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err("the job has ended".into()),
        }
    }

    /// Starts a savepoint into `dir` (then stops the job if `stop`) and returns at once; the
    /// receiver gets the savepoint's path or why there is none, and is disconnected if the
    /// job ends first.
    pub fn trigger_savepoint(
        &self,
        dir: std::path::PathBuf,
        stop: bool,
    ) -> std_mpsc::Receiver<Result<std::path::PathBuf, String>> {
        let (reply, answer) = std_mpsc::channel();
        self.commands
            .send(Command::Savepoint(SavepointRequest { dir, stop, reply }));
        answer
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

    fn request_savepoint(
        &self,
        dir: &std::path::Path,
        stop: bool,
    ) -> Result<std::path::PathBuf, JobError> {
        let answer = self.trigger_savepoint(dir.to_owned(), stop);
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

    /// Sends a heartbeat ping through the system lane of the subtask that runs operator `uid`,
    /// subtask `subtask`, and waits for its answer. `None` if there is no such subtask or it
    /// has already stopped.
    pub fn ping(&self, uid: &str, subtask: usize) -> Option<SubtaskStatus> {
        self.send_ping(uid, subtask)?.wait()
    }

    /// Puts a ping in the system lane of that subtask now and returns without waiting; the
    /// answer is read with [`PendingPing::wait`]. `None` if there is no such subtask.
    pub fn send_ping(&self, uid: &str, subtask: usize) -> Option<PendingPing> {
        let entry = subtasks_of(&self.view().actors, uid)
            .into_iter()
            .find(|a| a.subtask == subtask)?;
        // `Addr::send` enqueues the mail before it returns the reply future.
        entry.counters.mails_sent.fetch_add(1, Ordering::Relaxed);
        Some(PendingPing {
            reply: Box::pin(entry.addr.send(Ping)),
        })
    }

    /// Snapshots the `#[weir(state)]` fields of operator `uid` in every subtask (in subtask
    /// order), each between two of its batches. Give the result to
    /// [`DataStream::with_initial_state`](crate::DataStream::with_initial_state) to start a
    /// job from it. A read: it changes nothing in the job.
    pub fn snapshot_state(&self, uid: &str) -> Result<Vec<StateSnapshot>, StateError> {
        let entries = subtasks_of(&self.view().actors, uid);
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
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("name", &self.monitor.name)
            .field("subtasks", &self.monitor.view().actors.len())
            .finish()
    }
}

/// A handle reads and steers its job through its monitor: one API, not two.
impl std::ops::Deref for JobHandle {
    type Target = JobMonitor;

    fn deref(&self) -> &JobMonitor {
        &self.monitor
    }
}

impl JobHandle {
    /// A cloneable view of the job for observers on other threads (e.g. the REST server).
    pub fn monitor(&self) -> JobMonitor {
        self.monitor.clone()
    }

    /// A handle that cancels this job from another thread.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            commands: self.monitor.commands.clone(),
        }
    }

    /// Takes a savepoint into `dir`, then stops the job; returns the savepoint's path and the
    /// job's result. Output after the savepoint is not committed: a job started from the
    /// savepoint produces it.
    pub fn stop_with_savepoint(
        self,
        dir: impl AsRef<std::path::Path>,
    ) -> Result<(std::path::PathBuf, JobResult), JobError> {
        let path = self.monitor.request_savepoint(dir.as_ref(), true)?;
        let result = self.wait()?;
        Ok((path, result))
    }

    /// Whether the job has ended (its result is ready for [`JobHandle::wait`]).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the job to end.
    pub fn wait(mut self) -> Result<JobResult, JobError> {
        let thread = self.thread.take().expect("a handle is waited on once");
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(JobError::Runtime {
                job: self.monitor.name.clone(),
                message: "the job thread panicked".into(),
            }),
        }
    }
}

/// Builds a registered graph version with the job's settings (`Env::register_graph`).
pub(crate) type GraphFactory = std::sync::Arc<dyn Fn(&EnvConfig) -> Graph + Send + Sync>;

/// Plans `graph` and starts it on a job thread; returns once every subtask is deployed.
pub(crate) fn start(
    graph: Graph,
    cfg: EnvConfig,
    name: &str,
    graphs: Vec<(String, GraphFactory)>,
) -> Result<JobHandle, JobError> {
    let job = name.to_owned();
    let mut graph = graph;
    crate::plan::apply_config_backups(&mut graph, &cfg).map_err(|source| JobError::Plan {
        job: job.clone(),
        source,
    })?;
    let plan = plan(&graph, &cfg).map_err(|source| JobError::Plan {
        job: job.clone(),
        source,
    })?;
    let remote = check_directories(&graph, &cfg, &job)?;
    let (commands, inbox) = Commands::channel();
    let (deployed_tx, deployed_rx) = std_mpsc::channel::<()>();
    let mut settings = crate::settings::checkpoint_values(&cfg.checkpoint);
    settings.extend(crate::settings::rate_values(&cfg.rate_control));
    let (writer, views) = controller::view::channel(JobView {
        vertices: crate::plan::vertices(&graph, &plan, cfg.max_parallelism),
        gauges: graph.gauges_by_uid(&plan.uids),
        checkpoint_config: cfg.checkpoint.clone(),
        settings,
        ..JobView::default()
    });
    let monitor = JobMonitor {
        id: new_job_id(),
        name: job.clone(),
        start_time_ms: now_ms(),
        views,
        commands,
        env_config: std::sync::Arc::new(cfg.clone()),
        graphs: std::sync::Arc::new(graphs),
    };
    let launch = Launch {
        graph,
        plan,
        cfg,
        job: job.clone(),
        commands: inbox,
        deployed: deployed_tx,
        views: writer,
        remote,
    };
    let thread = std::thread::Builder::new()
        .name(format!("weir-job-{job}"))
        .spawn(move || {
            let span = tracing::info_span!("job", name = %launch.job);
            let _enter = span.enter();
            let system = actix_rt::System::new();
            system.block_on(controller::run(launch))
        })
        .map_err(|e| JobError::Runtime {
            job: job.clone(),
            message: format!("cannot spawn the job thread: {e}"),
        })?;
    let handle = JobHandle {
        monitor,
        attached: Vec::new(),
        thread: Some(thread),
    };
    // Deployment either signals or ends the thread with an error.
    match deployed_rx.recv() {
        Ok(()) => Ok(handle),
        Err(_) => match handle.wait() {
            Err(e) => Err(e),
            Ok(_) => unreachable!("a job that did not deploy cannot succeed"),
        },
    }
}

/// Checks, before anything runs, that every directory the job will write can be created and
/// written: the checkpoint directory (with checkpoints on; on an object store, its local copy
/// and a probe object put and deleted there) and every file sink's directory. Returns the
/// object store the checkpoints go to, if they do.
fn check_directories(
    graph: &Graph,
    cfg: &EnvConfig,
    job: &str,
) -> Result<Option<std::sync::Arc<crate::checkpoint::remote::Remote>>, JobError> {
    let directory = &cfg.checkpoint.directory;
    let bad_store = |path: &std::path::Path, e: crate::checkpoint::store::CheckpointError| {
        JobError::Directory {
            job: job.to_owned(),
            purpose: "checkpoint directory",
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        }
    };
    let mut remote = None;
    let mut checkpoint_dir = directory.join(job);
    // Opened with checkpoints off too: savepoints go through the checkpoint directory.
    if crate::checkpoint::remote::is_url(directory) {
        let c = &cfg.checkpoint;
        let r = crate::checkpoint::remote::Remote::open(
            directory,
            &c.local_directory,
            &c.storage_options,
        )
        .map_err(|e| bad_store(directory, e))?;
        checkpoint_dir = r.local().join(job);
        r.probe(&checkpoint_dir)
            .map_err(|e| bad_store(directory, e))?;
        remote = Some(r);
    }
    let checkpoints = cfg
        .checkpoint
        .interval
        .map(|_| ("checkpoint directory", checkpoint_dir));
    let sinks = graph
        .output_dirs
        .iter()
        .map(|d| ("sink directory", d.clone()));
    for (purpose, path) in checkpoints.into_iter().chain(sinks) {
        crate::checkpoint::store::probe_writable(&path).map_err(|source| JobError::Directory {
            job: job.to_owned(),
            purpose,
            path,
            source,
        })?;
    }
    Ok(remote)
}

/// A new job id.
fn new_job_id() -> String {
    unique_hex()
}

/// 16 random bytes as 32 hexadecimal digits (job ids, REST trigger ids); without OS
/// randomness, a process-wide counter and the clock, unique within the process.
pub(crate) fn unique_hex() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: unique within the process is enough for an id.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b[..8].copy_from_slice(&n.to_le_bytes());
        b[8..].copy_from_slice(&now_ms().to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) use crate::metrics::now_ms;
