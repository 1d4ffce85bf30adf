//! Loom models of unaligned checkpoints' overtaking barriers: producer threads, each owning
//! one credit channel into one consumer thread. Each producer sends its pre-barrier batches
//! (waiting for credit), then `Barrier(1)` overtaking (`Sender::send_overtaking`; producer 0
//! with a batch it held back for credit, any other with none), then its post-barrier batches
//! and its end. The consumer takes checkpoint 1's snapshot at the first overtaking barrier it
//! sees, keeps copies of the events each barrier overtook (`Receiver::take_overtaken`), and
//! records what a channel that still owes its barrier delivers after the snapshot, as `gate`
//! and `task::driver` do.
//!
//! Checked under every interleaving: the snapshot and the channel state together hold every
//! pre-barrier record exactly once and no post-barrier one (what a restore replays is exactly
//! what the snapshot misses), and every record is processed exactly once, in each channel's
//! order. A lost wake-up is a loom deadlock.
//!
//! Three shapes, each bounded by `LOOM_MAX_PREEMPTIONS` if set:
//! - [`TWO_CHANNELS`] (2 preemptions unless set): two producers, three pre-barrier batches
//!   each and credit for two, so the refused-send path and a barrier passing a queue of two
//!   run beside the other channel's barrier. At 3 it did not finish in 15 minutes.
//! - [`ONE_CHANNEL_SMALL`] and [`TWO_CHANNELS_SMALL`] (3 unless set): one producer with three
//!   batches sent at credit 1 and one held back (the barrier passes the queue and the held
//!   batch while the consumer takes from it), then two more; two producers with one batch
//!   each (one queued, one held), where the first barrier's snapshot meets the other channel
//!   still owing its barrier. The consumer is the model's own thread.
//!
//! Run with
//! `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`
//! (every loom model), and the small ones at 3 with
//! `RUSTFLAGS="--cfg weir_loom" cargo test -p weir --lib --release loom_overtake_small`.

use std::task::Context;

use super::loom_align::{read_until_ended, send, sorted, waker};
use crate::channel::{channel, Barrier, Batch, Event, Receiver, Sender};
use crate::sync::{Arc, AtomicWaker};

/// One model's size: its producers, their batches and the channels' credit.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Producer threads, one channel each.
    producers: u32,
    /// Batches each producer has before its barrier; producer 0 holds its last one back for
    /// credit and sends it overtaken with the barrier.
    pre: u32,
    /// Batches each producer sends after its barrier.
    post: u32,
    /// Credit of each channel, in events.
    capacity: usize,
    /// The preemption bound when `LOOM_MAX_PREEMPTIONS` is not set.
    preemptions: usize,
}

/// Two producers, three pre-barrier batches at credit 2 (see the module doc).
const TWO_CHANNELS: Shape = Shape {
    producers: 2,
    pre: 3,
    post: 1,
    capacity: 2,
    preemptions: 2,
};

/// One producer, three batches queued at credit 1 and one held back, two after its barrier
/// (see the module doc).
const ONE_CHANNEL_SMALL: Shape = Shape {
    producers: 1,
    pre: 4,
    post: 2,
    capacity: 1,
    preemptions: 3,
};

/// Two producers with one pre-barrier batch each (see the module doc).
const TWO_CHANNELS_SMALL: Shape = Shape {
    producers: 2,
    pre: 1,
    post: 1,
    capacity: 1,
    preemptions: 3,
};

/// Producer `p`'s batches before its barrier. Values are `p * 100 + k`, post-barrier ones
/// from `p * 100 + 50`.
fn pre_barrier(shape: Shape, p: u32) -> Vec<Vec<u32>> {
    (0..shape.pre).map(|k| vec![p * 100 + k]).collect()
}

fn post_barrier(shape: Shape, p: u32) -> Vec<Vec<u32>> {
    (0..shape.post).map(|k| vec![p * 100 + 50 + k]).collect()
}

