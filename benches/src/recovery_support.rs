//! Helpers of the `recovery` and `criticality` harnesses, what is specific to the
//! answer-cleaning job: its graph ([`build_cleaning_job`], optionally with a backed-up and
//! fault-injecting `flat_map`), the [`RecoveryProbe`] that times recoveries (and
//! [`ProbedSink`], the exactly-once part-file sink that reports to it), the harness's
//! `flat_map` faults ([`FlatMapFaults`]), the expected output of the job computed
//! sequentially, and the check of what was committed ([`tally`]).
//!
//! What is not specific to this job comes from `weir_testing`: the exactly-once part-file
//! sink ([`TwoPhaseFileSink`], two-phase commit on the [`Sink`] hooks) and
//! [`read_committed`]; faults keyed by record ([`RecordFaults`]); the per-id exactly-once
//! check ([`ExactlyOnce`]); the panic hooks of injected faults.
//!
//! # The graph
//!
//! [`build_cleaning_job`] builds the operators and uids of
//! `weir_examples::answers::build_answer_cleaning` (`levels`, `source`, `connect`, `flat_map`,
//! `split`, `filter`, `map`, `sink`, `malformed`) with the same functions (`Attach`,
//! `ParseAndLevel`, `DropUnwanted`, `format_cleaned`) and built-in levels: up to `filter` it
//! is `weir_examples::answers::cleaning_streams_with`, then `map` and two exactly-once
//! part-file sinks: `sink` (made by the caller's factory, a [`ProbedSink`] or a wrapper
//! of one) and `malformed` (a [`TwoPhaseFileSink`] into `<out_dir>/malformed`). A
//! [`FlatMapSetup`] can back up `flat_map` (`with_backup_policy`: it then runs as its own
//! actor, never chained) and make it [`FaultyParseAndLevel`], `ParseAndLevel` with the
//! harness's faults (same operator name, state and output).
//!
//! # Faults in `flat_map`
//!
//! [`FlatMapFaults`] fails `flat_map` when it first sees given input *lines* (the records at
//! chosen input indices; a line must occur once in the input), in order: before processing
//! the `k`-th of them for the first time, [`FaultyParseAndLevel`] records the fault's time
//! and panics, hangs, or stops its arbiter thread ([`Kind`]). They are `weir_testing`'s
//! [`RecordFaults`] keyed by the line, in order: a fault is keyed by the record, not by a
//! count of the subtask's records, because such a count is ambiguous for a second fault
//! under restart-all (a restarted instance counts from zero at its restored position,
//! unknown in advance), while the record is the same in every attempt, in a promoted backup
//! and in a restarted job. Each fault fires once per run.
//!
//! - **panic**: `panic!("injected fault: ...")`, before the record is processed.
//! - **hang**: the thread sleeps (in 5 ms steps) until the job releases the hung subtasks of
//!   its [`FaultPlan`], as the framework's own `FaultKind::Hang` does: that happens when the
//!   job stops or restarts (restart-all), just before it joins its arbiter threads, so a hang
//!   never holds up a restart or the end of the job by the 5 s join timeout
//!   ([`FaultPlan::is_released`]). Released, it panics with `injected hang of ...
//!   released`, which `weir_testing::quiet_released_hangs` keeps off stderr.
//! - **stop**: `actix_rt::Arbiter::current().stop()`, then the record is processed: the
//!   arbiter's loop ends after the current poll, so the failed instance may process (and
//!   emit) some more records first. It counts them ([`WatchedFault::processed_after`]).
//!
//! # Recovery of several faults
//!
//! A [`FaultWatch`] in the probe holds, per fault, a *window*: the kept records (those that
//! reach `sink`) of the failed subtask from the fault's record up to the next fault's (or the
//! end of its input). The sink notes, per window record, when it first received it after that fault
//! fired, and how often before and after. After the run, a fault's *target* is the first
//! record of its window that the failed instance did not process (for a panic or a hang the
//! first at or after the fault's record; for a stop, the first after what it processed), and
//! its recovery time is fault → the sink's first receipt of the target after the fault.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir::sink::{Sink, SinkContext};
use weir::{BackupPolicy, Env, SinkError};
use weir_examples::answers::{
    cleaning_streams_with, format_cleaned, uid, Answers, BadRecord, Cleaned, Input, Levels,
    ParseAndLevel,
};
#[cfg(doc)]
use weir_testing::read_committed;
use weir_testing::{encode_json, PartFileStats, TwoPhaseFileSink, FINAL_COMMIT};

