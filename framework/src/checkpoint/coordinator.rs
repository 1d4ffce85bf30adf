//! The checkpoint coordinator's decisions, as a plain struct with time passed in: when to
//! trigger, which acknowledgements a checkpoint still waits for, when it completes, times out
//! or fails the job. The job routes its mails and writes `_metadata`.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::CheckpointConfig;

/// A state file reported by a subtask for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateFile {
    pub(crate) uid: String,
    pub(crate) subtask: usize,
    pub(crate) file: String,
    pub(crate) size: u64,
}

struct Pending {
    started: Instant,
    waiting: HashSet<usize>,
    files: Vec<StateFile>,
    max_alignment: Duration,
}

/// A checkpoint every subtask acknowledged.
#[derive(Debug)]
pub(crate) struct Completed {
    pub(crate) id: u64,
    pub(crate) files: Vec<StateFile>,
    pub(crate) duration: Duration,
    pub(crate) size: u64,
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
    /// `lastCheckpointSize`, bytes.
    pub last_checkpoint_size: u64,
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
        }
    }

    /// Triggers a checkpoint now, whatever the interval (a savepoint).
    pub(crate) fn force(&mut self, now: Instant) -> u64 {
        self.start(now)
    }

    /// Starts the next checkpoint: it waits for every subtask.
    fn start(&mut self, now: Instant) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(
            id,
            Pending {
                started: now,
                waiting: (0..self.subtasks).collect(),
                files: Vec::new(),
                max_alignment: Duration::ZERO,
            },
        );
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        id
    }

    /// Forgets checkpoints in progress (the job is restarting) and starts ids after `next_id`.
    pub(crate) fn reset(&mut self, subtasks: usize, next_id: u64, now: Instant) {
        self.subtasks = subtasks;
        self.interval = self.cfg.interval.unwrap_or(Duration::MAX);
        self.next_id = self.next_id.max(next_id);
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
        self.last_trigger = Some(now);
        Some(self.start(now))
    }

    /// Subtask `actor` acknowledged checkpoint `id`; the checkpoint if it is now complete.
    pub(crate) fn ack(
        &mut self,
        id: u64,
        actor: usize,
        files: Vec<StateFile>,
        alignment: Duration,
        start_delay: Duration,
        now: Instant,
    ) -> Option<Completed> {
        let p = self.pending.get_mut(&id)?;
        if !p.waiting.remove(&actor) {
            return None;
        }
        p.files.extend(files);
        p.max_alignment = p.max_alignment.max(alignment);
        self.stats.checkpoint_start_delay_nanos = self
            .stats
            .checkpoint_start_delay_nanos
            .max(start_delay.as_nanos() as u64);
        if !p.waiting.is_empty() {
            return None;
        }
        let p = self.pending.remove(&id)?;
        // Older checkpoints still pending are subsumed.
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        for k in older {
            self.pending.remove(&k);
            self.stats.number_of_failed_checkpoints += 1;
        }
        let size = p.files.iter().map(|f| f.size).sum();
        let duration = now.saturating_duration_since(p.started);
        self.last_completion = Some(now);
        self.failures_in_a_row = 0;
        self.stats.number_of_completed_checkpoints += 1;
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        self.stats.last_checkpoint_duration_ms = duration.as_millis() as u64;
        self.stats.last_checkpoint_size = size;
        self.stats.checkpoint_alignment_time_ms = p.max_alignment.as_millis() as u64;
        self.stats.last_completed_checkpoint_id = Some(id);
        Some(Completed {
            id,
            files: p.files,
            duration,
            size,
        })
    }

    /// Aborts checkpoints older than the timeout; `Err` when more failed in a row than
    /// tolerated (the job must fail).
    pub(crate) fn expire(&mut self, now: Instant) -> Result<Vec<u64>, u32> {
        let timeout = self.cfg.timeout;
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.started) > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            self.fail_one(*id)?;
        }
        Ok(expired)
    }

    /// Checkpoint `id` failed (a subtask could not write its state).
    pub(crate) fn fail_one(&mut self, id: u64) -> Result<(), u32> {
        if self.pending.remove(&id).is_none() {
            return Ok(());
        }
        self.stats.number_of_failed_checkpoints += 1;
        self.stats.number_of_in_progress_checkpoints = self.pending.len() as u64;
        self.failures_in_a_row += 1;
        if self.failures_in_a_row > self.cfg.tolerable_failed_checkpoints {
            return Err(self.failures_in_a_row);
        }
        Ok(())
    }

    /// Aborts every checkpoint in progress because a backed-up subtask failed over (its new
    /// primary never saw their barriers). Not counted against the tolerance: nothing failed
    /// to persist. Returns the aborted ids and the newest id triggered so far (barriers up to
    /// it are stale for the new primary).
    pub(crate) fn abort_for_failover(&mut self) -> (Vec<u64>, u64) {
        let aborted: Vec<u64> = self.pending.keys().copied().collect();
        self.pending.clear();
        self.stats.number_of_in_progress_checkpoints = 0;
        (aborted, self.next_id.saturating_sub(1))
    }

    /// Stops triggering (a subtask finished: later checkpoints could not restore it).
    pub(crate) fn stop_triggering(&mut self) {
        self.interval = Duration::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CheckpointConfig {
        CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            timeout: Duration::from_millis(500),
            tolerable_failed_checkpoints: 1,
            ..CheckpointConfig::default()
        }
    }

    #[test]
    fn completes_when_every_subtask_acked_once() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(&cfg(), 2, 1);
        let id = c.maybe_trigger(t0).unwrap();
        assert_eq!(c.maybe_trigger(t0), None, "max concurrent 1");
        assert!(c
            .ack(id, 0, vec![], Duration::ZERO, Duration::ZERO, t0)
            .is_none());
        assert!(
            c.ack(id, 0, vec![], Duration::ZERO, Duration::ZERO, t0)
                .is_none(),
            "duplicate"
        );
        let done = c
            .ack(
                id,
                1,
                vec![],
                Duration::from_millis(3),
                Duration::ZERO,
                t0 + Duration::from_millis(20),
            )
            .unwrap();
        assert_eq!((done.id, done.duration), (1, Duration::from_millis(20)));
        assert_eq!(c.stats.number_of_completed_checkpoints, 1);
        assert_eq!(c.stats.checkpoint_alignment_time_ms, 3);
        assert_eq!(
            c.maybe_trigger(t0 + Duration::from_millis(50)),
            None,
            "interval"
        );
        assert_eq!(c.maybe_trigger(t0 + Duration::from_millis(100)), Some(2));
    }

    #[test]
    fn timeouts_fail_checkpoints_and_too_many_fail_the_job() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(&cfg(), 1, 1);
        c.maybe_trigger(t0).unwrap();
        assert_eq!(c.expire(t0 + Duration::from_millis(600)), Ok(vec![1]));
        c.maybe_trigger(t0 + Duration::from_millis(700)).unwrap();
        assert_eq!(c.expire(t0 + Duration::from_millis(1300)), Err(2));
        assert_eq!(c.stats.number_of_failed_checkpoints, 2);
    }
}
