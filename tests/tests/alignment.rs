//! Watermark alignment (`WatermarkStrategy::with_watermark_alignment`): of two source
//! subtasks, one starts 10 minutes of event time ahead of the other. In one alignment group
//! with a drift of 30 s it reads no further ahead than the drift (and one batch) while the
//! other runs; the window counts downstream equal a sequential reference. And what the plan
//! refuses: alignment inside a stream, an update interval of 0, one group with two drifts.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::source::{Source, SourceContext, SourceStatus};
use weir::time::WatermarkStrategy;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::{Env, EnvConfig, SourceError};

/// Records per source subtask: 20 minutes of event time at one per 100 ms.
const N: i64 = 12_000;
const STEP_MS: i64 = 100;
/// Where the second subtask's event time starts: 10 minutes ahead.
const AHEAD_MS: i64 = 600_000;
const DRIFT: Duration = Duration::from_secs(30);
const BATCH: usize = 64;

/// What the two subtasks have read, seen from the ahead one.
#[derive(Default)]
struct Watch {
    /// The behind subtask's newest timestamp read.
    behind_last: AtomicI64,
    /// The behind subtask has read everything.
    behind_done: AtomicBool,
    /// The most the ahead subtask read beyond the behind one's newest, over its reads after
    /// its first batch while the behind one was still reading.
    max_lead: AtomicI64,
    /// The ahead subtask's reads.
    ahead_reads: AtomicI64,
}

/// Subtask `s` of 2: `(s, ts)` for `N` timestamps, from 0 (subtask 0) or `AHEAD_MS`.
struct Ticks {
    subtask: usize,
    next: i64,
    watch: Arc<Watch>,
}

