//! The checkpoint coordinator's decisions, as a plain struct with time passed in: when to
//! trigger, which acknowledgements a checkpoint still waits for, when it completes, times out
//! or fails the job. The job routes its mails and writes `_metadata`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::CheckpointConfig;

/// A state file reported by a subtask for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateFile {
    pub(crate) uid: String,
    pub(crate) subtask: usize,
    pub(crate) file: String,
    /// Bytes written for this checkpoint (Flink's `checkpointed_size`).
    pub(crate) size: u64,
    /// Bytes of the state it covers: `size`, or an incremental state's whole chain.
    pub(crate) state_size: u64,
    /// The runs an incremental state references (`shared/..`).
    pub(crate) runs: Vec<String>,
}

struct Pending {
    started: Instant,
    waiting: HashSet<usize>,
    files: Vec<StateFile>,
    max_alignment: Duration,
    /// The largest start delay any subtask reported for it.
    max_start_delay: Duration,
    /// A subtask with inputs aligned its barriers (so the checkpoint is not at-least-once).
    aligned: bool,
    /// Subtasks with inputs that acknowledged.
    with_inputs: usize,
}

impl Pending {
    /// A subtask took its part as `taken`: counts it among those with inputs, and as aligned
    /// (exactly once). Returns the in-flight data it persisted (an unaligned part's).
    fn count_taken(&mut self, taken: Taken) -> u64 {
        match taken {
            Taken::Source => 0,
            Taken::Aligned => {
                self.aligned = true;
                self.with_inputs += 1;
                0
            }
            Taken::AtLeastOnce => {
                self.with_inputs += 1;
                0
            }
            Taken::Unaligned { persisted } => {
                self.aligned = true;
                self.with_inputs += 1;
                persisted
            }
        }
    }
}

/// What failing a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// It was not in progress (already completed, failed or abandoned): nothing changed.
    NotPending,
    /// Failed, `in_a_row` in a row within the tolerance.
    Tolerated { in_a_row: u32 },
    /// Failed, `in_a_row` in a row: more than tolerated, the job must fail.
    TooMany { in_a_row: u32 },
}

/// A checkpoint every subtask acknowledged.
#[derive(Debug)]
pub(crate) struct Completed {
    pub(crate) id: u64,
    pub(crate) files: Vec<StateFile>,
    pub(crate) duration: Duration,
    /// Bytes of state it covers.
    pub(crate) size: u64,
    /// Bytes written for it (less than `size` when incremental).
    pub(crate) checkpointed_size: u64,
}

/// Checkpoint metrics with Flink's names.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct CheckpointStats {
    /// `numberOfCompletedCheckpoints`.
    pub number_of_completed_checkpoints: u64,
    /// `numberOfFailedCheckpoints`.
    pub number_of_failed_checkpoints: u64,
    /// `numberOfInProgressCheckpoints`.
    pub number_of_in_progress_checkpoints: u64,
    /// `lastCheckpointDuration`, ms.
    pub last_checkpoint_duration_ms: u64,
    /// `lastCheckpointSize`, bytes: the state the last checkpoint covers.
    pub last_checkpoint_size: u64,
    /// `lastCheckpointFullSize`'s counterpart: bytes written for the last checkpoint
    /// (less than `last_checkpoint_size` when incremental).
    pub last_checkpointed_size: u64,
    /// `checkpointAlignmentTime` of the last checkpoint (largest over subtasks), ms.
    pub checkpoint_alignment_time_ms: u64,
    /// `checkpointStartDelayNanos` of the last checkpoint (largest over subtasks).
    pub checkpoint_start_delay_nanos: u64,
    /// Id of the last completed checkpoint.
    pub last_completed_checkpoint_id: Option<u64>,
    /// `numRestarts`.
    pub num_restarts: u64,
    /// Id of the checkpoint the job last restored (after a failure, or a savepoint at start).
    pub last_restored_checkpoint_id: Option<u64>,
    /// The most recent checkpoints, oldest first (at most [`HISTORY`]), in progress included.
    pub history: Vec<CheckpointRecord>,
    /// Over every completed checkpoint: end-to-end duration (ms) and size (bytes).
    pub completed_summary: Option<CheckpointSummary>,
}

