//! Sources that wait: `SourceStatus::Idle` costs no CPU, a push wakes the source within
//! milliseconds, a polling source is polled again after its delay (not before), and an idle
//! source still takes checkpoints and is cancelled promptly.
//!
//! The tests run one at a time: the first measures the CPU time of the whole process.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::source::{Source, SourceStatus, SourceWaker};
use weir::{Env, EnvConfig, JobError, SinkError, SourceError};

use common::{within_timeout, TempDir, TIMEOUT};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// CPU time (user + system) of this process so far, from `/proc/self/stat` (clock ticks of
/// 10 ms, `CLK_TCK` = 100 on Linux).
fn process_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime), numbered from 1; `after` starts at field 3.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// A sink that reports when each record arrived.
struct Stamps(mpsc::Sender<(u64, Instant)>);

impl weir::sink::Sink<u64> for Stamps {
    fn write_batch(&mut self, batch: &mut Vec<u64>) -> Result<(), SinkError> {
        let now = Instant::now();
        for r in batch.drain(..) {
            let _ = self.0.send((r, now));
        }
        Ok(())
    }
}

/// Polls `f` (every millisecond) until it is true; fails the test after [`TIMEOUT`].
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_idle_source_costs_no_cpu_and_a_push_is_processed_within_milliseconds() {
    let _serial = serial();
    let mut cfg = EnvConfig::default();
    cfg.arbiters = 2;
    let env = Env::with_config(cfg);
    let (tx, stamps) = mpsc::channel();
    let tx = Mutex::new(tx);
    // ANCHOR: channel
    let (pusher, source) = weir::source::channel::<u64>();
    env.add_source("pushed", move |_| Ok(source.clone()))
        .uid("pushed")
        .rebalance()
        .map(|x| x + 1)
        .add_sink("stamps", move |_| {
            Ok(Stamps(tx.lock().unwrap_or_else(|e| e.into_inner()).clone()))
        });
    let job = env.start("idle").expect("job starts");
    // `pusher` is `Send + Clone`: hand it to the thread that receives the data.
    pusher.push(0);
    // ANCHOR_END: channel
    // Warm up: every subtask is running once the first record went through.
    let (r, _) = stamps.recv_timeout(TIMEOUT).expect("first record");
    assert_eq!(r, 1);

    let cpu0 = process_cpu_time();
    let wall0 = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let cpu = process_cpu_time() - cpu0;
    let wall = wall0.elapsed();
    println!(
        "idle for {wall:?}: {cpu:?} of CPU ({:.3} % of a core)",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
    assert!(
        cpu < Duration::from_millis(500),
        "an idle source used {cpu:?} of CPU in {wall:?}"
    );

    // A record pushed after a quiet spell: from push to the sink, across a channel.
    let mut latencies = Vec::new();
    for i in 1..=20u64 {
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        pusher.push(i);
        let (r, at) = stamps
            .recv_timeout(TIMEOUT)
            .expect("a pushed record arrives");
        assert_eq!(r, i + 1);
        latencies.push(at.duration_since(t0));
    }
    latencies.sort();
    let (median, max) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    println!("push to sink after idling: median {median:?}, max {max:?} (20 records)");
    assert!(
        max < Duration::from_millis(200),
        "a pushed record took {max:?} to be processed"
    );

    // Every pusher gone: the source ends, and the job with it.
    drop(pusher);
    let result = within_timeout(move || job.wait()).expect("job ends");
    assert_eq!(result.operator("pushed").map(|o| o.records_out), Some(21));
}

// ANCHOR: polling
/// Emits one record per poll and answers `Idle { until: Some(delay) }`, `limit` times.
struct Polling {
    delay: Duration,
    polls: Arc<Mutex<Vec<Instant>>>,
    limit: usize,
}

impl Source<u64> for Polling {
    fn poll_batch(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourceStatus, SourceError> {
        let mut polls = self.polls.lock().unwrap_or_else(|e| e.into_inner());
        polls.push(Instant::now());
        out.push(polls.len() as u64);
        Ok(if polls.len() >= self.limit {
            SourceStatus::End
        } else {
            SourceStatus::Idle {
                until: Some(self.delay),
            }
        })
    }
}
// ANCHOR_END: polling

#[test]
fn a_polling_source_is_polled_again_after_its_delay_and_not_before() {
    let _serial = serial();
    let delay = Duration::from_millis(50);
    let polls = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = EnvConfig::default();
    // Frequent sampling mail: it must not make the source poll early.
    cfg.metrics_interval = Duration::from_millis(10);
    let env = Env::with_config(cfg);
    let p = polls.clone();
    let out = env
        .add_source("polling", move |_| {
            Ok(Polling {
                delay,
                polls: p.clone(),
                limit: 6,
            })
        })
        .collect();
    let handle = env.start("polling").expect("job starts");
    within_timeout(move || handle.wait()).expect("job ends");
    assert_eq!(out.take(), vec![1, 2, 3, 4, 5, 6]);
    let polls = polls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(polls.len(), 6, "polled once per delay, no more");
    for w in polls.windows(2) {
        let gap = w[1].duration_since(w[0]);
        assert!(
            gap >= delay,
            "polled again after {gap:?}, before its delay {delay:?}"
        );
        assert!(gap < delay * 20, "polled again only after {gap:?}");
    }
}

// ANCHOR: waker
/// A replayable source: emits `0..n`, then idles (no delay) until `finish` is set and it is
/// woken. Tells `idle` when it first has nothing.
struct ThenIdle {
    next: u64,
    n: u64,
    idle: Arc<AtomicBool>,
    finish: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<SourceWaker>>>,
    polls: Arc<AtomicU64>,
}

impl Source<u64> for ThenIdle {
    fn set_waker(&mut self, waker: SourceWaker) {
        *self.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(waker);
    }
    fn poll_batch(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus, SourceError> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let stop = self.n.min(self.next + max as u64);
        out.extend(self.next..stop);
        self.next = stop;
        if self.next < self.n {
            return Ok(SourceStatus::More);
        }
        if self.finish.load(Ordering::Acquire) {
            return Ok(SourceStatus::End);
        }
        self.idle.store(true, Ordering::Release);
        Ok(SourceStatus::Idle { until: None })
    }
    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let bytes: [u8; 8] = position.try_into().map_err(|_| SourceError::BadPosition {
            message: format!("{} bytes, expected 8", position.len()),
        })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}
// ANCHOR_END: waker

struct Handles {
    idle: Arc<AtomicBool>,
    finish: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<SourceWaker>>>,
    polls: Arc<AtomicU64>,
}

fn then_idle(env: &Env, n: u64) -> (weir::DataStream<u64>, Handles) {
    let h = Handles {
        idle: Arc::new(AtomicBool::new(false)),
        finish: Arc::new(AtomicBool::new(false)),
        waker: Arc::new(Mutex::new(None)),
        polls: Arc::new(AtomicU64::new(0)),
    };
    let (idle, finish, waker, polls) = (
        h.idle.clone(),
        h.finish.clone(),
        h.waker.clone(),
        h.polls.clone(),
    );
    let s = env
        .add_source("then_idle", move |_| {
            Ok(ThenIdle {
                next: 0,
                n,
                idle: idle.clone(),
                finish: finish.clone(),
                waker: waker.clone(),
                polls: polls.clone(),
            })
        })
        .uid("then_idle");
    (s, h)
}

#[test]
fn checkpoints_complete_while_a_source_is_idle() {
    let _serial = serial();
    let dir = TempDir::new("idle-ckpt");
    let mut cfg = EnvConfig::default();
    // Only the checkpoints the test triggers.
    cfg.checkpoint.interval = Some(Duration::from_secs(3600));
    cfg.checkpoint.directory = dir.path().to_owned();
    let env = Env::with_config(cfg);
    let (s, h) = then_idle(&env, 1000);
    let out = s.rebalance().map(|x| x * 2).collect();
    let job = env.start("idle-checkpoints").expect("job starts");
    wait_until("the source to go idle", || h.idle.load(Ordering::Acquire));
    let polls = h.polls.load(Ordering::Relaxed);
    for _ in 0..3 {
        let id = job
            .monitor()
            .trigger_checkpoint()
            .expect("a checkpoint is triggered");
        wait_until("the checkpoint to complete", || {
            job.checkpoint_stats()
                .and_then(|s| s.last_completed_checkpoint_id)
                .is_some_and(|c| c >= id)
        });
    }
    // Committed by the checkpoints, though the source emits nothing more.
    wait_until("the records to be committed", || out.len() == 1000);
    assert_eq!(
        h.polls.load(Ordering::Relaxed),
        polls,
        "an idle source is not polled unless woken"
    );
    h.finish.store(true, Ordering::Release);
    let waker = h.waker.lock().unwrap_or_else(|e| e.into_inner()).clone();
    waker.expect("the source got a waker").wake();
    let result = within_timeout(move || job.wait()).expect("job ends");
    let stats = result.checkpoints.expect("checkpoint statistics");
    assert!(stats.number_of_completed_checkpoints >= 3);
    let mut v = out.take();
    v.sort_unstable();
    assert_eq!(v, (0..1000).map(|x| x * 2).collect::<Vec<_>>());
}

#[test]
fn an_idle_source_is_cancelled_promptly() {
    let _serial = serial();
    let env = Env::new();
    let (s, h) = then_idle(&env, 10);
    s.discard();
    let job = env.start("idle-cancel").expect("job starts");
    wait_until("the source to go idle", || h.idle.load(Ordering::Acquire));
    let t0 = Instant::now();
    job.cancel();
    let r = within_timeout(move || job.wait());
    assert!(matches!(r, Err(JobError::Cancelled { .. })), "{r:?}");
    let took = t0.elapsed();
    println!("cancelled an idle job in {took:?}");
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
}
