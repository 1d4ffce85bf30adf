//! The input gate's tests: channel state of unaligned checkpoints, overtaking barriers.

use super::*;
use crate::channel::{channel, Barrier, Batch};
use crate::metrics::QueueUsage;
use crate::operator::{Control, Output};
use crate::sync::AtomicWaker;
use crate::time::Watermark;

/// Notes what reaches it: each record as `r{x}`, each watermark as `w{t}` or `idle`.
#[derive(Clone, Default)]
struct Seen(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Seen {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
    fn note(&self, s: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }
}

impl Output<u64> for Seen {
    fn push(&mut self, batch: &mut Vec<u64>) -> Result<(), TaskError> {
        for x in batch.drain(..) {
            self.note(format!("r{x}"));
        }
        Ok(())
    }
    fn flush(&mut self) {}
    fn finish(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_pending(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Poll::Ready(Ok(()))
    }
    fn usage(&self, _usage: &mut QueueUsage) {}
    fn control(&mut self, c: &mut Control<'_>) {
        c.unsupported()
    }
    fn barrier(
        &mut self,
        _id: u64,
        _w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_complete(&mut self, _id: u64) -> Result<(), TaskError> {
        Ok(())
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.note(match w {
            Watermark::At(t) => format!("w{t}"),
            Watermark::Idle => "idle".into(),
        });
        Ok(())
    }
}

fn batch(v: Vec<u64>) -> Event<u64> {
    Event::Batch(Batch::Owned(v))
}

/// Two channels; an unaligned checkpoint records channel 1's batches and watermarks
/// after the snapshot. A gate restored from that state tells its operator the watermark it
/// had passed on at the snapshot, merges the channels' watermarks from where they were then,
/// and takes the recorded watermarks at their place among the records.
#[test]
fn an_unaligned_checkpoint_keeps_the_watermarks_in_flight_in_place() {
    let waker = || std::sync::Arc::new(AtomicWaker::new());
    let (tx0, rx0) = channel::<u64>(16, waker());
    let (tx1, rx1) = channel::<u64>(16, waker());
    let seen = Seen::default();
    let mut gate = typed_gate(vec![rx0, rx1], Box::new(seen.clone()), None);
    let run = |gate: &mut Box<dyn InputGate>| {
        while !matches!(gate.try_step(&|_| false), Ok(GateStep::Empty)) {}
    };
    // Before the snapshot: channel 0 at 100, channel 1 at 50.
    tx0.try_send(Event::Watermark(Watermark::At(100))).unwrap();
    tx1.try_send(Event::Watermark(Watermark::At(50))).unwrap();
    run(&mut gate);
    assert_eq!(seen.take(), ["w50"]);
    // The snapshot; channel 1 still owes its barrier.
    gate.set_recording(1, true);
    tx1.try_send(batch(vec![1])).unwrap();
    tx1.try_send(Event::Watermark(Watermark::At(80))).unwrap();
    tx1.try_send(batch(vec![2])).unwrap();
    run(&mut gate);
    assert_eq!(seen.take(), ["r1", "w80", "r2"]);
    gate.set_recording(1, false);
    let bytes = gate.take_channel_state().expect("encodes");

    let state = ChannelState::<u64>::decode(&bytes).expect("decodes");
    let (_t0, rx0) = channel::<u64>(16, waker());
    let (_t1, rx1) = channel::<u64>(16, waker());
    let seen = Seen::default();
    let mut restored = replaying_gate(vec![rx0, rx1], Box::new(seen.clone()), state);
    run(&mut restored);
    // The operator learns the watermark it had seen at the snapshot (50) before the first
    // record (an operator that does not keep it in its state would take the records up to
    // the next watermark as on time); channel 0's 100 came from the snapshot's merge: 80
    // passes at once.
    assert_eq!(seen.take(), ["w50", "r1", "w80", "r2"]);
}

/// An overtaking barrier on channel 1 while channel 0 owes its barrier: the checkpoint's
/// channel state is what channel 0 delivered after the snapshot, then the events the
/// barrier overtook on channel 1 (taken at once, processed later as usual); restored
/// channel state not yet replayed goes first. A restore replays it in that order.
#[test]
fn an_overtaking_barrier_records_what_it_overtook_and_what_is_left_to_replay() {
    let waker = || std::sync::Arc::new(AtomicWaker::new());
    let (tx0, rx0) = channel::<u64>(2, waker());
    let (tx1, rx1) = channel::<u64>(2, waker());
    let seen = Seen::default();
    let restored = ChannelState {
        marks: None,
        in_flight: vec![InFlight::Batch(0, vec![100]), InFlight::Batch(1, vec![101])],
    };
    let mut gate = replaying_gate(vec![rx0, rx1], Box::new(seen.clone()), restored);
    let run = |gate: &mut Box<dyn InputGate>| {
        while !matches!(gate.try_step(&|_| false), Ok(GateStep::Empty)) {}
    };
    // One replayed batch is processed before the checkpoint, one after.
    assert!(matches!(gate.try_step(&|_| false), Ok(GateStep::Batch(1))));
    tx1.try_send(batch(vec![1])).unwrap();
    tx1.try_send(batch(vec![2])).unwrap();
    tx1.send_overtaking(Barrier::new(9), vec![batch(vec![3])])
        .unwrap();
    assert_eq!(gate.overtaking(false), Some((1, Barrier::new(9))));
    let mut w = crate::checkpoint::StateWriter {
        unaligned: true,
        ..Default::default()
    };
    gate.barrier(9, &mut w).expect("snapshot");
    gate.set_recording(0, true);
    gate.set_recording(1, true);
    assert!(gate.take_overtaken(1, 9, true));
    gate.set_recording(1, false);
    assert_eq!(gate.overtaking(false), None);
    tx0.try_send(batch(vec![4])).unwrap();
    run(&mut gate);
    assert_eq!(seen.take(), ["r100", "r101", "r4", "r1", "r2", "r3"]);
    gate.set_recording(0, false);
    let state =
        ChannelState::<u64>::decode(&gate.take_channel_state().expect("encodes")).expect("decodes");
    let (_t0, rx0) = channel::<u64>(2, waker());
    let (_t1, rx1) = channel::<u64>(2, waker());
    let seen = Seen::default();
    let mut again = replaying_gate(vec![rx0, rx1], Box::new(seen.clone()), state);
    run(&mut again);
    assert_eq!(seen.take(), ["r101", "r1", "r2", "r3", "r4"]);
}

/// Channel state written before watermarks were kept (the batches alone) still reads.
#[test]
fn channel_state_of_the_batches_alone_still_reads() {
    let old: Vec<Vec<u64>> = vec![vec![1, 2], vec![3]];
    let bytes = crate::checkpoint::encode(&old).expect("encodes");
    let state = ChannelState::<u64>::decode(&bytes).expect("decodes");
    assert!(state.marks.is_none());
    assert!(matches!(
        state.in_flight.as_slice(),
        [InFlight::Batch(0, a), InFlight::Batch(0, b)] if a == &[1, 2] && b == &[3]
    ));
}

/// A head with work the `MAX` watermark makes due (`due` units, one done per
/// `poll_pending`), as a window operator's windows left at the end of input. Its `finish`
/// notes how many were still due when it came.
#[derive(Default)]
struct Busy {
    due: usize,
    finished_with: std::sync::Arc<std::sync::Mutex<Option<usize>>>,
}

impl Output<u64> for Busy {
    fn push(&mut self, _batch: &mut Vec<u64>) -> Result<(), TaskError> {
        Ok(())
    }
    fn flush(&mut self) {}
    fn finish(&mut self) -> Result<(), TaskError> {
        *self.finished_with.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.due);
        Ok(())
    }
    fn poll_pending(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        self.due = self.due.saturating_sub(1);
        Poll::Ready(Ok(()))
    }
    fn usage(&self, _usage: &mut QueueUsage) {}
    fn control(&mut self, c: &mut Control<'_>) {
        c.unsupported()
    }
    fn barrier(
        &mut self,
        _id: u64,
        _w: &mut crate::checkpoint::StateWriter,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_complete(&mut self, _id: u64) -> Result<(), TaskError> {
        Ok(())
    }
    fn watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        if w == Watermark::At(crate::time::EventTime::MAX) {
            self.due = 3;
        }
        Ok(())
    }
    fn holds_records(&self) -> bool {
        self.due > 0
    }
}

/// The end of every channel with work due at the `MAX` watermark: the operator is told the
/// end only once that work is done, a unit per `poll_pending` (its subtask's mailbox is
/// served between them); until then the gate has not ended. Without such work, the end is
/// told at once.
#[test]
fn the_end_waits_for_the_work_the_last_watermark_made_due() {
    let waker = || std::sync::Arc::new(AtomicWaker::new());
    let (tx, rx) = channel::<u64>(4, waker());
    let busy = Busy::default();
    let finished = busy.finished_with.clone();
    let mut gate = typed_gate(vec![rx], Box::new(busy), None);
    tx.try_send(Event::EndOfInput).unwrap();
    assert!(matches!(
        gate.try_step(&|_| false),
        Ok(GateStep::ChannelEnded {
            channel: 0,
            all: false
        })
    ));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    for _ in 0..3 {
        assert!(!gate.is_ended());
        assert!(matches!(gate.try_step(&|_| false), Ok(GateStep::Empty)));
        assert_eq!(*finished.lock().unwrap(), None, "told the end while busy");
        assert!(gate.poll_pending(&mut cx).is_ready());
    }
    assert!(matches!(gate.try_step(&|_| false), Ok(GateStep::Finished)));
    assert!(gate.is_ended());
    assert_eq!(*finished.lock().unwrap(), Some(0));

    let (tx, rx) = channel::<u64>(4, waker());
    let mut gate = typed_gate(vec![rx], Box::new(Seen::default()), None);
    tx.try_send(Event::EndOfInput).unwrap();
    assert!(matches!(
        gate.try_step(&|_| false),
        Ok(GateStep::ChannelEnded {
            channel: 0,
            all: true
        })
    ));
    assert!(gate.is_ended());
}
