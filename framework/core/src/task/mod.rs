//! The subtask actor: one running instance of a chain of operators, with a two-lane mailbox.
//!
//! - **System lane**: the actor's actix mailbox (`Addr`), unbounded for control mail
//!   ([`Ping`], [`Stop`]). actix drains it completely before it polls anything else.
//! - **Data lane**: the bounded input channels (or, for a source, its reader), driven by
//!   [`DataLane`], a future spawned in the actor's context that does **one unit of work** (one
//!   input batch, or one source batch) per poll, then wakes itself and yields. So between any
//!   two batches actix serves the whole system lane: a control mail waits for at most the
//!   batch in progress, whatever is queued on the data lane.
//!
//! Before it takes new input the lane moves every output batch waiting for credit into its
//! channel; while one has no credit the subtask takes no input (backpressure). Partial output
//! batches are flushed when the subtask finds no input (idle) and after `linger` while busy.
//!
//! A subtask reports to its job exactly once: finished, failed (with the operator uid and
//! subtask of the cause), or lost (dropped without either, e.g. its arbiter stopped). This
//! module owns the actor and its data lane; what one unit of work is, `driver`; the system
//! lane's mail and its handlers, `mail`. Operators (`operator`), gates (`gate`) and channels
//! (`channel`) are elsewhere.

mod driver;
mod fair;
mod mail;

use driver::Work;
pub(crate) use driver::{AlignmentSettings, Driver};
pub(crate) use mail::{
    AbortCheckpoint, Configure, NotifyComplete, Ping, Resume, Sample, SetAlignment, SetRate,
    SnapshotState, Stop, TriggerCheckpoint, ValidateConfig,
};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use crate::sync::AtomicWaker;
use actix::prelude::*;
use futures::channel::mpsc::UnboundedSender;

use crate::checkpoint::coordinator::{AckPart, StateFile, Taken};
use crate::checkpoint::store::SnapshotEnvelope;
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::event::{JobEvent, SubtaskId};
use crate::metrics::{SubtaskCounters, SubtaskSample, TimeAccount, WaitState};
use crate::sync::Arc;
use crate::sync::{lock, Mutex};

/// What a poll of the data lane says: whether the subtask is done (or failed), and what it
/// waits for next.
type DataPoll = (Poll<Result<(), TaskError>>, WaitState);

/// The actor of one subtask.
pub(crate) struct SubtaskActor {
    id: SubtaskId,
    driver: Driver,
    draining: bool,
    events: UnboundedSender<JobEvent>,
    counters: Arc<SubtaskCounters>,
    rx_waker: Arc<AtomicWaker>,
    linger: Duration,
    last_flush: Instant,
    reported: bool,
    time: TimeAccount,
    /// The data lane woke itself for its next poll (see `wakes`).
    ran_on: bool,
    /// State writes under way (see `write_and_ack`): joined when the actor goes, so that a
    /// job's checkpoint files are all written when it returns.
    writes: Vec<std::thread::JoinHandle<()>>,
    /// Set when the actor goes (see `StateWrite::chains`).
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How long the last aligned snapshot stopped the data path (reported with its ack).
    sync_took: Duration,
    spin: Spin,
    sample: Arc<Mutex<SubtaskSample>>,
    throttle: Option<Pin<Box<actix_rt::time::Sleep>>>,
    /// The source is idle ([`SourceStatus::Idle`](crate::source::SourceStatus::Idle)): poll
    /// it again when its waker is woken, or when this timer (if any) fires.
    source_idle: Option<Option<Pin<Box<actix_rt::time::Sleep>>>>,
    /// Where checkpoint state files go (checkpoints on).
    checkpoint_dir: Option<std::path::PathBuf>,
    /// The object store the state files also go to (the checkpoint directory is a URL).
    remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
    /// A source paused after a rescale's barrier ([`Resume`] wakes it).
    paused: bool,
    pause_waker: Option<std::task::Waker>,
}