impl Source<(usize, i64)> for Ticks {
    fn poll_batch(
        &mut self,
        out: &mut Vec<(usize, i64)>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let start = if self.subtask == 1 { AHEAD_MS } else { 0 };
        let end = (self.next + max as i64).min(N);
        out.extend((self.next..end).map(|i| (self.subtask, start + i * STEP_MS)));
        let newest = start + (end - 1) * STEP_MS;
        let w = &self.watch;
        if self.subtask == 0 {
            w.behind_last.store(newest, Ordering::SeqCst);
            if end == N {
                w.behind_done.store(true, Ordering::SeqCst);
            }
        } else if end > self.next {
            let reads = w.ahead_reads.fetch_add(1, Ordering::SeqCst);
            let behind = w.behind_last.load(Ordering::SeqCst);
            if reads > 0 && !w.behind_done.load(Ordering::SeqCst) {
                w.max_lead.fetch_max(newest - behind, Ordering::SeqCst);
            }
        }
        self.next = end;
        Ok(if end == N {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }
}

#[derive(Clone)]
struct Count;
impl AggregateFunction<(usize, i64), u64> for Count {
    type Acc = u64;
    fn add(&self, n: &mut u64, _x: (usize, i64)) {
        *n += 1
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// Runs the two subtasks into per-minute counts; the counts and what was watched.
fn run(strategy: WatermarkStrategy<(usize, i64)>) -> (Vec<(usize, i64, u64)>, Arc<Watch>) {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = BATCH;
    let env = Env::with_config(cfg);
    let watch = Arc::new(Watch {
        behind_last: AtomicI64::new(i64::MIN),
        ..Watch::default()
    });
    let w = watch.clone();
    let counts = env
        .add_source_with_watermarks(
            "ticks",
            move |cx: SourceContext| {
                Ok(Ticks {
                    subtask: cx.subtask,
                    next: 0,
                    watch: w.clone(),
                })
            },
            strategy,
        )
        .set_parallelism(2)
        .key_by(|r: &(usize, i64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
        .aggregate_window(Count, |s: &usize, f: &Fired, n| (*s, f.window.start, n))
        .set_parallelism(1)
        .collect();
    common::execute_within(&env, "alignment").expect("the job runs");
    (common::sorted(counts.take()), watch)
}

fn reference() -> Vec<(usize, i64, u64)> {
    let mut out = Vec::new();
    for s in 0..2usize {
        let start = if s == 1 { AHEAD_MS } else { 0 };
        let per_minute = (60_000 / STEP_MS) as u64;
        for m in 0..(N * STEP_MS / 60_000) {
            out.push((s, start + m * 60_000, per_minute));
        }
    }
    common::sorted(out)
}

fn strategy() -> WatermarkStrategy<(usize, i64)> {
    WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
        .with_timestamp_assigner(|r: &(usize, i64)| r.1)
        .with_watermark_interval(Duration::ZERO)
}

#[test]
fn a_source_ten_minutes_ahead_waits_within_the_drift_and_the_windows_are_unchanged() {
    let aligned = strategy().with_watermark_alignment("ticks", DRIFT, Duration::from_millis(2));
    let (counts, watch) = run(aligned);
    assert_eq!(counts, reference());
    let lead = watch.max_lead.load(Ordering::SeqCst);
    // The ahead subtask reads a batch when its watermark is within the drift of the group's
    // lowest, which is at most the behind one's newest timestamp: so no read ends further
    // ahead than the drift and one batch.
    let bound = DRIFT.as_millis() as i64 + BATCH as i64 * STEP_MS;
    assert!(
        lead <= bound,
        "the ahead source read {lead} ms ahead of the other (bound {bound} ms)"
    );
    assert!(
        watch.ahead_reads.load(Ordering::SeqCst) >= (N / BATCH as i64),
        "it read everything in the end"
    );
}

#[test]
fn the_plan_refuses_alignment_it_cannot_honour() {
    let env = Env::new();
    env.from_collection(vec![(0usize, 1i64)])
        .assign_timestamps_and_watermarks(strategy().with_watermark_alignment(
            "g",
            DRIFT,
            Duration::from_millis(10),
        ))
        .collect();
    let msg = env.execute("inside").expect_err("refused").to_string();
    assert!(
        msg.contains("alignment group `g`") && msg.contains("add_source_with_watermarks"),
        "{msg}"
    );

    let env = Env::new();
    let src = |cx: SourceContext| {
        Ok(Ticks {
            subtask: cx.subtask,
            next: N,
            watch: Arc::new(Watch::default()),
        })
    };
    env.add_source_with_watermarks(
        "zero",
        src,
        strategy().with_watermark_alignment("g", DRIFT, Duration::ZERO),
    )
    .collect();
    let msg = env.execute("zero").expect_err("refused").to_string();
    assert!(msg.contains("update interval of 0"), "{msg}");

    let env = Env::new();
    for (name, drift) in [("a", 10), ("b", 20)] {
        env.add_source_with_watermarks(
            name,
            src,
            strategy().with_watermark_alignment(
                "g",
                Duration::from_secs(drift),
                Duration::from_millis(10),
            ),
        )
        .collect();
    }
    let msg = env.execute("two-drifts").expect_err("refused").to_string();
    assert!(
        msg.contains("group `g`") && msg.contains("10s") && msg.contains("20s"),
        "{msg}"
    );
}

/// What the split-level run watched: the ahead split's lead over the behind one after each
/// batch (past the first) that read it, and the sets of splits the driver paused.
#[derive(Default)]
struct SplitWatch {
    max_lead: AtomicI64,
    pauses: std::sync::Mutex<Vec<Vec<u64>>>,
}

/// One subtask reading two splits in turn, record by record: split 0 from 0, split 1 from
/// `AHEAD_MS`. Pauses splits if `can_pause`; ends split 0 when it is read, and says `Idle`
/// (not woken by anyone) while its only unread split is paused.
struct TwoSplits {
    next: [i64; 2],
    paused: Vec<u64>,
    splits: weir::source::Splits,
    can_pause: bool,
    batches: u64,
    watch: Arc<SplitWatch>,
}

impl TwoSplits {
    fn ts(split: usize, i: i64) -> i64 {
        (if split == 1 { AHEAD_MS } else { 0 }) + i * STEP_MS
    }
}

impl Source<(usize, i64)> for TwoSplits {
    fn poll_batch(
        &mut self,
        out: &mut Vec<(usize, i64)>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        self.splits.start_batch();
        let ahead_before = self.next[1];
        let readable = |me: &Self, s: usize| me.next[s] < N && !me.paused.contains(&(s as u64));
        while out.len() < max && (readable(self, 0) || readable(self, 1)) {
            for s in 0..2 {
                if out.len() < max && readable(self, s) {
                    out.push((s, Self::ts(s, self.next[s])));
                    self.splits.record_from(s as u64);
                    self.next[s] += 1;
                }
            }
        }
        if self.next[0] == N {
            self.splits.end(0);
        }
        self.batches += 1;
        // How far ahead the ahead split's reads in this batch went (not the first batch's,
        // read before any watermark was known).
        if self.batches > 1 && self.next[0] < N && self.next[1] > ahead_before {
            let lead = Self::ts(1, self.next[1] - 1) - Self::ts(0, self.next[0] - 1);
            self.watch.max_lead.fetch_max(lead, Ordering::SeqCst);
        }
        Ok(if self.next == [N, N] {
            SourceStatus::End
        } else if readable(self, 0) || readable(self, 1) {
            SourceStatus::More
        } else {
            SourceStatus::Idle { until: None }
        })
    }

    fn splits(&self) -> Option<&weir::source::Splits> {
        Some(&self.splits)
    }

    fn pause_splits(&mut self, paused: &[u64]) -> Result<bool, SourceError> {
        if !self.can_pause {
            return Ok(false);
        }
        self.paused = paused.to_vec();
        self.watch
            .pauses
            .lock()
            .expect("not poisoned")
            .push(paused.to_vec());
        Ok(true)
    }
}

/// Runs one subtask of two splits into per-minute counts per split.
fn run_splits(can_pause: bool) -> (Vec<(usize, i64, u64)>, Arc<SplitWatch>) {
    let mut cfg = EnvConfig::default();
    cfg.batch_size = BATCH;
    let env = Env::with_config(cfg);
    let watch = Arc::new(SplitWatch::default());
    let w = watch.clone();
    let counts = env
        .add_source_with_watermarks(
            "splits",
            move |_cx: SourceContext| {
                Ok(TwoSplits {
                    next: [0, 0],
                    paused: Vec::new(),
                    splits: weir::source::Splits::new([0, 1]),
                    can_pause,
                    batches: 0,
                    watch: w.clone(),
                })
            },
            strategy().with_watermark_alignment("splits", DRIFT, Duration::from_millis(2)),
        )
        .set_parallelism(1)
        .key_by(|r: &(usize, i64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
        .aggregate_window(Count, |s: &usize, f: &Fired, n| (*s, f.window.start, n))
        .set_parallelism(1)
        .collect();
    common::execute_within(&env, "split alignment").expect("the job runs");
    (common::sorted(counts.take()), watch)
}

#[test]
fn a_split_ten_minutes_ahead_inside_a_subtask_is_paused_until_the_other_catches_up() {
    let (counts, watch) = run_splits(true);
    assert_eq!(counts, reference());
    // The subtask's own watermark is its behind split's, so it is never paused whole: the
    // ahead split alone is, and reads a batch only while within the drift of the lowest.
    let lead = watch.max_lead.load(Ordering::SeqCst);
    let bound = DRIFT.as_millis() as i64 + BATCH as i64 * STEP_MS;
    assert!(
        lead <= bound,
        "the ahead split read {lead} ms ahead of the other (bound {bound} ms)"
    );
    let pauses = watch.pauses.lock().expect("not poisoned").clone();
    assert_eq!(
        pauses.first(),
        Some(&vec![1]),
        "the ahead split is paused first"
    );
    assert_eq!(pauses.last(), Some(&vec![]), "and resumed in the end");

    // A source that cannot pause splits: the subtask reads on (the windows still agree,
    // since its watermark is its lowest split's), but the ahead split runs 10 minutes ahead.
    let (counts, watch) = run_splits(false);
    assert_eq!(counts, reference());
    let lead = watch.max_lead.load(Ordering::SeqCst);
    assert!(
        lead > AHEAD_MS / 2,
        "without split pausing it read on: {lead} ms"
    );
    assert!(watch.pauses.lock().expect("not poisoned").is_empty());
}
