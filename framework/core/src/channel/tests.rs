use super::*;
use futures::task::noop_waker;
use std::time::Duration;

fn batch(v: Vec<u32>) -> Event<u32> {
    Event::Batch(Batch::Owned(v))
}

#[test]
fn refuses_when_full_and_hands_the_event_back() {
    let (tx, rx) = channel::<u32>(2, Arc::new(AtomicWaker::new()));
    tx.try_send(batch(vec![1])).unwrap();
    tx.try_send(batch(vec![2])).unwrap();
    let Err(Full(Event::Batch(b))) = tx.try_send(batch(vec![3])) else {
        panic!("third send should be refused")
    };
    assert_eq!(b.len(), 1);
    assert_eq!(rx.queued(), 2);
    let Some(Event::Batch(Batch::Owned(v))) = rx.try_recv() else {
        panic!("expected a batch")
    };
    assert_eq!(v, vec![1]);
    tx.try_send(batch(vec![3])).unwrap();
}

/// A backed-up primary claims a batch before it leaves its channel: a backup attached
/// between the look and the take (the primary may then be fenced and never claim it)
/// still gets the batch, at its position.
#[test]
fn a_batch_looked_at_and_not_yet_taken_reaches_a_backup_attached_meanwhile() {
    let waker = || Arc::new(AtomicWaker::new());
    let (tx, dual, primary, backup) = dual_channel::<u32>(4, waker(), waker());
    tx.try_send(batch(vec![1, 2])).unwrap();
    tx.try_send(Event::Barrier(Barrier::new(7))).unwrap();
    tx.try_send(batch(vec![3])).unwrap();
    assert!(matches!(primary.try_recv_at(), Some((0, Event::Batch(_)))));
    assert!(matches!(
        primary.try_recv_at(),
        Some((
            1,
            Event::Barrier(Barrier {
                id: 7,
                hand_over: false
            })
        ))
    ));
    // The backup fails and is dropped while the primary looks at batch 1.
    drop(backup);
    dual.detach_backup();
    let Some((1, Event::Batch(Batch::Shared(seen)), true)) = primary.try_recv_or_peek() else {
        panic!("expected batch 1, looked at")
    };
    assert_eq!(*seen, vec![3]);
    let replacement = dual.attach_backup(Credit::fixed(4), waker());
    primary.take_peeked(1);
    let Some((1, Event::Batch(b))) = replacement.try_recv_at() else {
        panic!("the replacement backup must get batch 1")
    };
    let mut got = Vec::new();
    b.move_into(&mut got);
    assert_eq!(got, vec![3]);
    assert!(primary.try_recv_at().is_none());
    // Anything else than a batch is taken at once.
    tx.try_send(Event::EndOfInput).unwrap();
    assert!(matches!(
        primary.try_recv_or_peek(),
        Some((2, Event::EndOfInput, false))
    ));
}

fn ids(events: &[Event<u32>]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::Batch(Batch::Shared(a)) => format!("b{}", a[0]),
            Event::Batch(Batch::Owned(v)) => format!("o{}", v[0]),
            Event::Barrier(b) => format!("|{}", b.id),
            Event::Watermark(_) => "w".into(),
            Event::EndOfInput => "end".into(),
        })
        .collect()
}