use crate::clock_ns;

mod expected;
mod faults;

pub use expected::{
    for_each_input_line, input_lines_at, line_hash, tally, Expected, KeptRecord, Tally,
};
pub use faults::{
    FaultWatch, FaultyParseAndLevel, FlatMapFaults, IdHasher, Kind, Watched, WatchedFault,
};

/// "Not recorded yet" in the probe's time slots.
const UNSET: u64 = 0;

// ---------------------------------------------------------------------------------------------
// The probe
// ---------------------------------------------------------------------------------------------

/// Times of one run, in [`clock_ns`] nanoseconds (0: not happened), shared by the panic hook and
/// every sink subtask of every attempt.
#[derive(Debug, Default)]
pub struct RecoveryProbe {
    /// `"<id>,"`: the start of the output line of the record whose reprocessing ends recovery.
    target_prefix: Option<Vec<u8>>,
    /// When the injected fault fired (set by the panic hook, in the failing thread).
    pub fault_ns: AtomicU64,
    /// When a sink subtask was first created after the fault (the restarted job deploys).
    pub first_sink_after_fault_ns: AtomicU64,
    /// When a sink subtask created after the fault first received records.
    pub first_write_after_fault_ns: AtomicU64,
    /// When a sink subtask created after the fault first committed records it wrote itself.
    pub first_commit_after_fault_ns: AtomicU64,
    /// When the target record first reached a sink after the fault.
    pub target_after_fault_ns: AtomicU64,
    /// How often the target record reached a sink before the fault.
    pub target_before_fault: AtomicU64,
    /// How often the target record reached a sink after the fault.
    pub target_after_fault: AtomicU64,
    /// Sink subtasks created (every attempt).
    pub sink_instances: AtomicU64,
    /// Pending files committed by a restore.
    pub committed_by_restore: AtomicU64,
    /// Uncommitted files of failed attempts deleted.
    pub discarded_files: AtomicU64,
    /// The checkpoint the restarted job was restored from (largest over subtasks), if any.
    pub restored_checkpoint: Mutex<Option<u64>>,
    /// The windows of several faults (see the module documentation), if watched.
    pub watch: Option<FaultWatch>,
    /// Checkpoints a sink subtask was told are complete: `(id, when)`, first notice of each.
    pub completed_checkpoints: Mutex<Vec<(u64, u64)>>,
}

impl RecoveryProbe {
    /// A probe that watches for the output line of record `target_id` (none: no target).
    pub fn new(target_id: Option<u64>) -> Self {
        RecoveryProbe {
            target_prefix: target_id.map(|id| format!("{id},").into_bytes()),
            ..Default::default()
        }
    }

    /// A probe that watches the windows of `watch` (and no single target).
    pub fn with_watch(watch: FaultWatch) -> Self {
        RecoveryProbe {
            watch: Some(watch),
            ..Default::default()
        }
    }

    /// Records that fault `k` of the watch fired now (the first one is also the probe's
    /// fault).
    pub fn fault_fired_now(&self, k: usize) {
        if let Some(f) = self.watch.as_ref().and_then(|w| w.faults.get(k)) {
            RecoveryProbe::stamp(&f.fault_ns);
        }
        RecoveryProbe::stamp(&self.fault_ns);
    }

    fn checkpoint_completed(&self, id: u64) {
        let mut c = self
            .completed_checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !c.iter().any(|&(i, _)| i == id) {
            c.push((id, clock_ns()));
        }
    }

    /// The last checkpoint a sink was told was complete before `ns`, and when.
    pub fn last_checkpoint_before(&self, ns: u64) -> Option<(u64, u64)> {
        let c = self
            .completed_checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        c.iter()
            .copied()
            .filter(|&(_, t)| t <= ns)
            .max_by_key(|&(_, t)| t)
    }

