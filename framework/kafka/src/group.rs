//! Scale-out over processes: the members of one Kafka consumer group share a topic's
//! partitions, and each runs one job per partition it is assigned.
//!
//! The unit of state is the input partition: a partition's job has its own checkpoints
//! (under `{state_dir}/{group}/p{partition}`, a directory every member can reach) and its
//! own transactional ids, so the partition moves between processes with its state. A revoked
//! partition's job completes one more checkpoint and stops before the revoke returns; an
//! assigned partition's job starts from that partition's newest checkpoint (or from the
//! source's start). A member that dies leaves its partitions' last checkpoints; the group
//! assigns them to the others once its session times out, and their jobs' sinks fence the
//! dead member's transactional ids when they start.
//!
//! This module owns the membership and the partition jobs' lifecycles; it does not own what
//! the jobs do (the caller's `build`) or how they checkpoint.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;

use crate::{KafkaEnvExt, KafkaSource};
use weir::{Data, DataStream, Env, EnvConfig, JobHandle, RestoreLatest};

/// Which partition a job is for: what a group's `build` is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTask {
    /// The input partition.
    pub partition: i32,
    /// The job's name, `{group}-p{partition}`: unique in the group, the same in every
    /// member (its checkpoints are found by it). Use it in the sink's transactional prefix.
    pub job: String,
    /// Whether this member still holds the partition: give it to the job's exactly-once
    /// sinks ([`KafkaSink::lease`](crate::KafkaSink::lease)).
    pub lease: Lease,
}

/// Whether a member may still act for its partitions: not once the process was frozen (a
/// stopped or paused process) past its session, since the group has moved them by then.
///
/// An exactly-once sink given the lease checks it before its producer starts (which fences
/// the transactional id's other producers) and before each commit. A member frozen in the
/// middle of starting a partition's job would otherwise, once resumed, fence the producer of
/// the partition's new owner. The check narrows that to the moment between the check and
/// the broker's answer; the broker's fencing still decides.
#[derive(Clone)]
pub struct Lease {
    shared: Arc<Shared>,
}

impl Lease {
    /// The member still holds its partitions (it was not frozen past its session since it
    /// last joined the group).
    pub fn held(&self) -> bool {
        !self.shared.frozen()
    }
}