/// An overtaking barrier is seen at once, ahead of a full queue and of the sender's
/// waiting output (queued without credit); it overtook exactly the events before it,
/// including those the receiver took after it was sent and before it looked.
#[test]
fn an_overtaking_barrier_passes_the_queue_and_the_senders_waiting_output() {
    let (tx, rx) = channel::<u32>(2, Arc::new(AtomicWaker::new()));
    tx.try_send(batch(vec![1])).unwrap();
    tx.try_send(batch(vec![2])).unwrap();
    assert!(tx.try_send(batch(vec![3])).is_err(), "no credit");
    assert_eq!(rx.overtaking(), None);
    tx.send_overtaking(
        Barrier::new(7),
        vec![
            batch(vec![3]),
            Event::Watermark(crate::time::Watermark::At(5)),
        ],
    )
    .unwrap();
    assert_eq!(rx.overtaking().map(|b| b.id), Some(7));
    assert_eq!(rx.queued(), 4, "the waiting output went in without credit");
    // One event is taken before the receiver looks: the barrier is ahead of one fewer.
    assert!(matches!(rx.try_recv(), Some(Event::Batch(_))));
    // After the barrier: not overtaken.
    tx.try_send(batch(vec![4])).ok();
    assert!(rx.take_overtaken(6).is_none(), "not that checkpoint's");
    let copies = rx.take_overtaken(7).expect("the barrier");
    assert_eq!(ids(&copies), ["b2", "b3", "w"]);
    assert_eq!(rx.overtaking(), None);
    // The events stay, in order, and are taken as usual.
    let mut left = Vec::new();
    while let Some(e) = rx.try_recv() {
        left.push(e);
    }
    assert_eq!(ids(&left), ["b2", "b3", "w"]);
}

/// What follows an overtaking barrier is not taken before the barrier is (it would be
/// taken for data before it).
#[test]
fn what_follows_an_overtaking_barrier_waits_for_it() {
    let (tx, rx) = channel::<u32>(4, Arc::new(AtomicWaker::new()));
    tx.try_send(batch(vec![1])).unwrap();
    tx.send_overtaking(Barrier::new(2), Vec::new()).unwrap();
    tx.try_send(batch(vec![3])).unwrap();
    tx.try_send(Event::EndOfInput).unwrap();
    assert!(
        matches!(rx.try_recv(), Some(Event::Batch(_))),
        "before the barrier"
    );
    assert!(rx.try_recv().is_none(), "the barrier comes first");
    assert!(rx.try_recv_unless_batch().is_none());
    assert!(rx.try_recv_or_peek().is_none());
    let copies = rx.take_overtaken(2).expect("the barrier");
    assert_eq!(copies.len(), 0);
    assert!(matches!(rx.try_recv(), Some(Event::Batch(_))), "after it");
    assert!(matches!(rx.try_recv(), Some(Event::EndOfInput)));
}

/// An in-band barrier moved to the head overtakes what was queued before it, not what
/// was queued after it; a newer barrier supersedes an older one not yet taken.
#[test]
fn an_in_band_barrier_moved_ahead_overtakes_only_what_was_before_it() {
    let (tx, rx) = channel::<u32>(8, Arc::new(AtomicWaker::new()));
    assert_eq!(rx.overtake_in_band(), None);
    tx.try_send(batch(vec![1])).unwrap();
    tx.try_send(Event::Barrier(Barrier::new(3))).unwrap();
    tx.try_send(batch(vec![2])).unwrap();
    assert_eq!(rx.overtake_in_band(), Some(3));
    assert_eq!(rx.overtake_in_band(), None, "it left the queue");
    assert_eq!(rx.overtaking().map(|b| b.id), Some(3));
    tx.send_overtaking(Barrier::new(4), Vec::new()).unwrap();
    assert_eq!(rx.overtaking().map(|b| b.id), Some(4));
    let copies = rx.take_overtaken(4).expect("the newer barrier");
    assert_eq!(ids(&copies), ["b1", "b2"]);
    let (tx, rx) = channel::<u32>(8, Arc::new(AtomicWaker::new()));
    tx.try_send(batch(vec![1])).unwrap();
    tx.try_send(Event::Barrier(Barrier::new(3))).unwrap();
    tx.try_send(batch(vec![2])).unwrap();
    rx.overtake_in_band();
    let copies = rx.take_overtaken(3).expect("the barrier");
    assert_eq!(ids(&copies), ["b1"]);
    let mut left = Vec::new();
    while let Some(e) = rx.try_recv() {
        left.push(e);
    }
    assert_eq!(ids(&left), ["b1", "o2"], "the barrier left the queue");
}