    /// Milliseconds from the fault to the time in `slot`; `None` if either did not happen.
    pub fn ms_after_fault(&self, slot: &AtomicU64) -> Option<f64> {
        let fault = self.fault_ns.load(Ordering::SeqCst);
        let t = slot.load(Ordering::SeqCst);
        (fault != UNSET && t != UNSET).then(|| t.saturating_sub(fault) as f64 / 1e6)
    }

    fn fault_fired(&self) -> bool {
        self.fault_ns.load(Ordering::SeqCst) != UNSET
    }

    fn stamp(slot: &AtomicU64) {
        let _ = slot.compare_exchange(UNSET, clock_ns().max(1), Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Installs a panic hook that records in `probe` when the injected fault fires: the framework
/// panics with `injected fault: ...` right after the fault plan marks it fired, in the thread
/// of the failing subtask, before unwinding. Other panics go to the previous hook.
pub fn install_fault_hook(probe: Arc<RecoveryProbe>) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = weir_testing::panic_message(info);
        if message.starts_with("injected fault") {
            RecoveryProbe::stamp(&probe.fault_ns);
            // One line instead of the default hook's message: with `RUST_BACKTRACE` set, that
            // hook captures and prints a backtrace in the failing thread before it unwinds
            // (about 80 ms measured), which would be counted as recovery time.
            eprintln!("recovery: {message}");
            return;
        }
        previous(info)
    }));
}

// ---------------------------------------------------------------------------------------------
// The probed exactly-once file sink
// ---------------------------------------------------------------------------------------------

/// The exactly-once part-file sink of `weir_testing` ([`TwoPhaseFileSink`] of `String`
/// lines), telling the probe (if any) about its instances, writes, commits, restores, the
/// target record and the watched windows.
pub struct ProbedSink {
    inner: TwoPhaseFileSink<String>,
    probe: Option<Arc<RecoveryProbe>>,
    /// Created after the fault fired (part of the restarted job).
    after_fault: bool,
    wrote: bool,
    /// The inner sink's statistics already added to the probe.
    told: PartFileStats,
}

impl ProbedSink {
    /// The subtask `cx` of a sink writing into `dir`; `probe` (the main sink's) is told about
    /// writes, commits and the target record.
    pub fn create(
        dir: &Path,
        cx: &SinkContext,
        probe: Option<Arc<RecoveryProbe>>,
    ) -> Result<Self, SinkError> {
        let after_fault = probe.as_ref().is_some_and(|p| {
            p.sink_instances.fetch_add(1, Ordering::SeqCst);
            let after = p.fault_fired();
            if after {
                RecoveryProbe::stamp(&p.first_sink_after_fault_ns);
            }
            after
        });
        let mut sink = ProbedSink {
            inner: TwoPhaseFileSink::lines(dir, cx)?,
            probe,
            after_fault,
            wrote: false,
            told: PartFileStats::default(),
        };
        sink.tell();
        Ok(sink)
    }

    /// Adds what the inner sink did since the last call to the probe's counters; whether it
    /// committed files meanwhile.
    fn tell(&mut self) -> bool {
        let now = self.inner.stats();
        let committed = now.committed_files > self.told.committed_files;
        if let Some(p) = &self.probe {
            p.discarded_files.fetch_add(
                now.discarded_files - self.told.discarded_files,
                Ordering::SeqCst,
            );
            p.committed_by_restore.fetch_add(
                now.committed_by_restore - self.told.committed_by_restore,
                Ordering::SeqCst,
            );
        }
        self.told = now;
        committed
    }
}

