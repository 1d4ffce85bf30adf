//! The two-lane mailbox: control mail is never starved by data.
//!
//! A slow operator is held inside a batch (it waits for a permit) while its data lane fills
//! to capacity behind it. A ping is put in its system lane, then the operator is released
//! for good. The ping's answer, computed by the subtask when it handles the mail, says how
//! many batches it had processed and how full its data lane was: at most the batch in
//! progress may complete before the mail is handled, and the data lane is still full.
//! Everything is counted, nothing is timed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use weir::{Collector, Env, EnvConfig, ProcessFunction};

const BATCH: usize = 16;
/// Batches the operator may take when released in a round.
const RELEASE: u64 = 20;

/// Blocks on the first record of every batch until a permit is granted.
#[derive(Clone)]
struct Gate {
    permits: Arc<(Mutex<u64>, Condvar)>,
    seen: Arc<AtomicU64>,
}

impl Gate {
    fn new() -> Self {
        Gate {
            permits: Arc::new((Mutex::new(0), Condvar::new())),
            seen: Arc::new(AtomicU64::new(0)),
        }
    }
    fn grant(&self, n: u64) {
        let (m, cv) = &*self.permits;
        let mut p = m.lock().unwrap();
        *p = p.saturating_add(n);
        cv.notify_all();
    }
    fn revoke(&self) {
        *self.permits.0.lock().unwrap() = 0;
    }
    /// Waits until the operator is held at a batch start with no permit left; returns the
    /// records it has taken so far.
    fn wait_blocked(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.seen.load(Ordering::SeqCst);
            let permits = *self.permits.0.lock().unwrap();
            if permits == 0 && seen.is_multiple_of(BATCH as u64) && seen > 0 {
                std::thread::sleep(Duration::from_millis(50));
                if self.seen.load(Ordering::SeqCst) == seen {
                    return seen;
                }
            }
            assert!(Instant::now() < deadline, "operator never blocked");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl ProcessFunction<u64, u64> for Gate {
    fn process(&mut self, x: u64, out: &mut Collector<u64>) {
        if x.is_multiple_of(BATCH as u64) {
            let (m, cv) = &*self.permits;
            let mut p = m.lock().unwrap();
            while *p == 0 {
                p = cv.wait(p).unwrap();
            }
            *p -= 1;
        }
        self.seen.fetch_add(1, Ordering::SeqCst);
        out.collect(x);
    }
}

/// Waits until the source stops making progress (its output is out of credit).
fn wait_source_stalled(handle: &weir::JobHandle) {
    let mut last = u64::MAX;
    let mut stable_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = handle.ping("src", 0).expect("source is running");
        if s.batches_processed != last {
            last = s.batches_processed;
            stable_since = Instant::now();
        } else if stable_since.elapsed() > Duration::from_millis(200) {
            return;
        }
        assert!(Instant::now() < deadline, "source never stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn control_mail_waits_for_at_most_the_batch_in_progress() {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = BATCH;
    cfg.channel_capacity = 4;
    cfg.arbiters = 2;
    // Batches are counted by records (`seen / BATCH`): they stay whole in front of the gated
    // operator, which adaptive batch size would take for a slow one and cut them.
    cfg.adaptive_batch_size = false;
    let env = Env::with_config(cfg);
    let gate = Gate::new();
    let records = 200 * BATCH as u64;
    let out = env
        .generate(records, |i| i)
        .uid("src")
        .rebalance() // a channel, not a chain, between the source and the slow operator
        .process(gate.clone())
        .uid("slow")
        .collect();
    let handle = env.start("mailbox").expect("job starts");

    // Five rounds, each holding the operator at the start of a different batch.
    gate.grant(3);
    for round in 0..5 {
        // A gated operator stops exactly at the first record of a batch: `seen` is then a
        // multiple of the batch size and no longer moves.
        let seen = gate.wait_blocked();
        let completed = seen / BATCH as u64;
        wait_source_stalled(&handle);

        // The mail is in the system lane when send_ping returns.
        let pending = handle.send_ping("slow", 0).expect("slow subtask exists");
        // Release the operator: it could now run through every queued batch (the data
        // lane holds 4) if the system lane were not served first. Not for good: with 20
        // permits a round, five rounds take at most 128 of the 200 batches, so however
        // late this thread runs again, the operator is still held at a later batch.
        gate.grant(RELEASE);
        let status = pending.wait().expect("subtask answers");

        assert!(
            status.batches_processed <= completed + 1,
            "round {round}: {} batches processed when the mail was handled; {completed} were \
             done when it was sent and only the batch in progress may complete",
            status.batches_processed
        );
        assert!(
            status.batches_processed >= completed,
            "round {round}: counter went back"
        );
        // Full: at least its window (the window adapts to the operator's pace; one that
        // shrank while the operator was held holds more until they are taken).
        assert!(
            status.input_queued >= status.input_capacity,
            "round {round}: the data lane should still be full when the mail is handled: \
             {} batches queued, window {}",
            status.input_queued,
            status.input_capacity
        );
        // Hold the operator again, some batches further on.
        gate.revoke();
        gate.grant(5);
    }
    gate.grant(u64::MAX / 2);
    let result = handle.wait().expect("job completes");
    assert_eq!(out.len() as u64, records);
    assert_eq!(result.operator("slow").unwrap().records_in, records);
}
