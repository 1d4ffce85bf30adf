//! Failure detection: when to ping a watched actor, and when its silence means it hung.
//!
//! Two detectors, both plain structs with time passed in, so they are tested without actors:
//! - [`Heartbeats`]: the primary and the backup of one backed-up subtask (the BQBS
//!   supervisor). Pings go out every heartbeat interval; an answer is noted in a
//!   [`Liveness`] slot by whoever receives it; a primary or backup silent for longer than the
//!   timeout is hung. Silence is checked more often than pings go out ([`check_every`]), so
//!   a hang is caught within 10 ms of its timeout.
//! - [`Silence`]: every subtask of a deployment, through the answers to the sampling mail;
//!   one silent for longer than the job's heartbeat timeout is hung.
//!
//! A panicked or stopped actor is reported by the actor itself (`event`); these catch the ones
//! that cannot report. Acting on a verdict (promotion, backup replacement, restart) is the
//! controller's.

use std::time::{Duration, Instant};

use crate::sync::{lock, Arc, Mutex};

/// When a watched actor last answered, shared with the code that receives its answers.
#[derive(Debug, Clone)]
pub(crate) struct Liveness(Arc<Mutex<Instant>>);

impl Liveness {
    /// A slot that counts `now` as the last answer.
    pub(crate) fn new(now: Instant) -> Self {
        Liveness(Arc::new(Mutex::new(now)))
    }

    /// The actor answered at `at`.
    pub(crate) fn answered(&self, at: Instant) {
        *lock(&self.0) = at;
    }

    fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*lock(&self.0))
    }
}

/// How often to check the heartbeats of backed-up subtasks with these heartbeat intervals:
/// every interval, and at least every 10 ms; an hour when there are none.
pub(crate) fn check_every(intervals: impl IntoIterator<Item = Duration>) -> Duration {
    intervals
        .into_iter()
        .map(|i| i.min(Duration::from_millis(10)))
        .min()
        .unwrap_or(Duration::from_secs(3600))
}

/// The heartbeats of one backed-up subtask: its primary and its backup.
#[derive(Debug)]
pub(crate) struct Heartbeats {
    interval: Duration,
    timeout: Duration,
    pinged: Instant,
    /// The current primary's answers.
    pub(crate) primary: Liveness,
    /// The current backup's answers.
    pub(crate) backup: Liveness,
}

/// What one check of a subtask's heartbeats found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Pings are due: send one to each live actor.
    pub(crate) ping: bool,
    /// The primary has been silent for longer than the timeout.
    pub(crate) primary_hung: bool,
    /// The backup has been silent for longer than the timeout.
    pub(crate) backup_hung: bool,
}

impl Heartbeats {
    /// Heartbeats with this interval and timeout, starting at `now`.
    pub(crate) fn new(interval: Duration, timeout: Duration, now: Instant) -> Self {
        Heartbeats {
            interval,
            timeout,
            pinged: now,
            primary: Liveness::new(now),
            backup: Liveness::new(now),
        }
    }

    /// The heartbeat timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The interval between pings.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// New interval and timeout (a live change), from the next check.
    pub(crate) fn set(&mut self, interval: Duration, timeout: Duration) {
        self.interval = interval;
        self.timeout = timeout;
    }

    /// Checks at `now`; `primary_running` is false once the primary has finished (a finished
    /// primary answers nothing and is not hung).
    pub(crate) fn check(&mut self, now: Instant, primary_running: bool) -> Verdict {
        let ping = now.saturating_duration_since(self.pinged) >= self.interval;
        if ping {
            self.pinged = now;
        }
        Verdict {
            ping,
            primary_hung: primary_running && self.primary.silent_for(now) > self.timeout,
            backup_hung: self.backup.silent_for(now) > self.timeout,
        }
    }

    /// A new primary (promoted) starts at `now`.
    pub(crate) fn new_primary(&mut self, now: Instant) {
        self.primary.answered(now);
    }

    /// A new backup starts at `now`.
    pub(crate) fn new_backup(&mut self, now: Instant) {
        self.backup.answered(now);
    }
}

/// The last answer of every subtask of a deployment to the sampling mail.
#[derive(Debug)]
pub(crate) struct Silence {
    last_seen: Vec<Instant>,
}

impl Silence {
    /// `n` subtasks, all seen at `now`.
    pub(crate) fn new(n: usize, now: Instant) -> Self {
        Silence {
            last_seen: vec![now; n],
        }
    }

    /// Subtask `i` answered at `at` (an older answer changes nothing).
    pub(crate) fn seen(&mut self, i: usize, at: Instant) {
        self.last_seen[i] = self.last_seen[i].max(at);
    }