impl SubtaskActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: SubtaskId,
        driver: Driver,
        events: UnboundedSender<JobEvent>,
        counters: Arc<SubtaskCounters>,
        rx_waker: Arc<AtomicWaker>,
        linger: Duration,
        sample: Arc<Mutex<SubtaskSample>>,
        checkpoint_dir: Option<std::path::PathBuf>,
        remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
    ) -> Self {
        let now = Instant::now();
        SubtaskActor {
            paused: false,
            pause_waker: None,
            time: TimeAccount::new(now),
            ran_on: false,
            writes: Vec::new(),
            stopping: Default::default(),
            sync_took: Duration::ZERO,
            spin: Spin::default(),
            sample,
            throttle: None,
            source_idle: None,
            checkpoint_dir,
            remote,
            id,
            driver,
            draining: false,
            events,
            counters,
            rx_waker,
            linger,
            last_flush: now,
            reported: false,
        }
    }

    fn report(&mut self, event: JobEvent) {
        self.reported = true;
        // The job may already be gone (it stops listening once it has a verdict).
        let _ = self.events.unbounded_send(event);
    }

    /// The data lane has more to do: it wakes itself (not counted as a wake-up).
    fn run_on(&mut self, cx: &mut TaskContext<'_>) {
        self.ran_on = true;
        cx.waker().wake_by_ref();
    }

    /// One poll of the data lane: at most one unit of work. Says what the subtask waits for
    /// next, for the time accounting.
    fn poll_data(&mut self, cx: &mut TaskContext<'_>, now: Instant) -> DataPoll {
        if let Some(waits) = self.before_step(cx) {
            return waits;
        }
        let work = self.driver.step(cx, now, &self.rx_waker, &self.counters);
        if !matches!(work, Ok(Work::Idle)) {
            self.spin.found_work(now);
        }
        self.after_step(cx, now, work)
    }

    /// What comes before a step of the data lane, and what keeps it from one: a throttled
    /// source's pause, a barrier that overtook the queues (taken first, whatever waits for
    /// credit), output waiting for credit, the drained end, a pause, an idle source's wait.
    /// `None`: the lane may step.
    #[inline]
    fn before_step(&mut self, cx: &mut TaskContext<'_>) -> Option<DataPoll> {
        if let Some(sleep) = self.throttle.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Some((Poll::Pending, WaitState::Idle));
            }
            self.throttle = None;
        }
        // A barrier that overtook the queues is taken first, whatever waits for credit.
        match self.driver.overtake() {
            Err(e) => return Some((Poll::Ready(Err(e)), WaitState::Busy)),
            Ok(Some(Work::Checkpointed {
                id,
                writer,
                took,
                persisted,
            })) => return Some(self.unaligned_done(cx, id, writer, took, persisted)),
            Ok(_) => {}
        }
        match self.driver.poll_pending(cx) {
            Poll::Pending => {
                // Woken by an input too, and looked at once more: a barrier that overtakes
                // the queues is taken while the output waits for credit.
                self.rx_waker.register(cx.waker());
                if self.driver.overtaking_waits() {
                    self.run_on(cx);
                    return Some((Poll::Pending, WaitState::Busy));
                }
                self.driver.release_inputs();
                return Some((Poll::Pending, WaitState::BackPressured));
            }
            Poll::Ready(Err(e)) => return Some((Poll::Ready(Err(e)), WaitState::Busy)),
            Poll::Ready(Ok(())) => {}
        }
        if self.draining {
            return Some((Poll::Ready(Ok(())), WaitState::Busy));
        }
        if self.paused {
            self.pause_waker = Some(cx.waker().clone());
            return Some((Poll::Pending, WaitState::Idle));
        }
        // After the output moved (an idle source's flushed batch, a checkpoint barrier sent
        // from the system lane still go out while it waits).
        if let Some(timer) = self.source_idle.as_mut() {
            let woken = self.driver.source_woken(cx);
            let due = woken
                || timer
                    .as_mut()
                    .is_some_and(|t| t.as_mut().poll(cx).is_ready());
            if !due {
                return Some((Poll::Pending, WaitState::Idle));
            }
            self.source_idle = None;
        }
        None
    }

    /// The data lane after a step that did `work`: flushes as its linger and its sources
    /// say, takes an aligned checkpoint's states, and runs on or parks.
    #[inline]
    fn after_step(
        &mut self,
        cx: &mut TaskContext<'_>,
        now: Instant,
        work: Result<Work, TaskError>,
    ) -> DataPoll {
        match work {
            Err(e) => (Poll::Ready(Err(e)), WaitState::Busy),
            Ok(Work::Idle) => {
                self.last_flush = now;
                if self.spin.go_on(now) {
                    // Input has been coming within microseconds: look again after the
                    // arbiter's other work rather than park (a park and a wake cost more).
                    self.run_on(cx);
                } else {
                    self.driver.release_inputs();
                }
                (Poll::Pending, WaitState::Idle)
            }
            Ok(Work::Progress) => {
                if now.duration_since(self.last_flush) >= self.linger {
                    self.driver.flush();
                    self.last_flush = now;
                }
                if now.elapsed() >= fair::LONG_UNIT {
                    // A long unit: the next turn queues behind other threads' wakes.
                    self.ran_on = true;
                    fair::wake_behind_remote(cx.waker());
                } else {
                    self.run_on(cx);
                }
                (Poll::Pending, WaitState::Busy)
            }
            Ok(Work::Throttled(d)) => {
                // Nothing more comes from this source for a while: send what is buffered.
                self.driver.flush();
                self.last_flush = now;
                self.throttle = Some(Box::pin(actix_rt::time::sleep(d)));
                self.run_on(cx);
                (Poll::Pending, WaitState::Idle)
            }
            Ok(Work::SourceIdle(until)) => {
                // Nothing to read for now: send what is buffered, then wait without polling.
                self.driver.flush();
                self.last_flush = now;
                self.source_idle = Some(until.map(|d| Box::pin(actix_rt::time::sleep(d))));
                // Once more through the gate above, which arms the timer and the waker.
                self.run_on(cx);
                (Poll::Pending, WaitState::Idle)
            }
            Ok(Work::Ended) => {
                self.draining = true;
                self.run_on(cx);
                (Poll::Pending, WaitState::Busy)
            }
            Ok(Work::Checkpointed {
                id,
                writer,
                took,
                persisted,
            }) => self.unaligned_done(cx, id, writer, took, persisted),
            Ok(Work::Aligned(id)) => {
                let hand_over = self.driver.hands_over(id);
                let root = self.checkpoint_dir.as_deref();
                let started = Instant::now();
                match self.driver.snapshot_aligned(id, hand_over, root) {
                    Ok((w, alignment, taken)) => {
                        self.sync_took = started.elapsed();
                        self.write_and_ack(id, w, alignment, Duration::ZERO, taken)
                    }
                    Err(e) => self.decline(id, e),
                }
                self.run_on(cx);
                (Poll::Pending, WaitState::Busy)
            }
        }
    }

    /// An unaligned checkpoint is complete here with its channel state: written and
    /// acknowledged; the lane goes on.
    fn unaligned_done(
        &mut self,
        cx: &mut TaskContext<'_>,
        id: u64,
        writer: StateWriter,
        took: Duration,
        persisted: u64,
    ) -> (Poll<Result<(), TaskError>>, WaitState) {
        self.write_and_ack(
            id,
            writer,
            took,
            Duration::ZERO,
            Taken::Unaligned { persisted },
        );
        self.run_on(cx);
        (Poll::Pending, WaitState::Busy)
    }

    /// Writes this subtask's states for checkpoint `id` and acknowledges it.
    fn write_and_ack(
        &mut self,
        id: u64,
        w: StateWriter,
        alignment: Duration,
        start_delay: Duration,
        taken: Taken,
    ) {
        let Some(root) = self.checkpoint_dir.clone() else {
            return;
        };
        let Some(Envelopes {
            envelopes,
            deferred,
            chains,
            payloads,
        }) = self.envelopes(id, w)
        else {
            return;
        };
        let write = StateWrite {
            root,
            remote: self.remote.clone(),
            id,
            attempt: self.id.attempt,
            actor: self.id.actor,
            head_uid: self.id.head_uid.clone(),
            subtask: self.id.subtask,
            events: self.events.clone(),
            envelopes,
            deferred,
            chains,
            stopping: self.stopping.clone(),
            payloads,
            part: AckPart {
                files: Vec::new(),
                alignment,
                start_delay,
                taken,
                sync: std::mem::take(&mut self.sync_took),
                asynchronous: Duration::ZERO,
                vertex: self.id.head_uid.as_str().into(),
                subtask: self.id.subtask,
            },
            started: Instant::now(),
        };
        self.spawn_write(write);
    }

    /// The envelopes of the states in `w` for checkpoint `id`, with those made later (off the
    /// data path) or handed later (chains of runs) by index, and the payloads handed over in
    /// memory. A deferred payload needed now that cannot be made declines the checkpoint:
    /// `None`.
    fn envelopes(&mut self, id: u64, w: StateWriter) -> Option<Envelopes> {
        let hand_over = w.hand_over;
        let mut payloads = Vec::new();
        let mut envelopes = Vec::with_capacity(w.entries.len());
        let mut deferred = Vec::new();
        let mut chains = Vec::new();
        for mut e in w.entries {
            if let Some(c) = e.chain.take() {
                // Only a checkpoint that is not handed over is written incrementally.
                chains.push((envelopes.len(), c));
            }
            if let Some(d) = e.deferred.take() {
                if hand_over {
                    // Needed now: made here (the gate does not defer such checkpoints).
                    match (d.0)() {
                        Ok(p) => e.payload = p,
                        Err(reason) => {
                            let reason = format!("cannot make the state of `{}`: {reason}", e.uid);
                            tracing::warn!(uid = %self.id.head_uid, subtask = self.id.subtask, checkpoint = id, %reason, "checkpoint declined");
                            let _ = self.events.unbounded_send(JobEvent::Declined {
                                attempt: self.id.attempt,
                                id,
                                reason,
                            });
                            return None;
                        }
                    }
                } else {
                    deferred.push((envelopes.len(), d));
                }
            }
            if hand_over {
                payloads.push((e.uid.clone(), e.payload.clone()));
            }
            envelopes.push(SnapshotEnvelope {
                format_version: crate::checkpoint::store::FORMAT_VERSION,
                uid: e.uid,
                subtask: self.id.subtask,
                checkpoint_id: id,
                key_groups: e.key_groups,
                payload_crc32: Some(crc32fast::hash(&e.payload)),
                payload: e.payload,
                chain: None,
            });
        }
        Some(Envelopes {
            envelopes,
            deferred,
            chains,
            payloads,
        })
    }

    /// Runs `write` on a thread of its own (Flink's asynchronous phase), or here if no thread
    /// can be started.
    fn spawn_write(&mut self, write: StateWrite) {
        // Flink's asynchronous phase: the states are taken (by write_and_ack, on the data
        // path); writing and syncing them to disk happens beside it, and the acknowledgement
        // follows the write. A synced write can take tens of ms on a slow disk, all of it lost to the
        // records otherwise. If no thread can be started, the write is done here.
        let pending = std::sync::Arc::new(std::sync::Mutex::new(Some(write)));
        let theirs = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-state-write".into())
            .spawn(move || {
                if let Some(w) = theirs.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    w.run();
                }
            });
        match spawned {
            Ok(handle) => {
                self.writes.retain(|h| !h.is_finished());
                self.writes.push(handle);
            }
            Err(_) => {
                if let Some(w) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    if w.chains.is_empty() {
                        w.run();
                    } else {
                        // Waiting here for state this same thread has yet to copy would hang.
                        w.decline("no thread to write an incremental state on".into());
                    }
                }
            }
        }
    }

    /// Checkpoint `id` could not be taken here. A panic of user code (a sink's pre-commit, an
    /// operator's snapshot hook) fails the subtask like any panic; anything else declines the
    /// checkpoint and the coordinator decides.
    fn decline(&mut self, id: u64, e: TaskError) {
        if matches!(e, TaskError::Panic { .. }) {
            self.report(JobEvent::Failed {
                attempt: self.id.attempt,
                actor: self.id.actor,
                epoch: self.id.epoch,
                error: e,
            });
            return;
        }
        let reason = format!("{e:?}");
        tracing::warn!(uid = %self.id.head_uid, subtask = self.id.subtask, checkpoint = id, %reason, "checkpoint declined");
        let _ = self.events.unbounded_send(JobEvent::Declined {
            attempt: self.id.attempt,
            id,
            reason,
        });
    }

    /// Charges the time so far and writes a sample for the job to read.
    fn take_sample(&mut self, mailbox_latency: Duration) {
        let now = Instant::now();
        self.time.charge(now);
        let (input, input_records) = self.driver.input_usage();
        let output = self.driver.output_usage();
        let mut slot = lock(&self.sample);
        *slot = SubtaskSample {
            busy: self.time.busy,
            idle: self.time.idle,
            back_pressured: self.time.back_pressured,
            input,
            input_records,
            output,
            mailbox_latency,
            input_watermarks: self.driver.input_watermarks(),
            back_pressured_now: self.time.state() == WaitState::BackPressured,
            at: Some(now),
            wakes: self
                .counters
                .head
                .wakes
                .load(crate::sync::atomic::Ordering::Relaxed),
        };
    }
}