impl Sink<String> for ProbedSink {
    fn write_batch(&mut self, batch: &mut Vec<String>) -> Result<(), SinkError> {
        let Some(p) = self.probe.clone().filter(|_| !batch.is_empty()) else {
            return self.inner.write_batch(batch);
        };
        if self.after_fault && !self.wrote {
            self.wrote = true;
            RecoveryProbe::stamp(&p.first_write_after_fault_ns);
        }
        let mut hits = 0u64;
        for line in batch.iter() {
            let line = line.as_bytes();
            if p.target_prefix
                .as_ref()
                .is_some_and(|t| line.starts_with(t))
            {
                hits += 1;
            }
            if let Some(w) = &p.watch {
                w.observe(line);
            }
        }
        self.inner.write_batch(batch)?;
        if hits > 0 {
            if p.fault_fired() {
                p.target_after_fault.fetch_add(hits, Ordering::SeqCst);
                RecoveryProbe::stamp(&p.target_after_fault_ns);
            } else {
                p.target_before_fault.fetch_add(hits, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.inner.finish()
    }

    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        let r = self.inner.pre_commit(checkpoint);
        self.tell();
        r
    }

    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if let Some(p) = self.probe.as_ref().filter(|_| checkpoint != FINAL_COMMIT) {
            p.checkpoint_completed(checkpoint);
        }
        let r = self.inner.commit(checkpoint);
        if self.tell() && self.after_fault {
            if let Some(p) = &self.probe {
                RecoveryProbe::stamp(&p.first_commit_after_fault_ns);
            }
        }
        r
    }

    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        let r = self.inner.initialize(restored);
        self.tell();
        if let (Some(p), Some(restored)) = (&self.probe, self.inner.stats().restored_checkpoint) {
            let mut r = p
                .restored_checkpoint
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *r = Some(r.map_or(restored, |x: u64| x.max(restored)));
        }
        r
    }
}

// ---------------------------------------------------------------------------------------------
// The graph
// ---------------------------------------------------------------------------------------------

/// How `flat_map` runs in [`build_cleaning_job`].
#[derive(Debug, Clone, Default)]
pub struct FlatMapSetup {
    /// Back it up (BQBS) with this policy.
    pub backup: Option<BackupPolicy>,
    /// Fail it with the harness's faults ([`FaultyParseAndLevel`] instead of `ParseAndLevel`).
    pub faults: Option<Arc<FlatMapFaults>>,
}