/// An older in-band barrier inside what a newer overtaking barrier overtook leaves the
/// queue without moving the newer one's count off by one (the event after the newer
/// barrier stays after it).
#[test]
fn a_stale_in_band_barrier_removed_from_under_an_overtaking_one_keeps_its_count() {
    let (tx, rx) = channel::<u32>(8, Arc::new(AtomicWaker::new()));
    tx.try_send(batch(vec![1])).unwrap();
    tx.try_send(Event::Barrier(Barrier::new(3))).unwrap();
    tx.try_send(batch(vec![2])).unwrap();
    tx.send_overtaking(Barrier::new(4), Vec::new()).unwrap();
    tx.try_send(batch(vec![5])).unwrap();
    assert_eq!(rx.overtake_in_band(), Some(3));
    assert_eq!(rx.overtaking().map(|b| b.id), Some(4));
    let copies = rx.take_overtaken(4).expect("the newer barrier");
    assert_eq!(ids(&copies), ["b1", "b2"], "5 is after the barrier");
}

/// A channel into a backed-up subtask keeps barriers in band: the waiting output comes
/// back to the sender.
#[test]
fn a_dual_channel_hands_an_overtaking_barriers_output_back() {
    let waker = || Arc::new(AtomicWaker::new());
    let (tx, _dual, primary, _backup) = dual_channel::<u32>(4, waker(), waker());
    let back = tx
        .send_overtaking(Barrier::new(1), vec![batch(vec![1])])
        .expect_err("in band");
    assert_eq!(back.len(), 1);
    assert_eq!(primary.overtaking(), None);
}

#[test]
fn refused_sender_is_woken_when_credit_returns() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::task::{Wake, Waker};
    struct Counting(AtomicUsize);
    impl Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let count = std::sync::Arc::new(Counting(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);

    let (tx, rx) = channel::<u32>(1, Arc::new(AtomicWaker::new()));
    assert!(tx.send_or_register(&mut cx, batch(vec![1])).is_ok());
    let Err(Full(refused)) = tx.send_or_register(&mut cx, batch(vec![2])) else {
        panic!("second send should be refused")
    };
    assert_eq!(count.0.load(SeqCst), 0);
    assert!(rx.try_recv().is_some());
    assert_eq!(count.0.load(SeqCst), 1);
    let noop = noop_waker();
    let mut cx = Context::from_waker(&noop);
    assert!(tx.send_or_register(&mut cx, refused).is_ok());
}

/// A waker that counts its wakes.
fn counting() -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::task::Waker,
) {
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);
    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (
        n.clone(),
        std::task::Waker::from(std::sync::Arc::new(Counting(n))),
    )
}

#[test]
fn a_waiting_sender_is_woken_at_half_the_window_or_when_the_receiver_parks() {
    let (n, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    let (tx, rx) = channel::<u32>(8, Arc::new(AtomicWaker::new()));
    for i in 0..8 {
        tx.send_or_register(&mut cx, batch(vec![i])).unwrap();
    }
    assert!(tx.send_or_register(&mut cx, batch(vec![8])).is_err());
    // Full, release wakes nobody: there is no room.
    rx.release();
    for _ in 0..3 {
        rx.try_recv().unwrap();
    }
    // 5 left of 8: not yet.
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 0);
    rx.try_recv().unwrap();
    // 4 left: half the window, the sender goes on.
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Full again, one taken, and the receiver parks: it wakes the sender at once.
    for i in 0..4 {
        tx.send_or_register(&mut cx, batch(vec![i])).unwrap();
    }
    assert!(tx.send_or_register(&mut cx, batch(vec![9])).is_err());
    rx.try_recv().unwrap();
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 1);
    rx.release();
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 2);
}

fn adaptive(target: Duration) -> Credit {
    Credit {
        min: 2,
        max: 16,
        target: Some(target),
    }
}