impl Actor for SubtaskActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::debug!(uid = %self.id.head_uid, subtask = self.id.subtask, "subtask started");
        ctx.spawn(DataLane);
    }
}

/// A subtask's states for a checkpoint, as `SubtaskActor::write_and_ack` hands them to
/// their write.
struct Envelopes {
    envelopes: Vec<SnapshotEnvelope>,
    /// Envelopes whose payload is made by the write, off the data path (by index).
    deferred: Vec<(usize, crate::checkpoint::DeferredPayload)>,
    /// Envelopes whose state is a chain of runs (by index).
    chains: Vec<(usize, crate::checkpoint::incremental::ChainPart)>,
    /// uid -> payload, of a checkpoint handed over in memory.
    payloads: Vec<(String, Vec<u8>)>,
}

/// A subtask's part of a checkpoint, taken and not yet on disk: written and acknowledged
/// off the data path (see `SubtaskActor::write_and_ack`).
struct StateWrite {
    root: std::path::PathBuf,
    /// The object store the files also go to, before the acknowledgement.
    remote: Option<std::sync::Arc<crate::checkpoint::remote::Remote>>,
    id: u64,
    attempt: u64,
    actor: usize,
    head_uid: String,
    subtask: usize,
    events: UnboundedSender<JobEvent>,
    envelopes: Vec<SnapshotEnvelope>,
    /// Envelopes whose payload is made here, off the data path (by index).
    deferred: Vec<(usize, crate::checkpoint::DeferredPayload)>,
    /// Envelopes whose state is a chain of runs, known once their operator has handed it.
    chains: Vec<(usize, crate::checkpoint::incremental::ChainPart)>,
    /// The subtask's actor is going: a chain still being handed never will be.
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    payloads: Vec<(String, Vec<u8>)>,
    part: AckPart,
    /// When the states were taken (the asynchronous part starts).
    started: Instant,
}