/// How many recent checkpoints [`CheckpointStats::history`] keeps (Flink's default
/// `web.checkpoints.history`).
pub const HISTORY: usize = 10;

/// Where a checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStatus {
    /// Triggered, waiting for acknowledgements.
    InProgress,
    /// Every subtask acknowledged it and its metadata is written.
    Completed,
    /// Timed out, declined, subsumed or aborted.
    Failed,
}

/// One checkpoint of [`CheckpointStats::history`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CheckpointRecord {
    /// Its id.
    pub id: u64,
    /// Where it is.
    pub status: CheckpointStatus,
    /// Taken for a savepoint.
    pub is_savepoint: bool,
    /// When it was triggered, ms since the Unix epoch.
    pub trigger_timestamp_ms: u64,
    /// When the last acknowledgement came, ms since the Unix epoch.
    pub latest_ack_timestamp_ms: Option<u64>,
    /// Trigger to completion (or to now, or to failure), ms.
    pub end_to_end_duration_ms: u64,
    /// Bytes of state it covers (Flink's `state_size`): what restoring it reads.
    pub state_size: u64,
    /// Bytes written for it (Flink's `checkpointed_size`): `state_size` unless incremental,
    /// where only what changed (and now and then a merged base) is written.
    pub checkpointed_size: u64,
    /// Subtasks that take part.
    pub num_subtasks: usize,
    /// Subtasks that acknowledged it.
    pub num_acknowledged_subtasks: usize,
    /// The longest barrier alignment of a subtask, ms.
    pub alignment_ms: u64,
    /// The longest start delay of a subtask (from the trigger to the barrier reaching it), ms.
    pub start_delay_ms: u64,
    /// Why it failed.
    pub failure_message: Option<String>,
    /// A subtask took its part unaligned, storing in-flight data (Flink's `is_unaligned`).
    pub is_unaligned: bool,
    /// Every subtask with inputs took its part without aligning barriers (`AT_LEAST_ONCE`).
    pub at_least_once: bool,
    /// Bytes of in-flight data stored by unaligned parts (Flink's `persisted_data`).
    pub persisted_data: u64,
    /// The longest synchronous part of a subtask (its data path stopped to take its states
    /// at the barrier; Flink's `sync_duration`), µs.
    pub sync_duration_us: u64,
    /// The longest asynchronous part of a subtask (its states copied, encoded and written off
    /// the data path; Flink's `async_duration`), ms.
    pub async_duration_ms: u64,
    /// Each acknowledgement so far, in the order they came (Flink's per-subtask checkpoint
    /// statistics).
    pub subtasks: Vec<SubtaskCheckpoint>,
}

/// One subtask's part of a checkpoint, from its acknowledgement
/// ([`CheckpointRecord::subtasks`]; Flink's `/checkpoints/details/{cid}/subtasks/{vid}`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubtaskCheckpoint {
    /// The uid of its vertex (the first operator of its chain).
    pub vertex: String,
    /// Its index in the vertex.
    pub subtask: usize,
    /// When its acknowledgement came, ms since the Unix epoch.
    pub ack_timestamp_ms: u64,
    /// Trigger to its acknowledgement, ms.
    pub end_to_end_duration_ms: u64,
    /// Bytes of state its files cover.
    pub state_size: u64,
    /// Bytes it wrote for this checkpoint.
    pub checkpointed_size: u64,
    /// Its data path stopped to take its states, µs.
    pub sync_duration_us: u64,
    /// Its states written off the data path, ms.
    pub async_duration_ms: u64,
    /// Its barrier alignment, ms (0 when unaligned or a source).
    pub alignment_ms: u64,
    /// From the trigger to the barrier reaching it, ms.
    pub start_delay_ms: u64,
    /// It took its part unaligned.
    pub unaligned: bool,
    /// Bytes of in-flight data it stored (unaligned).
    pub persisted_data: u64,
}

/// How a subtask took its part of a checkpoint, as it reports in its acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A source: nothing to align.
    Source,
    /// Barriers aligned (exactly-once).
    Aligned,
    /// Barriers counted but not aligned (at-least-once).
    AtLeastOnce,
    /// Unaligned, with this many bytes of in-flight data stored.
    Unaligned { persisted: u64 },
}

