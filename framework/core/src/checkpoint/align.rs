//! Barrier alignment across the input channels of one subtask (Chandy–Lamport), as a plain
//! struct with no I/O and no actor types, so unit and loom tests drive it directly.
//!
//! Channels are numbered `0..n` across all of a subtask's inputs. For checkpoint `id`:
//! - **exactly-once (aligned)**: a channel that delivered `Barrier(id)` is *blocked* — the
//!   subtask reads no more of it — until every channel that has not ended delivered it; then
//!   the subtask snapshots, forwards the barrier and every channel is unblocked;
//! - **at-least-once**: nothing is blocked; the snapshot is taken when the last barrier
//!   arrives (records after a barrier may be counted in both checkpoints' input).
//!
//! A channel that ends counts as having delivered every barrier. A barrier of a newer
//! checkpoint while one is being aligned aborts the older one (its coordinator will time it
//! out) and starts the newer. This module owns only these decisions.

/// What the aligner tells its subtask after a barrier or an end of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alignment {
    /// Keep reading (some channels may now be blocked).
    Pending,
    /// Every channel delivered `Barrier(id)`: snapshot now and forward the barrier.
    Aligned(u64),
}

/// Whether channels are blocked at a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlignMode {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug)]
pub(crate) struct BarrierAligner {
    mode: AlignMode,
    /// Channel delivered the current barrier.
    seen: Vec<bool>,
    ended: Vec<bool>,
    /// The checkpoint being aligned.
    current: Option<u64>,
    /// Highest checkpoint aligned so far (older barriers are stale).
    last_aligned: Option<u64>,
}

impl BarrierAligner {
    pub(crate) fn new(channels: usize, mode: AlignMode) -> Self {
        BarrierAligner {
            mode,
            seen: vec![false; channels],
            ended: vec![false; channels],
            current: None,
            last_aligned: None,
        }
    }

    /// Switches between exactly-once (blocking) and at-least-once alignment; only between
    /// checkpoints.
    pub(crate) fn set_mode(&mut self, mode: AlignMode) {
        debug_assert!(self.current.is_none(), "mode changes between checkpoints");
        self.mode = mode;
    }

    /// Exactly-once (blocking) or at-least-once.
    pub(crate) fn mode(&self) -> AlignMode {
        self.mode
    }

    /// Whether `channel` must not be read now.
    #[inline]
    pub(crate) fn is_blocked(&self, channel: usize) -> bool {
        self.mode == AlignMode::ExactlyOnce && self.current.is_some() && self.seen[channel]
    }

    /// Whether `channel` ended (it owes no barrier).
    pub(crate) fn is_ended(&self, channel: usize) -> bool {
        self.ended[channel]
    }

    /// Number of channels.
    pub(crate) fn channels(&self) -> usize {
        self.seen.len()
    }

    /// Gives up aligning the current checkpoint (it continues unaligned): nothing is blocked,
    /// and its remaining barriers are stale to the aligner.
    pub(crate) fn abandon(&mut self) {
        if let Some(id) = self.current.take() {
            self.last_aligned = Some(id);
            self.seen.iter_mut().for_each(|s| *s = false);
        }
    }

    /// Checkpoints up to `id` were aborted (a backed-up subtask failed over): stop aligning
    /// them, and ignore their barriers when they still arrive.
    pub(crate) fn abort_upto(&mut self, id: u64) {
        if self.current.is_some_and(|cur| cur <= id) {
            self.current = None;
            self.seen.iter_mut().for_each(|s| *s = false);
        }
        self.last_aligned = Some(self.last_aligned.map_or(id, |l| l.max(id)));
    }

    /// The newest checkpoint aligned, given up or aborted here (its barriers are stale).
    pub(crate) fn last_aligned(&self) -> Option<u64> {
        self.last_aligned
    }

    /// The checkpoint being aligned, if any.
    pub(crate) fn in_progress(&self) -> Option<u64> {
        self.current
    }

    /// `channel` delivered `Barrier(id)`.
    pub(crate) fn on_barrier(&mut self, channel: usize, id: u64) -> Alignment {
        if self.last_aligned.is_some_and(|last| id <= last) {
            return Alignment::Pending; // stale: that checkpoint is done or was given up
        }
        match self.current {
            Some(cur) if id < cur => return Alignment::Pending,
            Some(cur) if id > cur => self.start(id),
            None => self.start(id),
            _ => {}
        }
        self.seen[channel] = true;
        self.check()
    }

    /// `channel` ended: it will deliver no barrier, and counts as aligned from now on.
    pub(crate) fn on_end_of_input(&mut self, channel: usize) -> Alignment {
        self.ended[channel] = true;
        if self.current.is_some() {
            self.check()
        } else {
            Alignment::Pending
        }
    }

    fn start(&mut self, id: u64) {
        self.current = Some(id);
        self.seen.iter_mut().for_each(|s| *s = false);
    }

    fn check(&mut self) -> Alignment {
        let done = self.seen.iter().zip(&self.ended).all(|(s, e)| *s || *e);
        match (done, self.current) {
            (true, Some(id)) => {
                self.current = None;
                self.last_aligned = Some(id);
                self.seen.iter_mut().for_each(|s| *s = false);
                Alignment::Aligned(id)
            }
            _ => Alignment::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_blocks_each_channel_until_all_delivered() {
        let mut a = BarrierAligner::new(3, AlignMode::ExactlyOnce);
        assert_eq!(a.on_barrier(1, 1), Alignment::Pending);
        assert!(a.is_blocked(1) && !a.is_blocked(0) && !a.is_blocked(2));
        assert_eq!(a.on_barrier(0, 1), Alignment::Pending);
        assert!(a.is_blocked(0));
        assert_eq!(a.on_barrier(2, 1), Alignment::Aligned(1));
        assert!(!a.is_blocked(0) && !a.is_blocked(1) && !a.is_blocked(2));
        assert_eq!(a.in_progress(), None);
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut a = BarrierAligner::new(2, AlignMode::AtLeastOnce);
        assert_eq!(a.on_barrier(0, 4), Alignment::Pending);
        assert!(!a.is_blocked(0));
        assert_eq!(a.on_barrier(1, 4), Alignment::Aligned(4));
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut a = BarrierAligner::new(2, AlignMode::ExactlyOnce);
        assert_eq!(a.on_barrier(0, 1), Alignment::Pending);
        assert_eq!(a.on_end_of_input(1), Alignment::Aligned(1));
        assert_eq!(a.on_barrier(0, 2), Alignment::Aligned(2));
    }

    #[test]
    fn a_newer_barrier_supersedes_and_stale_ones_are_ignored() {
        let mut a = BarrierAligner::new(2, AlignMode::ExactlyOnce);
        assert_eq!(a.on_barrier(0, 1), Alignment::Pending);
        assert_eq!(a.on_barrier(1, 2), Alignment::Pending);
        assert_eq!(a.in_progress(), Some(2));
        assert!(
            !a.is_blocked(0),
            "checkpoint 1 was given up: channel 0 reads on"
        );
        assert_eq!(
            a.on_barrier(0, 1),
            Alignment::Pending,
            "late barrier of 1 is ignored"
        );
        assert_eq!(a.on_barrier(0, 2), Alignment::Aligned(2));
        assert_eq!(a.on_barrier(1, 2), Alignment::Pending, "2 is already done");
    }
}