    /// The subtask to blame for a hang at `now`, if any subtask that is not `finished` has
    /// been silent for longer than `timeout`: of those, the one stuck inside its operators
    /// the longest (`inside[i]`: since when subtask `i` is inside a poll of its data lane,
    /// on any clock that grows), else the first. Subtasks sharing a thread fall silent
    /// together when one of them hangs; only the hung one is inside its operators.
    pub(crate) fn hung(
        &self,
        now: Instant,
        timeout: Duration,
        finished: &[bool],
        inside: impl Fn(usize) -> Option<u64>,
    ) -> Option<usize> {
        let silent = || {
            self.last_seen
                .iter()
                .zip(finished)
                .enumerate()
                .filter(move |(_, (&seen, &done))| {
                    !done && now.saturating_duration_since(seen) > timeout
                })
                .map(|(i, _)| i)
        };
        let first = silent().next()?;
        Some(
            silent()
                .filter_map(|i| inside(i).map(|since| (since, i)))
                .min()
                .map_or(first, |(_, i)| i),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pings_go_out_every_interval_and_silence_past_the_timeout_is_a_hang() {
        let t0 = Instant::now();
        let mut hb = Heartbeats::new(50 * MS, 250 * MS, t0);
        let v = hb.check(t0 + 10 * MS, true);
        assert_eq!(
            v,
            Verdict {
                ping: false,
                primary_hung: false,
                backup_hung: false
            }
        );
        assert!(hb.check(t0 + 50 * MS, true).ping);
        assert!(
            !hb.check(t0 + 60 * MS, true).ping,
            "the next ping is 50 ms later"
        );
        assert!(hb.check(t0 + 100 * MS, true).ping);
        // The backup answers, the primary does not.
        hb.backup.answered(t0 + 200 * MS);
        let v = hb.check(t0 + 251 * MS, true);
        assert!(v.primary_hung && !v.backup_hung);
        // A finished primary is not hung; a promoted one starts afresh.
        assert!(!hb.check(t0 + 260 * MS, false).primary_hung);
        hb.new_primary(t0 + 260 * MS);
        assert!(!hb.check(t0 + 270 * MS, true).primary_hung);
        assert!(hb.check(t0 + 460 * MS, true).backup_hung);
        hb.new_backup(t0 + 460 * MS);
        assert!(!hb.check(t0 + 470 * MS, true).backup_hung);
    }

    #[test]
    fn silence_names_the_first_unfinished_silent_subtask() {
        let t0 = Instant::now();
        let mut s = Silence::new(3, t0);
        s.seen(1, t0 + 100 * MS);
        s.seen(1, t0 + 50 * MS); // older: ignored
        s.seen(2, t0 + 100 * MS);
        let timeout = 80 * MS;
        let outside = |_| None;
        assert_eq!(s.hung(t0 + 80 * MS, timeout, &[false; 3], outside), None);
        assert_eq!(s.hung(t0 + 90 * MS, timeout, &[false; 3], outside), Some(0));
        assert_eq!(
            s.hung(t0 + 90 * MS, timeout, &[true, false, false], outside),
            None
        );
        assert_eq!(
            s.hung(t0 + 181 * MS, timeout, &[true, false, false], outside),
            Some(1)
        );
    }

    #[test]
    fn of_silent_subtasks_sharing_a_thread_the_one_inside_its_operators_is_blamed() {
        let t0 = Instant::now();
        let s = Silence::new(4, t0);
        let timeout = 80 * MS;
        // All four silent; 2 and 3 are inside a poll, 3 since earlier.
        let inside = |i| [None, None, Some(500), Some(400)][i];
        assert_eq!(s.hung(t0 + 90 * MS, timeout, &[false; 4], inside), Some(3));
        // One inside a poll but not silent (it answered) is not blamed.
        let mut s = s;
        s.seen(3, t0 + 50 * MS);
        assert_eq!(s.hung(t0 + 90 * MS, timeout, &[false; 4], inside), Some(2));
        // Nobody inside: the first silent one.
        assert_eq!(
            s.hung(t0 + 90 * MS, timeout, &[true, false, false, false], |_| {
                None
            }),
            Some(1)
        );
    }

    #[test]
    fn silence_is_checked_at_least_every_10_ms() {
        assert_eq!(check_every([50 * MS, 5 * MS]), 5 * MS);
        assert_eq!(check_every([50 * MS]), 10 * MS);
        assert_eq!(check_every([]), Duration::from_secs(3600));
    }
}