/// One subtask's acknowledgement of a checkpoint.
#[derive(Debug)]
pub(crate) struct AckPart {
    pub(crate) files: Vec<StateFile>,
    pub(crate) alignment: Duration,
    pub(crate) start_delay: Duration,
    pub(crate) taken: Taken,
    /// Time the subtask's data path stopped to take its states at the barrier (Flink's
    /// synchronous part).
    pub(crate) sync: Duration,
    /// From the states taken to their files written (Flink's asynchronous part).
    pub(crate) asynchronous: Duration,
    /// The uid of the subtask's vertex and its index (per-subtask statistics).
    pub(crate) vertex: std::sync::Arc<str>,
    pub(crate) subtask: usize,
}

impl AckPart {
    /// An aligned part with these files and no alignment time (tests, sources).
    #[cfg(test)]
    pub(crate) fn files(files: Vec<StateFile>) -> Self {
        AckPart {
            files,
            alignment: Duration::ZERO,
            start_delay: Duration::ZERO,
            taken: Taken::Source,
            sync: Duration::ZERO,
            asynchronous: Duration::ZERO,
            vertex: "".into(),
            subtask: 0,
        }
    }
}

/// Minimum, maximum and average of a quantity over completed checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MinMaxAvg {
    /// Smallest.
    pub min: u64,
    /// Largest.
    pub max: u64,
    /// Average.
    pub avg: f64,
}

/// Aggregates over every completed checkpoint of the job.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct CheckpointSummary {
    /// Completed checkpoints counted.
    pub count: u64,
    /// End-to-end duration, ms.
    pub end_to_end_duration_ms: MinMaxAvg,
    /// State size, bytes.
    pub state_size: MinMaxAvg,
    /// Bytes written per checkpoint (less than the state size when incremental).
    pub checkpointed_size: MinMaxAvg,
    /// In-flight data stored per checkpoint, bytes (Flink's `persisted_data`; 0 when aligned).
    pub persisted_data: MinMaxAvg,
}

impl CheckpointSummary {
    fn add(&mut self, duration_ms: u64, size: u64, checkpointed: u64, persisted: u64) {
        let n = self.count as f64;
        let fold = |m: &mut MinMaxAvg, x: u64| {
            if n == 0.0 {
                *m = MinMaxAvg {
                    min: x,
                    max: x,
                    avg: x as f64,
                };
            } else {
                m.min = m.min.min(x);
                m.max = m.max.max(x);
                m.avg = (m.avg * n + x as f64) / (n + 1.0);
            }
        };
        fold(&mut self.end_to_end_duration_ms, duration_ms);
        fold(&mut self.state_size, size);
        fold(&mut self.checkpointed_size, checkpointed);
        fold(&mut self.persisted_data, persisted);
        self.count += 1;
    }
}

pub(crate) struct Coordinator {
    cfg: CheckpointConfig,
    /// Periodic interval; `Duration::MAX` when checkpoints are only taken on demand
    /// (savepoints) or were stopped.
    interval: Duration,
    subtasks: usize,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    last_trigger: Option<Instant>,
    last_completion: Option<Instant>,
    failures_in_a_row: u32,
    pub(crate) stats: CheckpointStats,
    history: VecDeque<CheckpointRecord>,
    /// An instant and the wall clock then, to stamp records in ms since the epoch.
    clock: (Instant, u64),
    /// Periodic checkpoints stopped for good (part of the job finished).
    stopped: bool,
}

impl Coordinator {
    /// Periodic when `cfg.interval` is set; otherwise only [`force`](Self::force) triggers.
    pub(crate) fn new(cfg: &CheckpointConfig, subtasks: usize, next_id: u64) -> Self {
        let interval = cfg.interval.unwrap_or(Duration::MAX);
        Coordinator {
            cfg: cfg.clone(),
            interval,
            subtasks,
            next_id,
            pending: BTreeMap::new(),
            last_trigger: None,
            last_completion: None,
            failures_in_a_row: 0,
            stats: CheckpointStats::default(),
            history: VecDeque::new(),
            clock: (Instant::now(), crate::metrics::now_ms()),
            stopped: false,
        }
    }

