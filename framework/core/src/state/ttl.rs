//! State time to live (Flink's `StateTtlConfig`): how long a keyed state field keeps its value
//! after it was last written (or read), and the stamped slot that holds one field of one key.
//!
//! Time is processing time, in milliseconds since the Unix epoch, read once per batch: the
//! same clock across restarts, so a restored value expires when it would have. A value is
//! checked when its key's record arrives (never returned expired), in small steps between
//! batches (incremental cleanup, done by the keyed operator), and when snapshotted (expired
//! values are left out).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::KeyedStateType;

/// When a state's time to live starts over (Flink's `StateTtlConfig.UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TtlUpdate {
    /// When the value is created or written (Flink's `OnCreateAndWrite`, the default).
    #[default]
    OnCreateAndWrite,
    /// Also whenever a record of its key is processed (Flink's `OnReadAndWrite`): a key that
    /// keeps coming keeps its state.
    OnReadAndWrite,
}

/// The time to live of a keyed state field: `#[weir(state, ttl = ..)]` takes a
/// [`Duration`] or a `StateTtl`.
///
/// ```
/// use std::time::Duration;
/// use weir::{StateTtl, TtlUpdate};
/// let ttl = StateTtl::new(Duration::from_secs(60)).update_on_read();
/// assert_eq!(ttl.ttl(), Duration::from_secs(60));
/// assert_eq!(ttl.update(), TtlUpdate::OnReadAndWrite);
/// let plain: StateTtl = Duration::from_millis(500).into();
/// assert_eq!(plain.update(), TtlUpdate::OnCreateAndWrite);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtl {
    ttl_ms: u64,
    update: TtlUpdate,
}

impl StateTtl {
    /// Values live for `ttl` after they were last written. A zero `ttl` is one millisecond.
    pub fn new(ttl: Duration) -> Self {
        StateTtl {
            ttl_ms: (ttl.as_millis() as u64).max(1),
            update: TtlUpdate::OnCreateAndWrite,
        }
    }
    /// Every record of the key starts the time to live over, not only writes.
    pub fn update_on_read(mut self) -> Self {
        self.update = TtlUpdate::OnReadAndWrite;
        self
    }
    /// The time to live.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
    /// When it starts over.
    pub fn update(&self) -> TtlUpdate {
        self.update
    }
}

impl From<Duration> for StateTtl {
    fn from(ttl: Duration) -> Self {
        StateTtl::new(ttl)
    }
}

/// One keyed state field of one key, with the time it was last stamped (for its TTL). What
/// the derive's generated code moves in and out of an operator's fields; not for apps.
#[doc(hidden)]
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Slot<S> {
    state: S,
    stamped_ms: u64,
}

impl<S: KeyedStateType> Slot<S> {
    /// Whether the value has outlived `ttl` at `now_ms`.
    #[inline]
    fn expired(&self, ttl: Option<&StateTtl>, now_ms: u64) -> bool {
        ttl.is_some_and(|t| self.stamped_ms.saturating_add(t.ttl_ms) <= now_ms)
    }

    /// Clears the value if it expired; whether the slot is now empty.
    #[inline]
    pub fn prune(&mut self, ttl: Option<&StateTtl>, now_ms: u64) -> bool {
        if self.expired(ttl, now_ms) && !self.state.is_empty() {
            self.state = S::default();
        }
        self.state.is_empty()
    }

    /// Moves the key's value into `field` (an expired one is dropped first). `field` must
    /// hold the default, which the slot keeps until [`store`](Self::store).
    #[inline]
    pub fn load(&mut self, field: &mut S, ttl: Option<&StateTtl>, now_ms: u64) {
        self.prune(ttl, now_ms);
        std::mem::swap(&mut self.state, field);
        field.take_written();
    }

    /// Moves the value back from `field` (which gets the default back) and stamps it if it was
    /// written, or, for [`TtlUpdate::OnReadAndWrite`], read; whether the slot is empty.
    #[inline]
    pub fn store(&mut self, field: &mut S, ttl: Option<&StateTtl>, now_ms: u64) -> bool {
        std::mem::swap(&mut self.state, field);
        let written = self.state.take_written();
        if let Some(t) = ttl {
            if written || t.update == TtlUpdate::OnReadAndWrite {
                self.stamped_ms = now_ms;
            }
        }
        self.state.is_empty()
    }

    /// The value (for tests and inspection).
    pub fn state(&self) -> &S {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ValueState;

    const MIN: Duration = Duration::from_secs(60);

    fn written(slot: &mut Slot<ValueState<u32>>, ttl: Option<&StateTtl>, now: u64, v: u32) {
        let mut field = ValueState::default();
        slot.load(&mut field, ttl, now);
        field.update(v);
        slot.store(&mut field, ttl, now);
        assert!(field.value().is_none(), "the field gets the default back");
    }

    fn read(slot: &mut Slot<ValueState<u32>>, ttl: Option<&StateTtl>, now: u64) -> Option<u32> {
        let mut field = ValueState::default();
        slot.load(&mut field, ttl, now);
        let v = field.value().copied();
        slot.store(&mut field, ttl, now);
        v
    }

    #[test]
    fn a_value_expires_after_its_ttl_and_never_before() {
        let ttl = StateTtl::new(MIN);
        let mut s = Slot::default();
        written(&mut s, Some(&ttl), 1_000, 7);
        assert_eq!(read(&mut s, Some(&ttl), 60_999), Some(7));
        // Reads do not extend a create-and-write TTL.
        assert_eq!(read(&mut s, Some(&ttl), 61_000), None);
        assert!(s.prune(Some(&ttl), 61_000));
    }

    #[test]
    fn writes_restart_the_ttl_and_on_read_reads_do_too() {
        let ttl = StateTtl::new(MIN);
        let mut s = Slot::default();
        written(&mut s, Some(&ttl), 0, 1);
        written(&mut s, Some(&ttl), 50_000, 2);
        assert_eq!(read(&mut s, Some(&ttl), 100_000), Some(2));
        let on_read = ttl.update_on_read();
        let mut r = Slot::default();
        written(&mut r, Some(&on_read), 0, 1);
        assert_eq!(read(&mut r, Some(&on_read), 50_000), Some(1));
        assert_eq!(read(&mut r, Some(&on_read), 100_000), Some(1));
        assert_eq!(read(&mut r, Some(&on_read), 170_000), None);
    }

    #[test]
    fn without_a_ttl_nothing_expires() {
        let mut s = Slot::default();
        written(&mut s, None, 0, 3);
        assert_eq!(read(&mut s, None, u64::MAX), Some(3));
        assert!(!s.prune(None, u64::MAX));
    }
}