impl StateWrite {
    /// Puts state file `file` of this checkpoint and the runs it references (each run once)
    /// on the object store, if the checkpoints go to one.
    fn upload(
        &self,
        file: &str,
        runs: &[String],
    ) -> Result<(), crate::checkpoint::store::CheckpointError> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        // A subtask that is going gives up waiting for the store (its actor joins this).
        let stopping = self.stopping.clone();
        let give_up = move || stopping.load(std::sync::atomic::Ordering::Acquire);
        for run in runs {
            remote.upload_once(&self.root.join(run), &give_up)?;
        }
        let dir = crate::checkpoint::store::checkpoint_dir(&self.root, self.id);
        remote.upload(&dir.join(file), &give_up)
    }

    /// The checkpoint cannot be written here: declined, naming why.
    fn decline(&self, reason: String) {
        tracing::warn!(uid = %self.head_uid, subtask = self.subtask, checkpoint = self.id, %reason, "cannot write checkpoint state");
        let _ = self.events.unbounded_send(JobEvent::Declined {
            attempt: self.attempt,
            id: self.id,
            reason,
        });
    }

    /// Writes every state file, then acknowledges the checkpoint, or declines it naming the
    /// write that failed.
    fn run(mut self) {
        for (i, make) in std::mem::take(&mut self.deferred) {
            let Some(env) = self.envelopes.get_mut(i) else {
                continue;
            };
            match (make.0)() {
                Ok(payload) => {
                    env.payload_crc32 = Some(crc32fast::hash(&payload));
                    env.payload = payload;
                }
                Err(reason) => {
                    let reason = format!("cannot make the state of `{}`: {reason}", env.uid);
                    return self.decline(reason);
                }
            }
        }
        let mut sizes: Vec<Option<(u64, u64)>> = vec![None; self.envelopes.len()];
        for (i, part) in std::mem::take(&mut self.chains) {
            let stopping = self.stopping.clone();
            let waited = part.wait(&move || stopping.load(std::sync::atomic::Ordering::Acquire));
            let Some(env) = self.envelopes.get_mut(i) else {
                continue;
            };
            match waited {
                Ok(chain) => {
                    sizes[i] = Some((chain.written, chain.size()));
                    env.chain = Some(chain.runs);
                }
                Err(reason) => {
                    let reason = format!("cannot write the state of `{}`: {reason}", env.uid);
                    return self.decline(reason);
                }
            }
        }
        for (env, sizes) in std::mem::take(&mut self.envelopes).into_iter().zip(sizes) {
            let runs: Vec<String> = env.chain.iter().flatten().map(|r| r.file.clone()).collect();
            match crate::checkpoint::store::write_state(&self.root, &env) {
                Ok((file, size)) => {
                    if let Err(e) = self.upload(&file, &runs) {
                        return self.decline(e.to_string());
                    }
                    let (written, state_size) =
                        sizes.map_or((size, size), |(w, s)| (w + size, s + size));
                    self.part.files.push(StateFile {
                        uid: env.uid,
                        subtask: env.subtask,
                        file,
                        size: written,
                        state_size,
                        runs,
                    })
                }
                Err(err) => return self.decline(err.to_string()),
            }
        }
        self.part.asynchronous = self.started.elapsed();
        let _ = self.events.unbounded_send(JobEvent::Ack {
            attempt: self.attempt,
            id: self.id,
            actor: self.actor,
            payloads: self.payloads,
            part: self.part,
        });
    }
}

