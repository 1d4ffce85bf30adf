//! Loom models of unaligned checkpoints' overtaking barriers: two producer threads, each
//! owning one credit channel into one consumer thread. Each producer sends its pre-barrier
//! batches (waiting for credit), then `Barrier(1)` overtaking (`Sender::send_overtaking`; one
//! producer with a batch it held back for credit, the other with none), then its post-barrier
//! batch and its end. The consumer
//! takes checkpoint 1's snapshot at the first overtaking barrier it sees, keeps copies of the
//! events each barrier overtook (`Receiver::take_overtaken`), and records what a channel that
//! still owes its barrier delivers after the snapshot, as `gate` and `task::driver` do.
//!
//! Checked under every interleaving (bounded by `LOOM_MAX_PREEMPTIONS`, 2 if unset; at 3 it
//! did not finish in 15 minutes, nor did a model with two pre-barrier batches per producer
//! in 14): the snapshot and the channel state together hold every
//! pre-barrier record exactly once and no post-barrier one (what a restore replays is exactly
//! what the snapshot misses), and every record is processed exactly once, in each channel's
//! order. A lost wake-up is a loom deadlock.
//!
//! Run with
//! `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.

use std::task::Context;

use super::loom_align::{park, send, sorted, waker};
use crate::channel::{channel, Batch, Event, Receiver, Sender};
use crate::sync::{Arc, AtomicWaker};

/// Credit of each channel, in events.
const CAPACITY: usize = 2;

/// Producer `p`'s batches before its barrier (the last is held back and overtaken with the
/// barrier), and after it. Values are `p * 100 + k`, post-barrier ones from `p * 100 + 50`.
fn pre_barrier(p: u32) -> Vec<Vec<u32>> {
    vec![vec![p * 100], vec![p * 100 + 1], vec![p * 100 + 2]]
}

fn post_barrier(p: u32) -> Vec<Vec<u32>> {
    vec![vec![p * 100 + 50]]
}

fn produce(p: u32, tx: Sender<u32>) {
    let (waker, me) = waker();
    let mut cx = Context::from_waker(&waker);
    let mut pre = pre_barrier(p);
    // Producer 0 held its last batch back for credit; producer 1 sent everything (its barrier
    // may then overtake nothing, and what follows it must still not pass for data before it).
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
        tx.send_overtaking(1, held).is_ok(),
        "a plain channel takes an overtaking barrier"
    );
    for b in post_barrier(p) {
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
    rxs: [Receiver<u32>; 2],
    ended: [bool; 2],
    /// The channel's barrier was taken.
    done: [bool; 2],
    /// Recording the channel's deliveries as channel state (snapshot taken, barrier owed).
    recording: [bool; 2],
    processed: Vec<u32>,
    snapshot: Option<Vec<u32>>,
    channel_state: Vec<u32>,
}

impl Consumer {
    /// Overtaking barriers first, then at most one event from each channel; whether it did
    /// anything.
    fn poll(&mut self) -> bool {
        let mut progress = false;
        for ch in 0..2 {
            let Some(id) = self.rxs[ch].overtaking() else {
                continue;
            };
            assert_eq!(id, 1, "only checkpoint 1 is in flight");
            progress = true;
            if self.snapshot.is_none() {
                self.snapshot = Some(self.processed.clone());
                self.recording = [!self.done[0], !self.done[1]];
            }
            let copies = self.rxs[ch].take_overtaken(id).expect("seen above");
            self.channel_state.extend(records(copies));
            self.done[ch] = true;
            self.recording[ch] = false;
        }
        for ch in 0..2 {
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

#[test]
fn loom_overtaking_barriers_split_the_pre_barrier_records_exactly() {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(|| {
        let rx_waker = Arc::new(AtomicWaker::new());
        let (tx0, rx0) = channel::<u32>(CAPACITY, rx_waker.clone());
        let (tx1, rx1) = channel::<u32>(CAPACITY, rx_waker.clone());
        let p0 = loom::thread::spawn(move || produce(0, tx0));
        let p1 = loom::thread::spawn(move || produce(1, tx1));
        // On a thread of its own, as in `loom_align` (no wake-up may reach a joining thread).
        let consumer = loom::thread::spawn(move || {
            let (waker, me) = waker();
            let mut c = Consumer {
                rxs: [rx0, rx1],
                ended: [false; 2],
                done: [false; 2],
                recording: [false; 2],
                processed: Vec::new(),
                snapshot: None,
                channel_state: Vec::new(),
            };
            while !c.ended.iter().all(|e| *e) {
                if c.poll() {
                    continue;
                }
                rx_waker.register(&waker);
                if !c.poll() {
                    park(&me);
                }
            }
            c
        });
        p0.join().unwrap();
        p1.join().unwrap();
        let c = consumer.join().unwrap();

        let pre: Vec<u32> = (0..2).flat_map(pre_barrier).flatten().collect();
        let post: Vec<u32> = (0..2).flat_map(post_barrier).flatten().collect();
        let all = sorted(pre.iter().chain(&post).copied().collect());
        assert_eq!(sorted(c.processed.clone()), all, "lost or duplicated");
        for p in 0..2u32 {
            let mine: Vec<u32> = c
                .processed
                .iter()
                .copied()
                .filter(|r| r / 100 == p)
                .collect();
            let sent: Vec<u32> = pre_barrier(p)
                .into_iter()
                .chain(post_barrier(p))
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