/// A receiver that needs longer per batch than the target keeps the floor.
#[test]
fn a_slow_receiver_keeps_the_smallest_window() {
    let (tx, rx) = channel::<u32>(
        adaptive(Duration::from_millis(1)),
        Arc::new(AtomicWaker::new()),
    );
    for round in 0..6u32 {
        while tx.try_send(batch(vec![round])).is_ok() {}
        std::thread::sleep(Duration::from_millis(3));
        rx.try_recv().unwrap();
    }
    assert_eq!(rx.capacity(), 2);
}

/// A receiver that gets through batches far within the target opens the window to its
/// ceiling; it then closes again when the receiver slows down. (The target is 10 s so
/// that only a stall of over half a second per batch could make the first part fail.)
#[test]
fn the_window_follows_the_receivers_pace() {
    let credit = adaptive(Duration::from_secs(10));
    let (tx, rx) = channel::<u32>(credit, Arc::new(AtomicWaker::new()));
    for _ in 0..50 {
        while tx.try_send(batch(vec![1])).is_ok() {}
        rx.try_recv().unwrap();
    }
    assert_eq!(rx.capacity(), 16);
    assert_eq!(tx.usage(), (15, 16));
    // Every batch taken with others behind it counts; an empty queue starts over.
    while rx.try_recv().is_some() {}
    let (tx, rx) = channel::<u32>(
        adaptive(Duration::from_millis(1)),
        Arc::new(AtomicWaker::new()),
    );
    for _ in 0..30 {
        while tx.try_send(batch(vec![1])).is_ok() {}
        rx.try_recv().unwrap();
    }
    let deep = rx.capacity();
    for _ in 0..30 {
        while tx.try_send(batch(vec![1])).is_ok() {}
        std::thread::sleep(Duration::from_millis(2));
        rx.try_recv().unwrap();
    }
    assert_eq!(
        rx.capacity(),
        2,
        "was {deep} before the receiver slowed down"
    );
}

#[test]
fn a_fixed_window_does_not_move() {
    let (tx, rx) = channel::<u32>(Credit::fixed(3), Arc::new(AtomicWaker::new()));
    for _ in 0..20 {
        while tx.try_send(batch(vec![1])).is_ok() {}
        rx.try_recv().unwrap();
    }
    assert_eq!((rx.capacity(), rx.queued()), (3, 2));
    assert_eq!(tx.batch_limit(), NO_BATCH_LIMIT);
}

#[test]
fn a_replaying_sender_suppresses_what_the_receiver_has_and_keeps_its_position() {
    let (tx, rx) = channel::<u32>(8, Arc::new(AtomicWaker::new()));
    let h = tx.handle().unwrap();
    tx.try_send(batch(vec![0, 1, 2, 3, 4])).unwrap();
    assert_eq!(h.fence(), 5);
    tx.try_send(batch(vec![5])).unwrap(); // fenced: dropped
    let replay = h.reopen(0, 5);
    replay.try_send(batch(vec![0, 1, 2])).unwrap(); // all suppressed
                                                    // Failing again mid-replay: the receiver still has 5, not 3.
    assert_eq!(h.fence(), 5);
    let again = h.reopen(0, 5);
    again.try_send(batch(vec![0, 1, 2, 3, 4, 5, 6])).unwrap();
    let mut got = Vec::new();
    while let Some(Event::Batch(b)) = rx.try_recv() {
        b.move_into(&mut got);
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn shared_batches_are_cloned_only_when_shared() {
    let data = std::sync::Arc::new(vec![1u32, 2, 3]);
    let a = Batch::Shared(data.clone());
    let mut buf = Vec::new();
    a.move_into(&mut buf);
    assert_eq!(buf, vec![1, 2, 3]);
    drop(data);
    let b = Batch::Shared(std::sync::Arc::new(vec![4u32]));
    let mut buf2 = Vec::new();
    b.move_into(&mut buf2);
    assert_eq!(buf2, vec![4]);
}