impl Drop for SubtaskActor {
    fn drop(&mut self) {
        // A state write waiting for this subtask's operators to hand a chain gives up.
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        for w in self.writes.drain(..) {
            let _ = w.join();
        }
        if !self.reported {
            let event = JobEvent::Lost {
                attempt: self.id.attempt,
                actor: self.id.actor,
                epoch: self.id.epoch,
                uid: self.id.head_uid.clone(),
                subtask: self.id.subtask,
                reason: "the subtask's actor stopped before its input ended".into(),
            };
            let _ = self.events.unbounded_send(event);
        }
    }
}

/// Whether an idle subtask spins (polls again after its arbiter's other work) before it parks.
///
/// A consumer a little faster than its producer finds its input empty after nearly every
/// batch; parking then costs a thread hand-off per batch (the producer's wake, the
/// scheduler's switch), which on a throughput-bound pipeline was half the CPU time. So while
/// the recent gaps between finding the input empty and finding work again are short (a
/// moving average under [`SPIN_LIMIT`]), the subtask looks again for up to that long before
/// it parks. When the gaps are long (a quiet input) it parks at once: spinning would only
/// burn a core. The spin yields to the arbiter between looks, so subtasks sharing the thread,
/// and the system lane, are served as usual.
#[derive(Debug, Default)]
struct Spin {
    /// When the subtask last found no work (and has found none since).
    idle_since: Option<Instant>,
    /// Moving average of the idle gaps, ns.
    gap_ns: u64,
}

