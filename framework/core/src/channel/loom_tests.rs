use super::*;
use std::task::{Wake, Waker};

/// Sends `event`, yielding to the other loom threads while the channel has no credit.
pub(crate) fn send_spinning<T: Clone>(tx: &Sender<T>, mut event: Event<T>) {
    loop {
        match tx.try_send(event) {
            Ok(()) => return,
            Err(Full(e)) => {
                event = e;
                loom::thread::yield_now();
            }
        }
    }
}

fn receive_all(rx: &Receiver<u32>) -> Vec<u32> {
    let mut got = Vec::new();
    loop {
        match rx.try_recv() {
            Some(Event::Batch(b)) => b.move_into(&mut got),
            Some(Event::EndOfInput) => return got,
            Some(Event::Barrier(_)) | Some(Event::Watermark(_)) => {}
            None => loom::thread::yield_now(),
        }
    }
}

/// Events arrive in order, none lost or duplicated, under every interleaving of a
/// sender and a receiver on a channel of capacity 1.
#[test]
fn loom_channel_is_fifo_and_lossless() {
    loom::model(|| {
        let (tx, rx) = channel::<u32>(1, Arc::new(AtomicWaker::new()));
        let t = loom::thread::spawn(move || {
            for i in 0..2u32 {
                send_spinning(&tx, Event::Batch(Batch::Owned(vec![i, i + 10])));
            }
            send_spinning(&tx, Event::EndOfInput);
        });
        let got = receive_all(&rx);
        t.join().unwrap();
        assert_eq!(got, vec![0, 10, 1, 11]);
    });
}

/// Sends a batch of `records`, parking (on a loom condvar) whenever it is refused for
/// credit until its waker is woken: a lost wake-up is a deadlock, which loom reports.
fn send_parking(tx: &Sender<u32>, records: Vec<u32>) {
    let flag = std::sync::Arc::new(Flag(
        loom::sync::Mutex::new(false),
        loom::sync::Condvar::new(),
    ));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut event = Event::Batch(Batch::Owned(records));
    while let Err(Full(e)) = tx.send_or_register(&mut cx, event) {
        event = e;
        flag.wait();
    }
}

/// With a window of 4, a sender refused for credit is woken when the receiver parks
/// (`release`) after taking one batch, though the queue is above half its window: no
/// sender waits on room a parked receiver leaves.
#[test]
fn loom_a_parking_receiver_releases_a_waiting_sender() {
    loom::model(|| {
        let (tx, rx) = channel::<u32>(4, Arc::new(AtomicWaker::new()));
        for i in 0..4 {
            tx.try_send(Event::Batch(Batch::Owned(vec![i]))).unwrap();
        }
        let t = loom::thread::spawn(move || send_parking(&tx, vec![4]));
        let mut got = Vec::new();
        match rx.try_recv() {
            Some(Event::Batch(b)) => b.move_into(&mut got),
            other => panic!("expected the first batch, got {other:?}"),
        }
        rx.release();
        t.join().unwrap();
        while let Some(Event::Batch(b)) = rx.try_recv() {
            b.move_into(&mut got);
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    });
}

/// A waker that sets a flag under a loom mutex and signals a loom condvar.
struct Flag(loom::sync::Mutex<bool>, loom::sync::Condvar);
impl Flag {
    /// Blocks until woken (spurious condvar wake-ups are absorbed by the loop).
    fn wait(&self) {
        let mut woken = self.0.lock().unwrap();
        while !*woken {
            woken = self.1.wait(woken).unwrap();
        }
        *woken = false;
    }
}
impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        *self.0.lock().unwrap() = true;
        self.1.notify_one();
    }
}

/// A sender refused for lack of credit is always woken once the receiver frees a slot
/// (no lost wake-up between the refusal and the registration).
#[test]
fn loom_refused_sender_is_always_woken() {
    loom::model(|| {
        let (tx, rx) = channel::<u32>(1, Arc::new(AtomicWaker::new()));
        tx.try_send(Event::Batch(Batch::Owned(vec![1]))).unwrap();
        let t = loom::thread::spawn(move || send_parking(&tx, vec![2]));
        // Free the one slot while the sender may be anywhere in its attempt.
        let mut got = Vec::new();
        match rx.try_recv() {
            Some(Event::Batch(b)) => b.move_into(&mut got),
            other => panic!("expected the first batch, got {other:?}"),
        }
        t.join().unwrap();
        match rx.try_recv() {
            Some(Event::Batch(b)) => b.move_into(&mut got),
            other => panic!("expected the second batch, got {other:?}"),
        }
        assert_eq!(got, vec![1, 2]);
    });
}