fn produce(shape: Shape, p: u32, tx: Sender<u32>) {
    let (waker, me) = waker();
    let mut cx = Context::from_waker(&waker);
    let mut pre = pre_barrier(shape, p);
    // Producer 0 held its last batch back for credit; the others sent everything (their
    // barrier may then overtake nothing, and what follows it must still not pass for data
    // before it).
    let held: Vec<Event<u32>> = match p {
        0 => pre
            .pop()
            .map(|b| Event::Batch(Batch::Owned(b)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    for b in pre {
        send(&tx, &mut cx, &me, Event::Batch(Batch::Owned(b)));
    }
    assert!(
        tx.send_overtaking(Barrier::new(1), held).is_ok(),
        "a plain channel takes an overtaking barrier"
    );
    for b in post_barrier(shape, p) {
        send(&tx, &mut cx, &me, Event::Batch(Batch::Owned(b)));
    }
    send(&tx, &mut cx, &me, Event::EndOfInput);
}

fn records(events: Vec<Event<u32>>) -> Vec<u32> {
    let mut out = Vec::new();
    for e in events {
        if let Event::Batch(b) = e {
            let mut r = Vec::new();
            b.move_into(&mut r);
            out.extend(r);
        }
    }
    out
}

struct Consumer {
    rxs: Vec<Receiver<u32>>,
    ended: Vec<bool>,
    /// The channel's barrier was taken.
    done: Vec<bool>,
    /// Recording the channel's deliveries as channel state (snapshot taken, barrier owed).
    recording: Vec<bool>,
    processed: Vec<u32>,
    snapshot: Option<Vec<u32>>,
    channel_state: Vec<u32>,
}

impl Consumer {
    fn new(rxs: Vec<Receiver<u32>>) -> Self {
        let n = rxs.len();
        Consumer {
            rxs,
            ended: vec![false; n],
            done: vec![false; n],
            recording: vec![false; n],
            processed: Vec::new(),
            snapshot: None,
            channel_state: Vec::new(),
        }
    }

    /// Overtaking barriers first, then at most one event from each channel; whether it did
    /// anything.
    fn poll(&mut self) -> bool {
        let mut progress = false;
        for ch in 0..self.rxs.len() {
            let Some(id) = self.rxs[ch].overtaking().map(|b| b.id) else {
                continue;
            };
            assert_eq!(id, 1, "only checkpoint 1 is in flight");
            progress = true;
            if self.snapshot.is_none() {
                self.snapshot = Some(self.processed.clone());
                self.recording = self.done.iter().map(|d| !d).collect();
            }
            let copies = self.rxs[ch].take_overtaken(id).expect("seen above");
            self.channel_state.extend(records(copies));
            self.done[ch] = true;
            self.recording[ch] = false;
        }
        for ch in 0..self.rxs.len() {
            if self.ended[ch] {
                continue;
            }
            let Some(event) = self.rxs[ch].try_recv() else {
                continue;
            };
            progress = true;
            match event {
                Event::Batch(b) => {
                    let mut r = Vec::new();
                    b.move_into(&mut r);
                    if self.recording[ch] {
                        self.channel_state.extend(r.iter().copied());
                    }
                    self.processed.extend(r);
                }
                Event::EndOfInput => {
                    assert!(
                        self.done[ch],
                        "channel {ch} ended before its barrier was taken"
                    );
                    self.ended[ch] = true;
                }
                Event::Barrier(_) | Event::Watermark(_) => panic!("no in-band events here"),
            }
        }
        progress
    }
}

/// Checks `shape` under every interleaving loom explores.
fn check(shape: Shape) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(shape.preemptions);
    }
    builder.check(move || {
        let rx_waker = Arc::new(AtomicWaker::new());
        let mut producers = Vec::new();
        let mut rxs = Vec::new();
        for p in 0..shape.producers {
            let (tx, rx) = channel::<u32>(shape.capacity, rx_waker.clone());
            rxs.push(rx);
            producers.push(loom::thread::spawn(move || produce(shape, p, tx)));
        }
        // The consumer is the model's own thread (one thread fewer to interleave): it joins
        // the producers only once every channel ended, and a wake-up after that (a dropped
        // sender's) unparks no one, as [`super::loom_align::Unpark`] unparks only a thread
        // inside `park`.
        let mut c = Consumer::new(rxs);
        read_until_ended(&mut c, &rx_waker, Consumer::poll, |c| {
            c.ended.iter().all(|e| *e)
        });
        for p in producers {
            p.join().unwrap();
        }

        let producers = 0..shape.producers;
        let pre: Vec<u32> = producers
            .clone()
            .flat_map(|p| pre_barrier(shape, p))
            .flatten()
            .collect();
        let post: Vec<u32> = producers
            .clone()
            .flat_map(|p| post_barrier(shape, p))
            .flatten()
            .collect();
        let all = sorted(pre.iter().chain(&post).copied().collect());
        assert_eq!(sorted(c.processed.clone()), all, "lost or duplicated");
        for p in producers {
            let mine: Vec<u32> = c
                .processed
                .iter()
                .copied()
                .filter(|r| r / 100 == p)
                .collect();
            let sent: Vec<u32> = pre_barrier(shape, p)
                .into_iter()
                .chain(post_barrier(shape, p))
                .flatten()
                .collect();
            assert_eq!(mine, sent, "channel {p} out of order");
        }
        let snapshot = c.snapshot.expect("a barrier was seen");
        let restored: Vec<u32> = snapshot.iter().chain(&c.channel_state).copied().collect();
        assert_eq!(
            sorted(restored),
            sorted(pre),
            "snapshot {snapshot:?} + channel state {:?} must be the pre-barrier records once",
            c.channel_state
        );
    });
}

#[test]
fn loom_overtaking_barriers_split_the_pre_barrier_records_exactly() {
    check(TWO_CHANNELS);
}

#[test]
fn loom_overtake_small_one_channel_barrier_passes_its_queue() {
    check(ONE_CHANNEL_SMALL);
}

#[test]
fn loom_overtake_small_two_channels_snapshot_meets_a_barrier_owed() {
    check(TWO_CHANNELS_SMALL);
}