/// Adds the answer-cleaning job to `env` (see the module documentation): `answers` with the
/// built-in levels, every operator but `levels` at `parallelism`, `flat_map` as `flat_map`
/// says, `malformed` lines into `<out_dir>/malformed` by an exactly-once [`TwoPhaseFileSink`],
/// and the formatted lines into the sink that `main_sink` makes per subtask (`sink`).
pub fn build_cleaning_job<S, F>(
    env: &Env,
    answers: &Answers,
    parallelism: usize,
    out_dir: &Path,
    flat_map: &FlatMapSetup,
    main_sink: F,
) where
    S: Sink<String>,
    F: Fn(&SinkContext) -> Result<S, SinkError> + Send + 'static,
{
    let p = parallelism;
    let input = Input {
        answers: answers.clone(),
        levels: Levels::Builtin,
    };
    let (kept, malformed) = cleaning_streams_with(env, &input, p, |tagged| {
        let parsed = match &flat_map.faults {
            None => tagged.apply(ParseAndLevel::default()),
            Some(f) => tagged.apply(FaultyParseAndLevel::new(f.clone())),
        };
        match &flat_map.backup {
            Some(policy) => parsed.with_backup_policy(policy.clone()),
            None => parsed,
        }
    });
    let malformed_dir = out_dir.join("malformed");
    malformed
        .add_sink("exactly_once_jsonl", move |cx| {
            TwoPhaseFileSink::create(&malformed_dir, cx, encode_json::<BadRecord>)
        })
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    kept.map(|c: Cleaned| format_cleaned(&c))
        .uid(uid::MAP)
        .set_parallelism(p)
        .add_sink("exactly_once_text", main_sink)
        .uid(uid::SINK)
        .set_parallelism(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probed_sink_tells_the_probe_what_its_sink_did() {
        let d = std::env::temp_dir().join(format!("weir-probed-sink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let cx = SinkContext {
            uid: "sink".into(),
            subtask: 0,
            parallelism: 1,
            checkpointing: true,
        };
        let probe = Arc::new(RecoveryProbe::new(Some(2)));
        let write = |s: &mut ProbedSink, lines: &[&str]| {
            let mut batch: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            s.write_batch(&mut batch).unwrap();
        };
        let mut a = ProbedSink::create(&d, &cx, Some(probe.clone())).unwrap();
        a.initialize(None).unwrap();
        write(&mut a, &["1,a", "2,b"]);
        let state = a.pre_commit(1).unwrap().unwrap();
        write(&mut a, &["3,c"]);
        a.pre_commit(2).unwrap(); // never completes
        drop(a);
        assert_eq!(probe.target_before_fault.load(Ordering::SeqCst), 1);
        RecoveryProbe::stamp(&probe.fault_ns);
        let mut b = ProbedSink::create(&d, &cx, Some(probe.clone())).unwrap();
        b.initialize(Some(&state)).unwrap();
        assert_eq!(probe.committed_by_restore.load(Ordering::SeqCst), 1);
        assert_eq!(probe.discarded_files.load(Ordering::SeqCst), 1);
        assert_eq!(*probe.restored_checkpoint.lock().unwrap(), Some(1));
        write(&mut b, &["2,b", "3,c"]);
        assert_eq!(probe.target_after_fault.load(Ordering::SeqCst), 1);
        assert_ne!(
            probe.first_write_after_fault_ns.load(Ordering::SeqCst),
            UNSET
        );
        b.pre_commit(2).unwrap();
        assert_eq!(
            probe.first_commit_after_fault_ns.load(Ordering::SeqCst),
            UNSET
        );
        b.commit(2).unwrap();
        assert_ne!(
            probe.first_commit_after_fault_ns.load(Ordering::SeqCst),
            UNSET
        );
        assert_eq!(probe.last_checkpoint_before(u64::MAX).map(|c| c.0), Some(2));
        assert_eq!(probe.sink_instances.load(Ordering::SeqCst), 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fault_watch_times_the_first_record_the_failed_instance_did_not_process() {
        let kept = |id: u64, local: u64| {
            (
                KeptRecord {
                    index: local,
                    id,
                    line_hash: 0,
                },
                local,
            )
        };
        let records = [
            kept(9, 9),
            kept(10, 10),
            kept(12, 12),
            kept(15, 15),
            kept(21, 21),
        ];
        let w = FaultWatch::new(&[(10, 10), (20, 20)], &records);
        let ids = |k: usize| w.faults[k].window.iter().map(|x| x.id).collect::<Vec<_>>();
        assert_eq!((ids(0), ids(1)), (vec![10, 12, 15], vec![21]));
        w.observe(b"12,x");
        assert_eq!(w.faults[0].window[1].before.load(Ordering::SeqCst), 1);
        RecoveryProbe::stamp(&w.faults[0].fault_ns);
        // A stop: the failed instance processed records 10, 11 and 12 first.
        w.faults[0].processed_after.store(3, Ordering::SeqCst);
        assert_eq!(w.faults[0].target().map(|t| t.id), Some(15));
        assert_eq!(w.faults[0].recovery_ms(), None);
        for line in [&b"12,x"[..], b"15,y", b"15,y", b"9,z", b"x,15"] {
            w.observe(line);
        }
        let t = w.faults[0].target().unwrap();
        assert_eq!(t.after.load(Ordering::SeqCst), 2);
        assert!(w.faults[0].recovery_ms().is_some_and(|ms| ms >= 0.0));
        assert_eq!(w.faults[1].window[0].before.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn tally_counts_duplicates_missing_and_wrong_lines() {
        let mut e = Expected::default();
        for (i, line) in ["1,x,0,L0", "2,x,0,L0", "3,x,0,L0"].iter().enumerate() {
            e.kept.push(KeptRecord {
                index: i as u64,
                id: i as u64 + 1,
                line_hash: line_hash(line),
            });
        }
        let got: Vec<String> = ["1,x,0,L0", "1,x,0,L0", "3,y,0,L0", "7,x,0,L0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let t = tally(&e, &got);
        assert_eq!((t.duplicates, t.missing, t.unexpected), (1, 1, 1));
        assert_eq!(t.wrong_lines, 3);
        assert_eq!(t.duplicate_examples, [1]);
        assert_eq!(t.missing_examples, [2]);
    }
}
