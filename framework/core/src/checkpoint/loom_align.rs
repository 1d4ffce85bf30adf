//! Loom models of barrier alignment: two producer threads, each owning one credit channel into
//! one consumer thread, which reads both channels under a
//! [`BarrierAligner`] and takes "snapshot 1" when `Barrier(1)` is aligned.
//!
//! Checked under every interleaving (bounded by `LOOM_MAX_PREEMPTIONS`, 2 if unset):
//! - exactly-once: snapshot 1 holds exactly the records each producer sent before its
//!   `Barrier(1)` (all of them, none after), and every record is processed exactly once;
//! - at-least-once: snapshot 1 holds every record sent before a `Barrier(1)` (it may hold
//!   later ones too), and every record is processed exactly once.
//!
//! Nothing spins: the producers wait on the channel's sender waker and the consumer on the
//! receive waker its channels share, so a lost wake-up shows up as a loom deadlock.
//!
//! Run with
//! `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.

use std::task::{Context, Wake, Waker};

use crate::channel::{channel, Barrier, Batch, Event, Full, Receiver, Sender};
use crate::checkpoint::align::{AlignMode, Alignment, BarrierAligner};
use crate::sync::{Arc, AtomicWaker};

/// Credit of each channel, in events. With 2, a producer still runs out of credit (it sends
/// five events, and an aligned channel is not read), so the refused-send path is explored;
/// with 1 it took about 40x as many interleavings (some 40 s a model).
const CAPACITY: usize = 2;

/// What producer `p` sends before and after its `Barrier(1)`, batch by batch. Values are
/// distinct across producers: `p * 100 + k`, post-barrier ones from `p * 100 + 50`.
fn pre_barrier(p: u32) -> Vec<Vec<u32>> {
    vec![vec![p * 100, p * 100 + 1], vec![p * 100 + 2]]
}

fn post_barrier(p: u32) -> Vec<Vec<u32>> {
    vec![vec![p * 100 + 50]]
}

pub(super) fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// A waker that notes a wake-up and unparks the loom thread that made it; [`park`] waits
/// for a noted wake-up. Unparking adds no scheduling point on the waking side (a loom
/// `Notify` or `Condvar` would, and the models would not finish in time).
///
/// The note is a plain std atomic, invisible to loom (loom runs one thread at a time, so it
/// needs no ordering of its own): loom's park token alone is not enough, because loom drops
/// an unpark that reaches a thread blocked on a loom mutex or inside `yield_now` (its
/// `AtomicWaker` mock yields when `register` races a `wake`), where std would keep it. With
/// the note, such an unpark is seen at the next [`park`], so only a wake-up the code under
/// test really lost (one never sent) is a deadlock.
///
/// The unpark itself goes only to a thread inside [`park`] (a second plain atomic says so):
/// loom asserts ("expected to be able to acquire lock") when an unpark makes a thread that
/// waits for a loom mutex runnable, which three preemptions reach. A thread not in `park`
/// sees the note before it parks (loom switches threads only at its own operations, and
/// none lies between the note's check and the park).
pub(super) struct Unpark {
    thread: loom::thread::Thread,
    woken: std::sync::atomic::AtomicBool,
    parked: std::sync::atomic::AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::SeqCst);
        if self.parked.load(std::sync::atomic::Ordering::SeqCst) {
            self.thread.unpark();
        }
    }
}

/// A waker for the calling thread, and its note of wake-ups.
pub(super) fn waker() -> (Waker, std::sync::Arc<Unpark>) {
    let me = std::sync::Arc::new(Unpark {
        thread: loom::thread::current(),
        woken: std::sync::atomic::AtomicBool::new(false),
        parked: std::sync::atomic::AtomicBool::new(false),
    });
    (Waker::from(me.clone()), me)
}