#[cfg(test)]
impl Lease {
    /// The lease of a member that was frozen past its session (and has not joined again).
    pub(crate) fn lost() -> Lease {
        Lease {
            shared: {
                let shared = Shared::new(Duration::from_secs(6));
                shared.froze.store(true, Ordering::Release);
                Arc::new(shared)
            },
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("held", &self.held()).finish()
    }
}

impl PartialEq for Lease {
    fn eq(&self, other: &Lease) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for Lease {}

/// What a member did with a partition, with a wall-clock time (ms since the Unix epoch), for
/// the gap a move leaves (the time between the old owner's stop and the new owner's start).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskEvent {
    /// The partition's job started here.
    Started {
        /// The partition.
        partition: i32,
        /// When.
        at_ms: u64,
    },
    /// The partition's job stopped here after a final checkpoint (a revoke).
    Stopped {
        /// The partition.
        partition: i32,
        /// When.
        at_ms: u64,
    },
    /// The partition was lost (the member's session expired): its job was cancelled
    /// without a final checkpoint.
    Lost {
        /// The partition.
        partition: i32,
        /// When.
        at_ms: u64,
    },
    /// The partition's job failed. A member that still holds the partition (it was not
    /// frozen past its session) starts it again from its newest checkpoint; one that was
    /// frozen leaves the group and joins it again, so that the group hands the partitions
    /// out anew.
    Failed {
        /// The partition.
        partition: i32,
        /// When.
        at_ms: u64,
    },
}

type Build<T> = Arc<dyn Fn(&Env, DataStream<T>, &PartitionTask) + Send + Sync>;

/// One member of a consumer group running a job per assigned partition.
///
/// ```no_run
/// use std::time::Duration;
/// use weir_kafka::{KafkaConfig, KafkaGroup, KafkaSink, KafkaSource, KafkaStreamExt};
///
/// let kafka = KafkaConfig::new("127.0.0.1:9092");
/// let source = KafkaSource::new(kafka.clone(), "in", |r| Ok(r.value.unwrap_or_default().to_vec()));
/// let mut cfg = weir::EnvConfig::default();
/// cfg.checkpoint.interval = Some(Duration::from_millis(200));
/// let member = KafkaGroup::new(source, "copy", "/shared/weir", move |_env, stream, task| {
///     let sink = KafkaSink::new(kafka.clone(), "out", |v: &Vec<u8>, out: &mut Vec<u8>| {
///         out.extend_from_slice(v);
///         Ok(())
///     })
///     .exactly_once(task.job.clone())
///     .lease(task.lease.clone());
///     stream.sink_to_kafka("out", sink).uid("out");
/// })
/// .config(cfg)
/// .start()
/// .unwrap();
/// // ... until this process should leave the group:
/// member.stop();
/// ```
pub struct KafkaGroup<T> {
    source: KafkaSource<T>,
    group: String,
    state_dir: PathBuf,
    config: EnvConfig,
    session_timeout: Duration,
    parallelism: usize,
    build: Build<T>,
}

impl<T: Data> KafkaGroup<T> {
    /// A member of `group` reading `source`'s topic, with the partitions' checkpoints under
    /// `state_dir` (shared by every member), building each partition's job with `build`
    /// (from the source's stream to its sinks).
    pub fn new(
        source: KafkaSource<T>,
        group: impl Into<String>,
        state_dir: impl Into<PathBuf>,
        build: impl Fn(&Env, DataStream<T>, &PartitionTask) + Send + Sync + 'static,
    ) -> Self {
        KafkaGroup {
            source,
            group: group.into(),
            state_dir: state_dir.into(),
            config: EnvConfig::default(),
            session_timeout: Duration::from_secs(6),
            parallelism: 1,
            build: Arc::new(build),
        }
    }

    /// The parallelism of each partition's job (default 1): its operators run with
    /// `parallelism` subtasks, its source with one (one partition is read by one reader).
    /// An operator set otherwise in the job (a sink kept to one writer per partition, say)
    /// keeps its own.
    pub fn parallelism(mut self, parallelism: usize) -> Self {
        self.parallelism = parallelism.max(1);
        self
    }

    /// The partition jobs' config (their checkpoint directory and restore are set per
    /// partition; parallelism is [`parallelism`](Self::parallelism)'s).
    pub fn config(mut self, config: EnvConfig) -> Self {
        self.config = config;
        self
    }