    fn epoch_ms(&self, at: Instant) -> u64 {
        let (base, base_ms) = self.clock;
        match at.checked_duration_since(base) {
            Some(d) => base_ms + d.as_millis() as u64,
            None => base_ms.saturating_sub(base.duration_since(at).as_millis() as u64),
        }
    }

    fn record_mut(&mut self, id: u64) -> Option<&mut CheckpointRecord> {
        self.history.iter_mut().rev().find(|r| r.id == id)
    }

    /// Marks checkpoint `id` failed at `now` because of `why`.
    fn record_failure(&mut self, id: u64, now: Instant, why: String) {
        let started = self.record_mut(id).map(|r| r.trigger_timestamp_ms);
        let now_ms = self.epoch_ms(now);
        if let Some(r) = self.record_mut(id) {
            r.status = CheckpointStatus::Failed;
            r.end_to_end_duration_ms = now_ms.saturating_sub(started.unwrap_or(now_ms));
            r.failure_message = Some(why);
        }
        self.publish_history();
    }

    fn publish_history(&mut self) {
        self.stats.history = self.history.iter().cloned().collect();
    }

    /// Triggers a savepoint now, whatever the interval.
    pub(crate) fn trigger_savepoint(&mut self, now: Instant) -> u64 {
        self.start(now, true)
    }

    /// Triggers a checkpoint now, whatever the interval, that is not a savepoint (asked for
    /// from outside, e.g. `POST /jobs/{id}/checkpoints`).
    pub(crate) fn trigger_checkpoint(&mut self, now: Instant) -> u64 {
        self.start(now, false)
    }

    /// Starts the next checkpoint: it waits for every subtask.
    fn start(&mut self, now: Instant, is_savepoint: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(
            id,
            Pending {
                started: now,
                waiting: (0..self.subtasks).collect(),
                files: Vec::new(),
                max_alignment: Duration::ZERO,
                max_start_delay: Duration::ZERO,
                aligned: false,
                with_inputs: 0,
            },
        );
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        let record = CheckpointRecord {
            id,
            status: CheckpointStatus::InProgress,
            is_savepoint,
            trigger_timestamp_ms: self.epoch_ms(now),
            latest_ack_timestamp_ms: None,
            end_to_end_duration_ms: 0,
            state_size: 0,
            checkpointed_size: 0,
            sync_duration_us: 0,
            async_duration_ms: 0,
            num_subtasks: self.subtasks,
            num_acknowledged_subtasks: 0,
            alignment_ms: 0,
            start_delay_ms: 0,
            failure_message: None,
            is_unaligned: false,
            at_least_once: false,
            persisted_data: 0,
            subtasks: Vec::new(),
        };
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(record);
        self.publish_history();
        id
    }

    /// No id up to `id` is given to a checkpoint again: a checkpoint with that id was seen
    /// (one skipped as unreadable, newer than the one restored). Sinks that commit by
    /// checkpoint id hold its output as committed already.
    pub(crate) fn ids_after(&mut self, id: u64) {
        self.next_id = self.next_id.max(id.saturating_add(1));
    }

    /// Forgets checkpoints in progress (the job is restarting) and starts ids after `next_id`;
    /// the count of failures in a row starts over (it is per deployment).
    pub(crate) fn reset(&mut self, subtasks: usize, next_id: u64, now: Instant) {
        self.subtasks = subtasks;
        self.failures_in_a_row = 0;
        self.stopped = false;
        self.interval = self.cfg.interval.unwrap_or(Duration::MAX);
        self.next_id = self.next_id.max(next_id);
        let abandoned: Vec<u64> = self.pending.keys().copied().collect();
        for id in abandoned {
            self.record_failure(id, now, "the job restarted".into());
        }
        self.pending.clear();
        self.last_trigger = Some(now);
        self.stats.number_of_in_progress_checkpoints = 0;
    }

