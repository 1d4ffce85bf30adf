//! Watermark alignment (Flink's `WatermarkStrategy::withWatermarkAlignment`): the source
//! subtasks of one alignment group publish their watermarks, and one that runs ahead of the
//! group's lowest by more than the allowed drift stops reading until the others catch up.
//! Without it, a fast source (a partition with a backlog, a replay from earlier) fills the
//! window operators downstream with state for windows that cannot fire yet, since their
//! watermark is the lowest of their inputs'.
//!
//! This module owns the group (who published what) and the decision to pause; the source
//! driver (`source`) asks before each read, and the watermark generator (`time`) says what
//! the subtask's watermark is. A subtask whose own watermark (the lowest of its splits') is
//! ahead pauses whole; one that may read hands the group's limit ([`Member::limit`]) to its
//! source driver, which pauses the splits whose own watermark is beyond it (Flink's split-level
//! alignment, FLIP-217) if the source can pause splits
//! ([`Source::pause_splits`](crate::source::Source::pause_splits)).

use std::time::Duration;

use crate::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::sync::{lock, Mutex, MutexGuard};
use crate::time::EventTime;

/// How the sources of a group are kept together: the group's name, the drift allowed, and
/// how often a paused subtask looks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Alignment {
    pub(crate) group: String,
    pub(crate) max_drift: Duration,
    pub(crate) update_interval: Duration,
}

/// The watermarks of one group's source subtasks (of every source in the group).
pub(crate) struct Group {
    max_drift: EventTime,
    members: Mutex<Vec<Published>>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Published {
    id: u64,
    /// `None`: idle (or not started), so it holds no one back.
    watermark: Option<EventTime>,
}

impl Group {
    pub(crate) fn new(max_drift: Duration) -> Arc<Group> {
        Arc::new(Group {
            max_drift: EventTime::try_from(max_drift.as_millis()).unwrap_or(EventTime::MAX),
            members: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        })
    }

    fn members(&self) -> MutexGuard<'_, Vec<Published>> {
        lock(&self.members)
    }

    /// A new source subtask of the group; it holds the others back from its first
    /// watermark on (`EventTime::MIN` before its first record, as in Flink).
    pub(crate) fn join(self: &Arc<Self>) -> Member {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.members().push(Published {
            id,
            watermark: Some(EventTime::MIN),
        });
        Member {
            group: self.clone(),
            id,
            paused: false,
            limit: None,
        }
    }
}

/// One source subtask's place in its group; leaves it when dropped.
pub(crate) struct Member {
    group: Arc<Group>,
    id: u64,
    paused: bool,
    /// The highest watermark the group allows now (its lowest plus the drift), as of the
    /// last [`may_read`](Self::may_read); `None` while every member is idle.
    limit: Option<EventTime>,
}

impl Member {
    /// Publishes this subtask's watermark (`None`: idle) and says whether it may read: not
    /// if its watermark is more than the drift ahead of the group's lowest.
    pub(crate) fn may_read(&mut self, watermark: Option<EventTime>) -> bool {
        let lowest = {
            let mut members = self.group.members();
            if let Some(m) = members.iter_mut().find(|m| m.id == self.id) {
                m.watermark = watermark;
            }
            members.iter().filter_map(|m| m.watermark).min()
        };
        self.limit = lowest.map(|low| low.saturating_add(self.group.max_drift));
        let ahead = match (watermark, self.limit) {
            (Some(w), Some(limit)) => w > limit,
            _ => false,
        };
        if ahead != self.paused {
            self.paused = ahead;
            tracing::debug!(
                paused = ahead,
                watermark = ?watermark,
                lowest = ?lowest,
                "watermark alignment"
            );
        }
        !ahead
    }

    /// The highest watermark a split of this subtask may have and go on reading (the group's
    /// lowest plus the drift), as of the last [`may_read`](Self::may_read); `None`: no limit
    /// (every member idle).
    pub(crate) fn limit(&self) -> Option<EventTime> {
        self.limit
    }

    /// Whether the last [`may_read`](Self::may_read) said no.
    #[cfg(test)]
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let id = self.id;
        self.group.members().retain(|m| m.id != id);
    }
}

/// The groups of one job, by name: every source given the same group name shares one.
#[derive(Default)]
pub(crate) struct Groups {
    by_name: std::collections::HashMap<String, (Duration, Arc<Group>)>,
}

impl Groups {
    /// The group `a` names, made on first use. Sources of one group must allow the same
    /// drift: a second drift for a name is refused, naming both.
    pub(crate) fn get(&mut self, a: &Alignment) -> Result<Arc<Group>, String> {
        if let Some((drift, g)) = self.by_name.get(&a.group) {
            if *drift != a.max_drift {
                return Err(format!(
                    "watermark alignment group `{}` is given a maximum drift of {:?} and of {:?}: \
                     give its sources one",
                    a.group, drift, a.max_drift
                ));
            }
            return Ok(g.clone());
        }
        let g = Group::new(a.max_drift);
        self.by_name
            .insert(a.group.clone(), (a.max_drift, g.clone()));
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_ahead_of_the_lowest_by_more_than_the_drift_pauses_until_it_catches_up() {
        let g = Group::new(Duration::from_millis(100));
        let mut a = g.join();
        let mut b = g.join();
        // Before b's first record it holds a back at MIN: a may read its first batch only
        // while its own watermark is MIN too.
        assert!(a.may_read(Some(EventTime::MIN)));
        assert!(!a.may_read(Some(1_000)), "b has shown nothing yet");
        assert!(b.may_read(Some(0)));
        assert!(!a.may_read(Some(1_000)));
        assert!(a.paused());
        assert!(b.may_read(Some(899)));
        assert!(!a.may_read(Some(1_000)), "100 ms is allowed, 101 not");
        assert!(b.may_read(Some(900)));
        assert!(a.may_read(Some(1_000)));
        assert!(!a.paused());
        assert_eq!(a.limit(), Some(1_000), "the lowest (900) plus the drift");
    }

    #[test]
    fn idle_and_departed_members_hold_no_one_back() {
        let g = Group::new(Duration::ZERO);
        let mut a = g.join();
        let mut b = g.join();
        assert!(b.may_read(None), "idle: held by no one");
        assert!(a.may_read(Some(50)), "b is idle");
        assert!(b.may_read(Some(10)), "behind a");
        assert!(!a.may_read(Some(50)), "ahead of b");
        assert!(b.may_read(None));
        assert!(a.may_read(Some(50)), "b is idle again");
        assert!(b.may_read(Some(10)));
        assert!(!a.may_read(Some(50)));
        drop(b);
        assert!(a.may_read(Some(50)), "b left the group");
    }

    #[test]
    fn one_group_name_has_one_drift() {
        let mut groups = Groups::default();
        let a = |d| Alignment {
            group: "g".into(),
            max_drift: Duration::from_secs(d),
            update_interval: Duration::from_millis(10),
        };
        let g1 = groups.get(&a(5)).expect("made");
        let g2 = groups.get(&a(5)).expect("shared");
        assert!(Arc::ptr_eq(&g1, &g2));
        let err = groups.get(&a(6)).err().expect("refused");
        assert!(
            err.contains("`g`") && err.contains("5s") && err.contains("6s"),
            "{err}"
        );
    }
}