    /// How long the group waits for a silent member before it moves its partitions
    /// (`session.timeout.ms`, default 6 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Joins the group and runs the assigned partitions' jobs on a thread of its own until
    /// [`GroupMember::stop`].
    pub fn start(self) -> Result<GroupMember, weir::SourceError> {
        if !self.source.is_single_topic() {
            return Err(weir::SourceError::Setup {
                source: format!(
                    "kafka group `{}`: group mode reads one named topic, not `{}` (a list or a \
                     pattern): run a job with the source instead",
                    self.group,
                    self.source.topic()
                )
                .into(),
            });
        }
        let shared = Arc::new(Shared::new(self.session_timeout));
        let runner: Arc<dyn TaskRunner> = Arc::new(Runner {
            lease: Lease {
                shared: shared.clone(),
            },
            source: self.source.clone(),
            group: self.group.clone(),
            state_dir: self.state_dir.clone(),
            config: self.config.clone(),
            parallelism: self.parallelism,
            build: self.build.clone(),
        });
        let context = Membership {
            shared: shared.clone(),
            runner,
        };
        let consumer: BaseConsumer<Membership> = self
            .source
            .config
            .client()
            .set("group.id", &self.group)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set(
                "session.timeout.ms",
                self.session_timeout.as_millis().to_string(),
            )
            .set("enable.auto.commit", "false")
            .create_with_context(context)
            .map_err(|e| weir::SourceError::Setup {
                source: format!(
                    "kafka group `{}`: cannot create its consumer: {e}",
                    self.group
                )
                .into(),
            })?;
        consumer
            .subscribe(&[self.source.topic()])
            .map_err(|e| weir::SourceError::External {
                what: format!(
                    "kafka group `{}`: cannot subscribe to `{}`",
                    self.group,
                    self.source.topic()
                ),
                source: crate::boxed(e),
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        start_watchdog(&self.group, shared.clone(), stop.clone())?;
        let (group, grace) = (self.group.clone(), self.session_timeout);
        let topic = self.source.topic().to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("weir-group-{group}"))
            .spawn(move || member_loop(&consumer, &flag, &group, grace, &topic))
            .map_err(|e| weir::SourceError::Setup {
                source: format!("kafka group: cannot start its thread: {e}").into(),
            })?;
        Ok(GroupMember {
            stop,
            shared,
            thread: Some(thread),
        })
    }
}

/// Ticks the member's session clock every 50 ms until `stop`, on a thread of its own.
fn start_watchdog(
    group: &str,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> Result<(), weir::SourceError> {
    std::thread::Builder::new()
        .name(format!("weir-group-watchdog-{group}"))
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                shared.tick();
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .map(|_| ())
        .map_err(|e| weir::SourceError::Setup {
            source: format!("kafka group: cannot start its watchdog: {e}").into(),
        })
}

/// The member's thread: polls the group (rebalances run their callbacks in here) until
/// `stop`, restarting failed partition jobs and rejoining after a freeze, then leaves.
fn member_loop(
    consumer: &BaseConsumer<Membership>,
    stop: &AtomicBool,
    group: &str,
    grace: Duration,
    topic: &str,
) {
    let mut restarts = Restarts::default();
    while !stop.load(Ordering::Acquire) {
        // Rebalances run their callbacks in here; the partitions are paused, so no record
        // comes (each partition's job reads with its own consumer).
        stop_if_frozen(consumer);
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            tracing::warn!(group = %group, error = %e, "kafka group member");
        }
        let rejoin = consumer
            .context()
            .shared
            .rejoin
            .swap(false, Ordering::AcqRel);
        let now = Instant::now();
        for p in consumer.context().reap_failed() {
            restarts.failed(p, now);
        }
        if !rejoin {
            // A partition's job failed (fenced by a member resumed after its session ran
            // out, a broker error) while this member holds the partition: it was not frozen
            // past its session, so the group has not moved it. Restarted here, from its
            // newest checkpoint, after a delay that doubles while it keeps failing. (Leaving
            // and joining again instead made both members of such a pair leave at once,
            // which the test broker's coordinator never settled.)
            let assigned: Vec<i32> = consumer
                .assignment()
                .map(|a| a.elements().iter().map(|e| e.partition()).collect())
                .unwrap_or_default();
            for p in restarts.due(now) {
                if assigned.contains(&p) {
                    consumer.context().start_task(p);
                }
            }
        } else {
            restarts.forget();
            rejoin_group(consumer, group, grace, topic);
        }
    }
    leave(consumer);
}

/// Frozen past the session (the member's thread had not polled for that long): the
/// partitions are others' by now. Stops their jobs at once, with no checkpoint, before they
/// write on, and asks for a rejoin.
fn stop_if_frozen(consumer: &BaseConsumer<Membership>) {
    let shared = &consumer.context().shared;
    if shared.frozen() {
        let tasks = std::mem::take(
            &mut *shared
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        consumer
            .context()
            .stop_all(tasks.into_iter().collect(), false);
        shared.rejoin.store(true, Ordering::Release);
    }
}

/// After a freeze past its session: the partitions are others' by now, and what the client
/// has queued is stale. The member leaves and joins again, and the group hands partitions out
/// anew, each moved with a final checkpoint of its current owner.
fn rejoin_group(consumer: &BaseConsumer<Membership>, group: &str, grace: Duration, topic: &str) {
    consumer.unsubscribe();
    // Polled at least until the client has handed back its assignment (the revoke runs in a
    // poll), not only until no job runs here: a member whose jobs were already stopped
    // (frozen) would otherwise subscribe again before its leave was served.
    let deadline = Instant::now() + grace * 2;
    loop {
        let _ = consumer.poll(Duration::from_millis(50));
        let released = consumer
            .assignment()
            .map(|a| a.count() == 0)
            .unwrap_or(true);
        if Instant::now() >= deadline || (released && consumer.context().idle()) {
            break;
        }
    }
    consumer
        .context()
        .shared
        .froze
        .store(false, Ordering::Release);
    if let Err(e) = consumer.subscribe(&[topic]) {
        tracing::error!(group = %group, error = %e, "kafka group: cannot join again");
    }
}

/// Leaving: the revoke checkpoints and stops every partition's job (waited for up to 30 s);
/// what still runs then is stopped with a checkpoint.
fn leave(consumer: &BaseConsumer<Membership>) {
    consumer.unsubscribe();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let _ = consumer.poll(Duration::from_millis(50));
        if consumer.context().idle() {
            break;
        }
    }
    let tasks = std::mem::take(
        &mut *consumer
            .context()
            .shared
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    consumer
        .context()
        .stop_all(tasks.into_iter().collect(), true);
}

/// A running member of a group ([`KafkaGroup::start`]).
pub struct GroupMember {
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GroupMember {
    /// The partitions this member runs now.
    pub fn partitions(&self) -> Vec<i32> {
        self.shared
            .tasks
            .lock()
            .map(|t| t.keys().copied().collect())
            .unwrap_or_default()
    }

    /// What this member did with partitions so far.
    pub fn events(&self) -> Vec<TaskEvent> {
        self.shared
            .events
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// Leaves the group: each partition's job completes a checkpoint and stops, and the
    /// group moves the partitions to the other members. Returns when done.
    pub fn stop(mut self) -> Vec<TaskEvent> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.events()
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Shared {
    tasks: Mutex<BTreeMap<i32, JobHandle>>,
    events: Mutex<Vec<TaskEvent>>,
    /// The last tick of the member's watchdog thread (every 50 ms): a much older value
    /// means the process was frozen (stopped, paused) past its session.
    alive: Mutex<Instant>,
    /// The watchdog saw such a freeze; cleared when the member has joined again.
    froze: AtomicBool,
    /// The session timeout.
    session: Duration,
    /// A rebalance found the member frozen past its session: leave and join again.
    rejoin: AtomicBool,
}

impl Shared {
    /// A member's shared state at its start: no jobs, not frozen.
    fn new(session: Duration) -> Shared {
        Shared {
            tasks: Mutex::new(BTreeMap::new()),
            events: Mutex::new(Vec::new()),
            alive: Mutex::new(Instant::now()),
            froze: AtomicBool::new(false),
            session,
            rejoin: AtomicBool::new(false),
        }
    }

    /// The member was frozen past its session since its last poll: the group has moved
    /// its partitions, and whatever a queued rebalance says is stale.
    fn frozen(&self) -> bool {
        self.froze.load(Ordering::Acquire)
            || self
                .alive
                .lock()
                .map(|at| at.elapsed() > self.session)
                .unwrap_or(false)
    }

    /// The watchdog's tick.
    fn tick(&self) {
        if let Ok(mut at) = self.alive.lock() {
            if at.elapsed() > self.session {
                self.froze.store(true, Ordering::Release);
            }
            *at = Instant::now();
        }
    }
}

/// Starts a partition's job (object-safe, so the consumer context is not generic).
trait TaskRunner: Send + Sync {
    fn start(&self, partition: i32) -> Result<JobHandle, String>;
}

struct Runner<T> {
    lease: Lease,
    source: KafkaSource<T>,
    group: String,
    state_dir: PathBuf,
    config: EnvConfig,
    parallelism: usize,
    build: Build<T>,
}

impl<T: Data> TaskRunner for Runner<T> {
    fn start(&self, partition: i32) -> Result<JobHandle, String> {
        let task = PartitionTask {
            partition,
            job: format!("{}-p{partition}", self.group),
            lease: self.lease.clone(),
        };
        let mut cfg = self.config.clone();
        cfg.default_parallelism = self.parallelism;
        // A failed partition job is not restarted in place (its member may have lost the
        // partition without knowing yet): the member rejoins the group instead.
        cfg.restart = Some(weir::RestartStrategy::None);
        let root = self
            .state_dir
            .join(&self.group)
            .join(format!("p{partition}"));
        let (generation, restore) = generations(&root, &task.job)?;
        cfg.checkpoint.directory = generation;
        cfg.checkpoint.restore_latest = restore.map(RestoreLatest::if_any);
        cfg.checkpoint.restore_from = None;
        let env = Env::with_config(cfg);
        // Its positions are committed (for lag monitoring) under a group of their own: the
        // member group's offsets cannot be committed by a consumer outside it.
        let source = self
            .source
            .clone()
            .only_partitions(vec![partition])
            .group_id(format!("{}-positions", self.group));
        let stream = env
            .kafka_source("source", source)
            .uid("source")
            .set_parallelism(1);
        (self.build)(&env, stream, &task);
        env.start(&task.job).map_err(|e| e.to_string())
    }
}

/// A partition's checkpoints are kept by generation, one per start of its job:
/// `{root}/g{n}`. A start writes into a new generation and restores from the newest one that
/// holds a complete checkpoint, so a member that lost the partition but runs on for a while
/// (a process stopped past its session, then resumed) writes only into its own, older
/// generation, which no later start restores from once a newer one has a checkpoint (and
/// the restore deletes the runs it scanned). Returns the new generation's directory and the
/// one to restore from.
fn generations(root: &std::path::Path, job: &str) -> Result<(PathBuf, Option<PathBuf>), String> {
    std::fs::create_dir_all(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let mut existing: Vec<u64> = std::fs::read_dir(root)
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix('g')?.parse().ok())
        .collect();
    existing.sort_unstable();
    let complete = |g: u64| -> bool {
        let runs = root.join(format!("g{g}")).join(job);
        let Ok(runs) = std::fs::read_dir(runs) else {
            return false;
        };
        runs.filter_map(|r| r.ok()).any(|run| {
            std::fs::read_dir(run.path())
                .map(|chks| {
                    chks.filter_map(|c| c.ok())
                        .any(|c| c.path().join("_metadata").is_file())
                })
                .unwrap_or(false)
        })
    };
    let restore = existing
        .iter()
        .rev()
        .find(|g| complete(**g))
        .map(|g| root.join(format!("g{g}")));
    let mut next = existing.last().map_or(1, |g| g + 1);
    loop {
        let dir = root.join(format!("g{next}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((dir, restore)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => next += 1,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
}

/// When the partition jobs that failed here start again: the first time after
/// [`Restarts::FIRST`], then after twice the delay before while the job keeps failing within
/// [`Restarts::SETTLED`] of its restart, up to [`Restarts::MOST`] (a job that fails at once
/// every time, its broker down, is not started ten times a second, each start a new
/// checkpoint generation).
#[derive(Default)]
struct Restarts {
    /// Partition -> (the delay before its next start, when that start is due).
    waiting: BTreeMap<i32, (Duration, Instant)>,
    /// Partition -> (the delay its last start waited, when it started).
    last: BTreeMap<i32, (Duration, Instant)>,
}

impl Restarts {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(10);
    const SETTLED: Duration = Duration::from_secs(60);

    /// Partition `p`'s job failed at `now`.
    fn failed(&mut self, p: i32, now: Instant) {
        let delay = match self.last.get(&p) {
            Some((d, at)) if now.duration_since(*at) < Self::SETTLED => (*d * 2).min(Self::MOST),
            _ => Self::FIRST,
        };
        self.waiting.insert(p, (delay, now + delay));
    }

    /// The partitions whose start is due at `now` (each returned once).
    fn due(&mut self, now: Instant) -> Vec<i32> {
        let due: Vec<i32> = self
            .waiting
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(p, _)| *p)
            .collect();
        for p in &due {
            if let Some((d, _)) = self.waiting.remove(p) {
                self.last.insert(*p, (d, now));
            }
        }
        due
    }

    /// The member leaves the group: nothing of this is its own any more.
    fn forget(&mut self) {
        self.waiting.clear();
        self.last.clear();
    }
}

/// The group consumer's context: its rebalance callbacks start and stop partition jobs.
struct Membership {
    shared: Arc<Shared>,
    runner: Arc<dyn TaskRunner>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Membership {
    fn event(&self, e: TaskEvent) {
        if let Ok(mut events) = self.shared.events.lock() {
            events.push(e);
        }
    }

    /// Stops partitions' jobs: with `checkpoint`, after one more completed checkpoint of
    /// each (so the new owner starts where this one stopped; all are asked at once, and one
    /// that cannot complete one soon is cancelled anyway: its new owner restores its last),
    /// else at once (the partitions were lost: another member may own them already).
    fn stop_all(&self, jobs: Vec<(i32, JobHandle)>, checkpoint: bool) {
        if checkpoint {
            let before: Vec<Option<u64>> = jobs
                .iter()
                .map(|(_, job)| {
                    let last = job
                        .checkpoint_stats()
                        .and_then(|s| s.last_completed_checkpoint_id);
                    let _ = job.monitor().trigger_checkpoint();
                    last
                })
                .collect();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let done = jobs.iter().zip(&before).all(|((_, job), before)| {
                    job.is_finished()
                        || job
                            .checkpoint_stats()
                            .and_then(|s| s.last_completed_checkpoint_id)
                            > *before
                });
                if done {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for (_, job) in &jobs {
            job.cancel();
        }
        for (partition, job) in jobs {
            let _ = job.wait();
            let at_ms = now_ms();
            self.event(if checkpoint {
                TaskEvent::Stopped { partition, at_ms }
            } else {
                TaskEvent::Lost { partition, at_ms }
            });
        }
    }
}

impl Membership {
    /// Collects the partition jobs that ended (failed: they do not end otherwise) and returns
    /// their partitions.
    fn reap_failed(&self) -> Vec<i32> {
        let ended: Vec<(i32, JobHandle)> = {
            let Ok(mut tasks) = self.shared.tasks.lock() else {
                return Vec::new();
            };
            let ended: Vec<i32> = tasks
                .iter()
                .filter(|(_, j)| j.is_finished())
                .map(|(p, _)| *p)
                .collect();
            ended
                .into_iter()
                .filter_map(|p| tasks.remove(&p).map(|j| (p, j)))
                .collect()
        };
        let mut partitions = Vec::with_capacity(ended.len());
        for (partition, job) in ended {
            let error = job.wait().err().map(|e| e.to_string());
            tracing::warn!(partition, ?error, "kafka group: a partition's job ended");
            self.event(TaskEvent::Failed {
                partition,
                at_ms: now_ms(),
            });
            partitions.push(partition);
        }
        partitions
    }

    /// No partition's job runs here.
    fn idle(&self) -> bool {
        self.shared
            .tasks
            .lock()
            .map(|t| t.is_empty())
            .unwrap_or(true)
    }

    fn start_task(&self, partition: i32) {
        // Checked before each start: the process may freeze in the middle of an
        // assignment's starts, and resume with the partitions another member's.
        if self.shared.frozen() {
            self.shared.rejoin.store(true, Ordering::Release);
            return;
        }
        match self.runner.start(partition) {
            Ok(job) if self.shared.frozen() => {
                self.shared.rejoin.store(true, Ordering::Release);
                self.stop_all(vec![(partition, job)], false);
            }
            Ok(job) => {
                if let Ok(mut tasks) = self.shared.tasks.lock() {
                    tasks.insert(partition, job);
                }
                self.event(TaskEvent::Started {
                    partition,
                    at_ms: now_ms(),
                });
            }
            Err(error) => {
                tracing::error!(partition, %error, "kafka group: cannot start the partition's job")
            }
        }
    }
}

impl ClientContext for Membership {}

impl ConsumerContext for Membership {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let lost = consumer.assignment_lost();
        let jobs: Vec<(i32, JobHandle)> = match self.shared.tasks.lock() {
            Ok(mut tasks) => tpl
                .elements()
                .iter()
                .filter_map(|e| tasks.remove(&e.partition()).map(|j| (e.partition(), j)))
                .collect(),
            Err(_) => Vec::new(),
        };
        self.stop_all(jobs, !lost);
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(tpl) = rebalance else {
            return;
        };
        // The member's own consumer reads nothing: the partitions' jobs do.
        if let Err(e) = consumer.pause(tpl) {
            tracing::warn!(error = %e, "kafka group: cannot pause the assigned partitions");
        }
        // A member frozen past its session (a stopped process, resumed) serves the
        // rebalances queued before it froze: that assignment is stale, the partitions are
        // another member's by now, and jobs started here would fence theirs. Start nothing;
        // the member leaves and joins again.
        if self.shared.frozen() {
            tracing::warn!("kafka group: a stale assignment (the member was frozen past its session); joining again");
            self.shared.rejoin.store(true, Ordering::Release);
            return;
        }
        // Side by side: each start restores the partition's checkpoint and fences the
        // previous owner's transactional ids (aborting what a dead member left open), and a
        // dead member's partitions should all be fenced as soon as they are assigned.
        let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
        std::thread::scope(|s| {
            for p in partitions {
                s.spawn(move || self.start_task(p));
            }
        });
    }
}

impl<T> KafkaSource<T> {
    /// Reads only these partitions (shared among the subtasks by position: the `i`-th
    /// listed goes to subtask `i % parallelism`).
    pub fn only_partitions(mut self, partitions: Vec<i32>) -> Self {
        self.only = Some(partitions);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_keeps_failing_waits_twice_as_long_each_time_up_to_the_most() {
        let t0 = Instant::now();
        let mut r = Restarts::default();
        r.failed(3, t0);
        assert!(r.due(t0).is_empty(), "not at once");
        let mut at = t0 + Restarts::FIRST;
        assert_eq!(r.due(at), vec![3]);
        assert!(r.due(at).is_empty(), "once");
        let mut waited = Vec::new();
        for _ in 0..10 {
            r.failed(3, at);
            let (delay, due) = r.waiting[&3];
            waited.push(delay);
            at = due;
            assert_eq!(r.due(at), vec![3]);
        }
        assert_eq!(waited[0], Restarts::FIRST * 2);
        assert_eq!(waited[1], Restarts::FIRST * 4);
        assert_eq!(*waited.last().unwrap(), Restarts::MOST);
        // Failing again after running a while starts over; other partitions are their own.
        r.failed(3, at + Restarts::SETTLED);
        assert_eq!(r.waiting[&3].0, Restarts::FIRST);
        r.failed(5, at);
        assert_eq!(r.waiting[&5].0, Restarts::FIRST);
        r.forget();
        assert!(r.due(at + Restarts::MOST * 2).is_empty());
    }
}
