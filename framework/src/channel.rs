//! Bounded, batched credit channels: the data lane between two subtasks.
//!
//! One channel connects one upstream subtask to one downstream subtask and carries
//! [`Event`]s: record batches and in-band markers (end of input) that must keep their order
//! with the records. Capacity is counted in events, so credit is per batch, never per record.
//! A sender with no credit gets its event back ([`Full`]) and registers to be woken when the
//! receiver frees a slot: that wait is backpressure. All channels into one subtask share that
//! subtask's receive waker, so one wake-up serves every input.
//!
//! The rule every channel keeps: events are received in the order they were sent, and an event
//! is never dropped or duplicated; a full channel refuses and hands the event back.
//! This module does not decide where records go (see `partition`).

use std::collections::VecDeque;
use std::task::Context;

use crate::sync::AtomicWaker;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{lock, Arc, Mutex};

/// A batch of records, owned or shared by several receivers (broadcast). Sharing never copies
/// the records; a receiver that needs ownership of a shared batch clones them out.
#[derive(Debug)]
pub(crate) enum Batch<T> {
    Owned(Vec<T>),
    Shared(std::sync::Arc<Vec<T>>),
}

impl<T: Clone> Batch<T> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Batch::Owned(v) => v.len(),
            Batch::Shared(v) => v.len(),
        }
    }

    /// Moves the records into `buf` (which the caller has emptied), without copying when it can.
    pub(crate) fn move_into(self, buf: &mut Vec<T>) {
        match self {
            Batch::Owned(v) => {
                if buf.is_empty() {
                    *buf = v;
                } else {
                    buf.extend(v);
                }
            }
            Batch::Shared(arc) => match std::sync::Arc::try_unwrap(arc) {
                Ok(v) => Batch::Owned(v).move_into(buf),
                Err(arc) => buf.extend(arc.iter().cloned()),
            },
        }
    }
}

/// What travels on a channel.
#[derive(Debug)]
pub(crate) enum Event<T> {
    Batch(Batch<T>),
    /// Checkpoint barrier: everything before it belongs to checkpoint `id`, everything after
    /// it to the next.
    Barrier(u64),
    EndOfInput,
}

/// A refused send: the channel had no credit. Holds the event, which is not lost.
#[derive(Debug)]
pub(crate) struct Full<T>(pub(crate) Event<T>);

struct Queue<T> {
    events: VecDeque<Event<T>>,
    /// Records in the queued batches.
    records: usize,
}

struct Shared<T> {
    queue: Mutex<Queue<T>>,
    capacity: usize,
    rx_waker: Arc<AtomicWaker>,
    tx_waker: AtomicWaker,
    closed: AtomicBool,
}

/// Sending half: owned by the upstream subtask.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// Receiving half: owned by the downstream subtask.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A channel of `capacity` events whose arrivals wake `rx_waker`.
pub(crate) fn channel<T>(capacity: usize, rx_waker: Arc<AtomicWaker>) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            events: VecDeque::with_capacity(capacity),
            records: 0,
        }),
        capacity: capacity.max(1),
        rx_waker,
        tx_waker: AtomicWaker::new(),
        closed: AtomicBool::new(false),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl<T> Event<T> {
    fn records(&self) -> usize {
        match self {
            Event::Batch(Batch::Owned(v)) => v.len(),
            Event::Batch(Batch::Shared(v)) => v.len(),
            Event::Barrier(_) | Event::EndOfInput => 0,
        }
    }
}

impl<T> Sender<T> {
    /// Events waiting in the channel, and its capacity.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (lock(&self.shared.queue).events.len(), self.shared.capacity)
    }

    /// Sends if there is credit; otherwise hands the event back.
    pub(crate) fn try_send(&self, event: Event<T>) -> Result<(), Full<T>> {
        {
            let mut q = lock(&self.shared.queue);
            if q.events.len() >= self.shared.capacity {
                return Err(Full(event));
            }
            q.records += event.records();
            q.events.push_back(event);
        }
        self.shared.rx_waker.wake();
        Ok(())
    }

    /// Sends if there is credit; otherwise registers the task in `cx` to be woken when credit
    /// returns, and hands the event back. A channel whose receiver is gone (the job is
    /// stopping) accepts and drops the event, since nothing will ever read it.
    pub(crate) fn send_or_register(
        &self,
        cx: &mut Context<'_>,
        event: Event<T>,
    ) -> Result<(), Full<T>> {
        match self.try_send(event) {
            Ok(()) => Ok(()),
            Err(Full(event)) => {
                if self.shared.closed.load(Ordering::Acquire) {
                    return Ok(());
                }
                self.shared.tx_waker.register(cx.waker());
                // Credit may have returned between the refusal and the registration.
                self.try_send(event)
            }
        }
    }
}

impl<T> Receiver<T> {
    /// Takes the next event, if any, and returns a credit to the sender.
    pub(crate) fn try_recv(&self) -> Option<Event<T>> {
        let event = {
            let mut q = lock(&self.shared.queue);
            let event = q.events.pop_front();
            if let Some(e) = &event {
                q.records -= e.records();
            }
            event
        };
        if event.is_some() {
            self.shared.tx_waker.wake();
        }
        event
    }

    /// Events waiting in the channel.
    pub(crate) fn queued(&self) -> usize {
        lock(&self.shared.queue).events.len()
    }

    /// The id of the first checkpoint barrier waiting in the channel, if any (an unaligned
    /// checkpoint starts as soon as its barrier is visible, ahead of the data before it).
    pub(crate) fn peek_barrier(&self) -> Option<u64> {
        lock(&self.shared.queue)
            .events
            .iter()
            .find_map(|e| match e {
                Event::Barrier(id) => Some(*id),
                _ => None,
            })
    }

    /// Records in the batches waiting in the channel.
    pub(crate) fn queued_records(&self) -> usize {
        lock(&self.shared.queue).records
    }

    /// Capacity in events.
    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.tx_waker.wake();
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use futures::task::noop_waker;

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
}

/// Loom models: run with
/// `RUSTFLAGS="--cfg weir_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p weir --lib --release loom_`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use super::*;
    use std::task::{Wake, Waker};

    fn send_spinning(tx: &Sender<u32>, mut event: Event<u32>) {
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
                Some(Event::Barrier(_)) => {}
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
            let t = loom::thread::spawn(move || {
                let flag = std::sync::Arc::new(Flag(
                    loom::sync::Mutex::new(false),
                    loom::sync::Condvar::new(),
                ));
                let waker = Waker::from(flag.clone());
                let mut cx = Context::from_waker(&waker);
                let mut event = Event::Batch(Batch::Owned(vec![2]));
                loop {
                    match tx.send_or_register(&mut cx, event) {
                        Ok(()) => break,
                        Err(Full(e)) => {
                            event = e;
                            // Block until woken: a lost wake-up is a deadlock, which
                            // loom reports.
                            flag.wait();
                        }
                    }
                }
            });
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
}