    /// A new checkpoint id if one is due at `now`.
    pub(crate) fn maybe_trigger(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last_trigger
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        let paused = self
            .last_completion
            .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.min_pause);
        if !due || paused || self.pending.len() >= self.cfg.max_concurrent {
            return None;
        }
        // At a fixed rate: the next checkpoint is due one interval after this one was due,
        // not after the tick that triggered it ran. (The tick runs at the interval; measured
        // from `now`, a tick a few ms late pushed the next checkpoint to the tick after:
        // checkpoints every 1 s came 1 or 2 s apart.) One more than an interval late (a
        // checkpoint in progress held it): the next is due an interval from now.
        let planned = self
            .last_trigger
            .and_then(|t| t.checked_add(self.interval))
            .filter(|p| now.saturating_duration_since(*p) < self.interval);
        self.last_trigger = Some(planned.unwrap_or(now));
        Some(self.start(now, false))
    }

    /// Subtask `actor` acknowledged checkpoint `id`; the checkpoint if it is now complete.
    pub(crate) fn ack(
        &mut self,
        id: u64,
        actor: usize,
        part: AckPart,
        now: Instant,
    ) -> Option<Completed> {
        let at = self.epoch_ms(now);
        let subtasks = self.subtasks;
        let AckPart {
            files,
            alignment,
            start_delay,
            taken,
            sync,
            asynchronous,
            vertex,
            subtask,
        } = part;
        let p = self.pending.get_mut(&id)?;
        if !p.waiting.remove(&actor) {
            return None;
        }
        let since_trigger = now.saturating_duration_since(p.started).as_millis() as u64;
        let (mine_state, mine_written) = files
            .iter()
            .fold((0, 0), |(a, b), f| (a + f.state_size, b + f.size));
        p.files.extend(files);
        p.max_alignment = p.max_alignment.max(alignment);
        p.max_start_delay = p.max_start_delay.max(start_delay);
        let persisted = p.count_taken(taken);
        let (acked, align, done) = (
            subtasks - p.waiting.len(),
            p.max_alignment.as_millis() as u64,
            p.waiting.is_empty(),
        );
        let at_least_once = p.with_inputs > 0 && !p.aligned;
        if let Some(r) = self.record_mut(id) {
            r.num_acknowledged_subtasks = acked;
            r.alignment_ms = align;
            r.start_delay_ms = r.start_delay_ms.max(start_delay.as_millis() as u64);
            r.latest_ack_timestamp_ms = Some(at);
            r.is_unaligned |= matches!(taken, Taken::Unaligned { .. });
            r.persisted_data += persisted;
            r.at_least_once = at_least_once;
            r.sync_duration_us = r.sync_duration_us.max(sync.as_micros() as u64);
            r.async_duration_ms = r.async_duration_ms.max(asynchronous.as_millis() as u64);
            r.subtasks.push(SubtaskCheckpoint {
                vertex: vertex.to_string(),
                subtask,
                ack_timestamp_ms: at,
                end_to_end_duration_ms: since_trigger,
                state_size: mine_state,
                checkpointed_size: mine_written,
                sync_duration_us: sync.as_micros() as u64,
                async_duration_ms: asynchronous.as_millis() as u64,
                alignment_ms: alignment.as_millis() as u64,
                start_delay_ms: start_delay.as_millis() as u64,
                unaligned: matches!(taken, Taken::Unaligned { .. }),
                persisted_data: persisted,
            });
        }
        if !done {
            self.publish_history();
            return None;
        }
        let p = self.pending.get_mut(&id)?;
        let files = std::mem::take(&mut p.files);
        Some(Completed {
            id,
            size: files.iter().map(|f| f.state_size).sum(),
            checkpointed_size: files.iter().map(|f| f.size).sum(),
            files,
            duration: now.saturating_duration_since(p.started),
        })
    }

    /// Checkpoint `done`, acknowledged by every subtask, is complete: its `_metadata` is
    /// written. (Until then it is in progress: if the metadata cannot be written it fails
    /// with [`fail_one`](Self::fail_one) like any other.) Returns the older checkpoints still
    /// in progress, which it subsumes: they will not complete.
    pub(crate) fn complete(&mut self, done: &Completed, now: Instant) -> Vec<u64> {
        let Some(p) = self.pending.remove(&done.id) else {
            return Vec::new();
        };
        let (id, size, duration) = (done.id, done.size, done.duration);
        // Older checkpoints still pending are subsumed.
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        for &k in &older {
            self.pending.remove(&k);
            self.stats.number_of_failed_checkpoints += 1;
            self.record_failure(k, now, format!("subsumed by checkpoint {id}"));
        }
        let duration_ms = duration.as_millis() as u64;
        let mut persisted = 0;
        if let Some(r) = self.record_mut(id) {
            r.status = CheckpointStatus::Completed;
            r.end_to_end_duration_ms = duration_ms;
            r.state_size = size;
            r.checkpointed_size = done.checkpointed_size;
            persisted = r.persisted_data;
        }
        self.publish_history();
        self.stats
            .completed_summary
            .get_or_insert_with(CheckpointSummary::default)
            .add(duration_ms, size, done.checkpointed_size, persisted);
        self.last_completion = Some(now);
        self.failures_in_a_row = 0;
        self.stats.number_of_completed_checkpoints += 1;
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        self.stats.last_checkpoint_duration_ms = duration_ms;
        self.stats.last_checkpoint_size = size;
        self.stats.last_checkpointed_size = done.checkpointed_size;
        self.stats.checkpoint_alignment_time_ms = p.max_alignment.as_millis() as u64;
        // Of this checkpoint, as Flink's: a running maximum over the job's life would stay
        // high for ever after one slow start, and an agent's rule on it would never recover.
        self.stats.checkpoint_start_delay_nanos = p.max_start_delay.as_nanos() as u64;
        self.stats.last_completed_checkpoint_id = Some(id);
        older
    }

    /// The checkpoints in progress at `now` that are older than the timeout (the controller
    /// fails each with [`fail_one`](Self::fail_one)), with the reason.
    /// Whether checkpoint `id` is in progress (not complete, failed, subsumed or aborted).
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    pub(crate) fn timed_out(&self, now: Instant) -> Vec<(u64, String)> {
        let timeout = self.cfg.timeout;
        self.pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.started) > timeout)
            .map(|(id, _)| (*id, format!("expired after {timeout:?}")))
            .collect()
    }

    /// Checkpoint `id` failed (a subtask could not write its state, it timed out), because
    /// of `why`. Failures in a row are counted within one deployment: [`reset`](Self::reset)
    /// starts the count over.
    pub(crate) fn fail_one(&mut self, id: u64, why: String) -> Failed {
        if self.pending.remove(&id).is_none() {
            return Failed::NotPending;
        }
        self.record_failure(id, Instant::now(), why);
        self.stats.number_of_failed_checkpoints += 1;
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        self.failures_in_a_row += 1;
        let in_a_row = self.failures_in_a_row;
        if in_a_row > self.cfg.tolerable_failed_checkpoints {
            return Failed::TooMany { in_a_row };
        }
        Failed::Tolerated { in_a_row }
    }

    /// Aborts every checkpoint in progress because a backed-up subtask failed over (its new
    /// primary never saw their barriers). Not counted against the tolerance: nothing failed
    /// to persist. Returns the aborted ids and the newest id triggered so far (barriers up to
    /// it are stale for the new primary).
    pub(crate) fn abort_for_failover(&mut self) -> (Vec<u64>, u64) {
        let aborted: Vec<u64> = self.pending.keys().copied().collect();
        let now = Instant::now();
        for id in &aborted {
            self.record_failure(*id, now, "aborted: a backed-up subtask failed over".into());
        }
        self.pending.clear();
        self.stats.number_of_in_progress_checkpoints = 0;
        (aborted, self.next_id.saturating_sub(1))
    }

    /// Stops triggering (a subtask finished: later checkpoints could not restore it).
    pub(crate) fn stop_triggering(&mut self) {
        self.interval = Duration::MAX;
        self.stopped = true;
    }

    /// New settings: the interval, pause and concurrency apply from the next trigger, the
    /// timeout and tolerated failures from now on.
    pub(crate) fn reconfigure(&mut self, cfg: &CheckpointConfig) {
        self.cfg = cfg.clone();
        if !self.stopped {
            self.interval = cfg.interval.unwrap_or(Duration::MAX);
        }
    }
}

#[cfg(test)]
mod tests;