/// The longest an idle subtask spins, and the longest average idle gap it spins for.
const SPIN_LIMIT: Duration = Duration::from_micros(50);

impl Spin {
    /// The subtask found work at `now`: closes the idle gap, if one was open.
    #[inline]
    fn found_work(&mut self, now: Instant) {
        if let Some(since) = self.idle_since.take() {
            let gap = now.saturating_duration_since(since).as_nanos() as u64;
            self.gap_ns = (self.gap_ns * 3 + gap) / 4;
        }
    }

    /// The subtask found no work at `now`: whether to look again rather than park.
    #[inline]
    fn go_on(&mut self, now: Instant) -> bool {
        let since = *self.idle_since.get_or_insert(now);
        let limit = SPIN_LIMIT.as_nanos() as u64;
        self.gap_ns <= limit && now.saturating_duration_since(since) < SPIN_LIMIT
    }
}

/// The data lane of a subtask (see the module doc).
struct DataLane;

impl ActorFuture<SubtaskActor> for DataLane {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut SubtaskActor,
        ctx: &mut Context<SubtaskActor>,
        task: &mut TaskContext<'_>,
    ) -> Poll<()> {
        if crate::fault::arbiter_stopping() {
            // Frozen until the arbiter's loop ends and drops this actor (a fault injected
            // in a test stopped it).
            return Poll::Pending;
        }
        let t0 = Instant::now();
        // Polled without having woken itself: woken from parked, a hand-off.
        if !std::mem::take(&mut act.ran_on) {
            act.counters
                .head
                .wakes
                .fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
        }
        act.time.switch(t0, WaitState::Busy);
        act.counters.enter_poll(t0);
        let (poll, next) = act.poll_data(task, t0);
        act.counters.leave_poll();
        act.time.switch(Instant::now(), next);
        match poll {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => {
                tracing::debug!(uid = %act.id.head_uid, subtask = act.id.subtask, "subtask finished");
                act.report(JobEvent::Finished {
                    attempt: act.id.attempt,
                    actor: act.id.actor,
                    epoch: act.id.epoch,
                });
                // The actor stays until the job ends: a finished source still answers
                // checkpoint triggers (with its end position).
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(uid = %act.id.head_uid, subtask = act.id.subtask, error = ?e, "subtask failed");
                act.report(JobEvent::Failed {
                    attempt: act.id.attempt,
                    actor: act.id.actor,
                    epoch: act.id.epoch,
                    error: e,
                });
                ctx.stop();
                Poll::Ready(())
            }
        }
    }
}

/// What a subtask says about itself when pinged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubtaskStatus {
    /// Uid of the chain's first operator.
    pub head_uid: String,
    /// Subtask index.
    pub subtask: usize,
    /// Input batches processed so far (source: batches read).
    pub batches_processed: u64,
    /// Batches waiting in the data lane now.
    pub input_queued: usize,
    /// Capacity of the data lane, in batches.
    pub input_capacity: usize,
    /// System mails handled so far, this one included.
    pub mails_handled: u64,
}