/// Blocks until the calling thread's waker was woken (at once if it was since the last
/// park); a lost wake-up is a loom deadlock.
pub(super) fn park(me: &Unpark) {
    while !me.woken.swap(false, std::sync::atomic::Ordering::SeqCst) {
        me.parked.store(true, std::sync::atomic::Ordering::SeqCst);
        loom::thread::park();
        me.parked.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Sends `event`, waiting for credit on the channel's sender waker.
pub(super) fn send(tx: &Sender<u32>, cx: &mut Context<'_>, me: &Unpark, mut event: Event<u32>) {
    loop {
        match tx.send_or_register(cx, event) {
            Ok(()) => return,
            Err(Full(e)) => {
                event = e;
                park(me);
            }
        }
    }
}

/// Producer `p`: its pre-barrier batches, `Barrier(1)`, its post-barrier batches, end of input.
fn produce(p: u32, tx: Sender<u32>) {
    let (waker, me) = waker();
    let mut cx = Context::from_waker(&waker);
    for b in pre_barrier(p) {
        send(&tx, &mut cx, &me, Event::Batch(Batch::Owned(b)));
    }
    send(&tx, &mut cx, &me, Event::Barrier(Barrier::new(1)));
    for b in post_barrier(p) {
        send(&tx, &mut cx, &me, Event::Batch(Batch::Owned(b)));
    }
    send(&tx, &mut cx, &me, Event::EndOfInput);
}

/// What the consumer saw.
struct Outcome {
    /// Every record, in processing order.
    processed: Vec<u32>,
    /// `processed` when checkpoint 1 was aligned.
    snapshot: Vec<u32>,
}

/// The consumer's state: its two channels, read as the aligner allows.
struct Consumer {
    rxs: [Receiver<u32>; 2],
    aligner: BarrierAligner,
    ended: [bool; 2],
    processed: Vec<u32>,
    snapshot: Option<Vec<u32>>,
}

impl Consumer {
    fn on_alignment(&mut self, a: Alignment) {
        if let Alignment::Aligned(id) = a {
            assert_eq!(id, 1, "only checkpoint 1 is in flight");
            assert!(self.snapshot.is_none(), "checkpoint 1 aligned twice");
            self.snapshot = Some(self.processed.clone());
        }
    }

    /// Takes at most one event from each readable channel; whether it took any.
    fn poll(&mut self) -> bool {
        let mut progress = false;
        for ch in 0..2 {
            if self.ended[ch] || self.aligner.is_blocked(ch) {
                continue;
            }
            let Some(event) = self.rxs[ch].try_recv() else {
                continue;
            };
            progress = true;
            match event {
                Event::Batch(b) => {
                    let mut records = Vec::new();
                    b.move_into(&mut records);
                    self.processed.extend(records);
                }
                Event::Barrier(b) => {
                    let a = self.aligner.on_barrier(ch, b.id);
                    self.on_alignment(a);
                }
                Event::Watermark(_) => {}
                Event::EndOfInput => {
                    self.ended[ch] = true;
                    let a = self.aligner.on_end_of_input(ch);
                    self.on_alignment(a);
                }
            }
        }
        progress
    }
}

/// A consumer's read loop on the calling thread: `poll` until `ended`; when a poll does
/// nothing, it registers on the channels' shared receive waker, polls once more (an event
/// sent before the registration woke no one) and parks.
pub(super) fn read_until_ended<C>(
    c: &mut C,
    rx_waker: &AtomicWaker,
    poll: fn(&mut C) -> bool,
    ended: fn(&C) -> bool,
) {
    let (waker, me) = waker();
    while !ended(c) {
        if poll(c) {
            continue;
        }
        rx_waker.register(&waker);
        if !poll(c) {
            park(&me);
        }
    }
}

/// The consumer: reads both channels as the aligner allows until both ended; when no readable
/// channel has an event it registers on the shared receive waker, looks once more (an event
/// sent before the registration woke no one) and waits.
fn consume(rxs: [Receiver<u32>; 2], rx_waker: &Arc<AtomicWaker>, mode: AlignMode) -> Outcome {
    let mut c = Consumer {
        rxs,
        aligner: BarrierAligner::new(2, mode),
        ended: [false; 2],
        processed: Vec::new(),
        snapshot: None,
    };
    read_until_ended(&mut c, rx_waker, Consumer::poll, |c| {
        c.ended.iter().all(|e| *e)
    });
    Outcome {
        processed: c.processed,
        snapshot: c
            .snapshot
            .expect("both channels delivered Barrier(1): checkpoint 1 aligned"),
    }
}

/// Runs two producers against one consumer in `mode`, under every interleaving, and checks
/// the outcome with `check`.
fn model(mode: AlignMode, check: fn(&Outcome, &[u32], &[u32])) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(move || {
        let rx_waker = Arc::new(AtomicWaker::new());
        let (tx0, rx0) = channel::<u32>(CAPACITY, rx_waker.clone());
        let (tx1, rx1) = channel::<u32>(CAPACITY, rx_waker.clone());
        let p0 = loom::thread::spawn(move || produce(0, tx0));
        let p1 = loom::thread::spawn(move || produce(1, tx1));
        // The consumer runs on a thread of its own, so that no wake-up can reach a thread
        // blocked in `join`: a producer's last send may wake the consumer after it read
        // everything, and loom aborts on an unpark of a joining thread ("assertion failed:
        // state.notified", tokio-rs/loom#249), an unpark std allows.
        let consumer = loom::thread::spawn(move || consume([rx0, rx1], &rx_waker, mode));
        p0.join().unwrap();
        p1.join().unwrap();
        let out = consumer.join().unwrap();

        let pre: Vec<u32> = (0..2).flat_map(pre_barrier).flatten().collect();
        let post: Vec<u32> = (0..2).flat_map(post_barrier).flatten().collect();
        // Every record processed exactly once, and each channel's in its order.
        let all = sorted(pre.iter().chain(&post).copied().collect());
        assert_eq!(sorted(out.processed.clone()), all, "lost or duplicated");
        for p in 0..2u32 {
            let mine: Vec<u32> = out
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
        check(&out, &pre, &post);
    });
}

/// Exactly-once: snapshot 1 is exactly the records sent before `Barrier(1)` on every channel:
/// none that follows a barrier is processed before the snapshot, and none before it is missing.
#[test]
fn loom_aligned_snapshot_is_exactly_the_pre_barrier_records() {
    model(AlignMode::ExactlyOnce, |out, pre, _post| {
        assert_eq!(
            sorted(out.snapshot.clone()),
            sorted(pre.to_vec()),
            "snapshot 1 must hold every pre-barrier record and no post-barrier one"
        );
    });
}

/// At-least-once: snapshot 1 holds every record sent before `Barrier(1)` on every channel
/// (post-barrier records of a channel whose barrier came first may be in it too).
#[test]
fn loom_at_least_once_snapshot_holds_every_pre_barrier_record() {
    model(AlignMode::AtLeastOnce, |out, pre, post| {
        for r in pre {
            assert!(
                out.snapshot.contains(r),
                "pre-barrier record {r} missing from snapshot 1: {:?}",
                out.snapshot
            );
        }
        for r in &out.snapshot {
            assert!(pre.contains(r) || post.contains(r), "unknown record {r}");
        }
    });
}
