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

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::io::BufRead;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use weir::sink::{Sink, SinkContext};
use weir::{
    BackupPolicy, Collector, ConfigError, ConfigKey, Env, Operator, ProcessFunction, SinkError,
    StateError, StateSnapshot,
};
use weir_examples::answers::{
    answer_json, clean_line, cleaning_streams_with, default_levels, format_cleaned, uid, Answers,
    BadRecord, Cleaned, Input, Levels, ParseAndLevel, Tagged, Thresholds,
};
#[cfg(doc)]
use weir_testing::read_committed;
use weir_testing::{
    encode_json, ExactlyOnce, FaultKind, FaultPlan, PartFileStats, RecordFaults, TwoPhaseFileSink,
    FINAL_COMMIT,
};

use crate::clock_ns;

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

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

/// How an injected fault fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The operator panics.
    #[default]
    Panic,
    /// The operator blocks its thread until the job stops or restarts; caught by a heartbeat
    /// timeout.
    Hang,
    /// The operator stops its arbiter thread: every subtask on it is lost.
    Stop,
}

impl Kind {
    /// Its name on the command line and in the reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Panic => "panic",
            Kind::Hang => "hang",
            Kind::Stop => "stop",
        }
    }

    /// The framework's [`FaultKind`] of the same failure.
    pub fn fault_kind(self) -> FaultKind {
        match self {
            Kind::Panic => FaultKind::Panic,
            Kind::Hang => FaultKind::Hang,
            Kind::Stop => FaultKind::StopArbiter,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;

    /// `panic`, `hang` or `stop`.
    ///
    /// ```
    /// use weir_benches::recovery_support::Kind;
    /// assert_eq!("hang".parse::<Kind>(), Ok(Kind::Hang));
    /// assert!("crash".parse::<Kind>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "panic" => Ok(Kind::Panic),
            "hang" => Ok(Kind::Hang),
            "stop" | "arbiter-stop" => Ok(Kind::Stop),
            _ => Err(format!(
                "unknown fault kind `{s}`: one of panic, hang, stop"
            )),
        }
    }
}

/// A kept record watched after a fault.
#[derive(Debug)]
pub struct Watched {
    /// Its answer id.
    pub id: u64,
    /// Its index in the input.
    pub index: u64,
    /// Its position among the failed subtask's input records.
    pub local: u64,
    /// When the sink first received it after the fault fired (0: not yet).
    pub first_after_ns: AtomicU64,
    /// Receipts before the fault fired.
    pub before: AtomicU32,
    /// Receipts after the fault fired (every attempt's, under restart-all).
    pub after: AtomicU32,
}

/// One fault of a [`FaultWatch`].
#[derive(Debug)]
pub struct WatchedFault {
    /// The input index of the record it fires at.
    pub index: u64,
    /// That record's position among the failed subtask's input records.
    pub local: u64,
    /// When it fired (0: not yet).
    pub fault_ns: AtomicU64,
    /// Records the failed instance processed from the fault on (a stop lets it finish its
    /// poll; 0 for a panic or a hang).
    pub processed_after: AtomicU64,
    /// Records the recovering instance (the promoted backup, or the restarted job's) processed
    /// before it reached the fault's record again: the replay up to it (`u64::MAX`: it did
    /// not reach it).
    pub replayed_to_fault: AtomicU64,
    /// The kept records of the failed subtask from the fault's record up to the next fault's.
    pub window: Vec<Watched>,
}

impl WatchedFault {
    /// The window's record whose receipt ends recovery: the first the failed instance did
    /// not process.
    pub fn target(&self) -> Option<&Watched> {
        let done = self.local + self.processed_after.load(Ordering::SeqCst);
        self.window.iter().find(|w| w.local >= done)
    }

    /// Milliseconds from the fault to the sink's first receipt of the target after it.
    pub fn recovery_ms(&self) -> Option<f64> {
        let fault = self.fault_ns.load(Ordering::SeqCst);
        let t = self.target()?.first_after_ns.load(Ordering::SeqCst);
        (fault != UNSET && t != UNSET).then(|| t.saturating_sub(fault) as f64 / 1e6)
    }
}

/// A multiplicative hash for answer ids (the sink looks one up per record after a fault).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The windows of several faults, observed by the sink (see the module documentation).
#[derive(Debug, Default)]
pub struct FaultWatch {
    /// The faults, in firing order.
    pub faults: Vec<WatchedFault>,
    by_id: HashMap<u64, (u32, u32), BuildHasherDefault<IdHasher>>,
    lo: u64,
    hi: u64,
}

impl FaultWatch {
    /// Faults at `(input index, position in the failed subtask)`, in order, each watching the
    /// kept records `kept` (with their positions in the failed subtask, in order) from its
    /// record up to the next fault's record (or the end). (A stop can let the failed instance
    /// process tens of thousands of records before its thread ends: no shorter window.)
    pub fn new(faults: &[(u64, u64)], kept: &[(KeptRecord, u64)]) -> Self {
        let mut w = FaultWatch {
            lo: u64::MAX,
            ..Default::default()
        };
        for (k, &(index, local)) in faults.iter().enumerate() {
            let end = faults.get(k + 1).map_or(u64::MAX, |f| f.1);
            let from = kept.partition_point(|(_, l)| *l < local);
            let window: Vec<Watched> = kept[from..]
                .iter()
                .take_while(|(_, l)| *l < end)
                .map(|(r, l)| Watched {
                    id: r.id,
                    index: r.index,
                    local: *l,
                    first_after_ns: AtomicU64::new(UNSET),
                    before: AtomicU32::new(0),
                    after: AtomicU32::new(0),
                })
                .collect();
            for (r, x) in window.iter().enumerate() {
                w.by_id.insert(x.id, (k as u32, r as u32));
                w.lo = w.lo.min(x.id);
                w.hi = w.hi.max(x.id);
            }
            w.faults.push(WatchedFault {
                index,
                local,
                fault_ns: AtomicU64::new(UNSET),
                processed_after: AtomicU64::new(0),
                replayed_to_fault: AtomicU64::new(u64::MAX),
                window,
            });
        }
        w
    }

    /// Notes the receipt of an output line (`<id>,...`).
    #[inline]
    pub fn observe(&self, line: &[u8]) {
        let mut id = 0u64;
        let mut digits = 0;
        for &b in line {
            if !b.is_ascii_digit() {
                break;
            }
            id = id.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
            digits += 1;
        }
        if digits == 0 || id < self.lo || id > self.hi {
            return;
        }
        let Some(&(k, r)) = self.by_id.get(&id) else {
            return;
        };
        let f = &self.faults[k as usize];
        let w = &f.window[r as usize];
        if f.fault_ns.load(Ordering::SeqCst) != UNSET {
            w.after.fetch_add(1, Ordering::SeqCst);
            RecoveryProbe::stamp(&w.first_after_ns);
        } else {
            w.before.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The harness's faults in `flat_map` (see the module documentation): `weir_testing`'s
/// [`RecordFaults`] keyed by the input line, firing in order, timed in the probe; shared by
/// every instance of [`FaultyParseAndLevel`] and the probe.
#[derive(Debug)]
pub struct FlatMapFaults {
    faults: RecordFaults<weir::Text>,
    probe: Arc<RecoveryProbe>,
}

impl FlatMapFaults {
    /// Faults of `kind` at `lines` (in the order they fire), timed in `probe` (its watch has a
    /// fault per line), released with `plan` (the job's `EnvConfig::faults`).
    pub fn new(kind: Kind, lines: Vec<String>, probe: Arc<RecoveryProbe>, plan: FaultPlan) -> Self {
        let timed = probe.clone();
        let lines = lines.into_iter().map(weir::Text::from).collect();
        let faults = RecordFaults::new(uid::FLAT_MAP, kind.fault_kind(), lines)
            .in_order()
            .released_by(&plan)
            .on_fire(move |k| timed.fault_fired_now(k));
        FlatMapFaults { faults, probe }
    }

    /// How many fired.
    pub fn fired(&self) -> usize {
        self.faults.fired()
    }

    fn watched(&self, k: usize) -> Option<&WatchedFault> {
        self.probe.watch.as_ref().and_then(|w| w.faults.get(k))
    }

    fn processed_after(&self, k: usize) {
        if let Some(f) = self.watched(k) {
            f.processed_after.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Where an instance of [`FaultyParseAndLevel`] is in replaying up to the last fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUp {
    /// It has processed nothing yet.
    Fresh,
    /// It recovers from fault `k` and has processed `seen` records before reaching its record.
    Replaying { k: usize, seen: u64 },
    /// Nothing (more) to measure.
    Done,
}

/// `ParseAndLevel` with the harness's faults: the same operator (name, state, output), failing
/// before it processes a fault's record for the first time (see the module documentation). An
/// instance created after a fault (a promoted backup, the restarted job's) also counts the
/// records it processes before it reaches that fault's record
/// ([`WatchedFault::replayed_to_fault`]).
#[derive(Debug, Clone)]
pub struct FaultyParseAndLevel {
    inner: ParseAndLevel,
    faults: Arc<FlatMapFaults>,
    /// The fault this instance fired with a stop (it finishes its poll).
    stopped_at: Option<usize>,
    catch_up: CatchUp,
}

impl FaultyParseAndLevel {
    /// A fresh operator failing with `faults`.
    pub fn new(faults: Arc<FlatMapFaults>) -> Self {
        FaultyParseAndLevel {
            inner: ParseAndLevel::default(),
            faults,
            stopped_at: None,
            catch_up: CatchUp::Fresh,
        }
    }

    #[inline]
    fn catch_up(&mut self, line: &str) {
        let (k, seen) = match self.catch_up {
            CatchUp::Done => return,
            CatchUp::Fresh => match self.faults.faults.last_fired() {
                None => {
                    self.catch_up = CatchUp::Done;
                    return;
                }
                Some(k) => (k, 0),
            },
            CatchUp::Replaying { k, seen } => (k, seen),
        };
        if self.faults.faults.record(k).is_some_and(|l| l == line) {
            if let Some(f) = self.faults.watched(k) {
                f.replayed_to_fault.store(seen, Ordering::SeqCst);
            }
            self.catch_up = CatchUp::Done;
        } else {
            self.catch_up = CatchUp::Replaying { k, seen: seen + 1 };
        }
    }
}

impl ProcessFunction<Tagged, Result<Cleaned, BadRecord>> for FaultyParseAndLevel {
    #[inline]
    fn process(&mut self, t: Tagged, out: &mut Collector<Result<Cleaned, BadRecord>>) {
        self.catch_up(&t.line.text);
        if let Some(k) = self.stopped_at {
            self.faults.processed_after(k);
        } else if let Some(k) = self.faults.faults.check(&t.line.text) {
            // Only a stop returns (a panic or a hang does not): the arbiter's loop ends after
            // this poll, and this instance counts what it processes until then.
            self.stopped_at = Some(k);
            self.faults.processed_after(k);
        }
        self.inner.process(t, out);
    }

    fn end_of_input(&mut self, out: &mut Collector<Result<Cleaned, BadRecord>>) {
        ProcessFunction::<Tagged, Result<Cleaned, BadRecord>>::end_of_input(&mut self.inner, out);
    }
}

impl Operator for FaultyParseAndLevel {
    const NAME: &'static str = ParseAndLevel::NAME;
    const STATE_VERSION: u32 = ParseAndLevel::STATE_VERSION;

    fn config_keys() -> &'static [ConfigKey] {
        ParseAndLevel::config_keys()
    }
    fn snapshot_state(&self) -> Result<StateSnapshot, StateError> {
        self.inner.snapshot_state()
    }
    fn restore_state(&mut self, snapshot: &StateSnapshot) -> Result<(), StateError> {
        self.inner.restore_state(snapshot)
    }
    fn on_config(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.inner.on_config(key, value)
    }
}

// ---------------------------------------------------------------------------------------------
// Expected output
// ---------------------------------------------------------------------------------------------

/// A kept record of the input.
#[derive(Debug, Clone, Copy)]
pub struct KeptRecord {
    /// 0-based index of the record (non-blank line) in the input.
    pub index: u64,
    /// Its answer id.
    pub id: u64,
    /// Hash of its output line.
    pub line_hash: u64,
}

/// What the job must commit, computed sequentially with the job's functions (`clean_line`
/// with the built-in thresholds, then the `filter` rule `Cleaned::is_kept`, then
/// `format_cleaned`).
#[derive(Debug, Default)]
pub struct Expected {
    /// Records of the input.
    pub records: u64,
    /// The records the `sink` must commit, in input order.
    pub kept: Vec<KeptRecord>,
    /// Records dropped by `filter`.
    pub dropped: u64,
    /// Records sent to the `malformed` side output.
    pub malformed: u64,
}

/// Hash of a line (the same in every run of the program).
pub fn line_hash(line: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut h);
    h.finish()
}

impl Expected {
    fn push(&mut self, index: u64, line: String, levels: &Thresholds) {
        self.records += 1;
        match clean_line(line, levels) {
            Err(_) => self.malformed += 1,
            Ok(c) if !c.is_kept() => self.dropped += 1,
            Ok(c) => self.kept.push(KeptRecord {
                index,
                id: c.id,
                line_hash: line_hash(&format_cleaned(&c)),
            }),
        }
    }

    /// The output of `records` generated answers of stream `seed`.
    pub fn generated(records: u64, seed: u64) -> Self {
        let levels = Thresholds::from_vec(default_levels());
        let mut e = Expected::default();
        for i in 0..records {
            e.push(i, answer_json(seed, i), &levels);
        }
        e
    }

    /// The output of the lines of `path`, read as `read_lines` does (line endings removed,
    /// blank lines passed over, a line that is not UTF-8 is an error).
    pub fn from_file(path: &Path) -> std::io::Result<Self> {
        let levels = Thresholds::from_vec(default_levels());
        let mut e = Expected::default();
        for_each_input_line(path, |index, line| {
            e.push(index, line.to_owned(), &levels);
        })?;
        Ok(e)
    }
}

/// Calls `f(index, line)` for every record of the file `path`, read as `read_lines` does
/// (line endings removed, blank lines passed over, a line that is not UTF-8 is an error);
/// `index` counts records from 0.
pub fn for_each_input_line(path: &Path, mut f: impl FnMut(u64, &str)) -> std::io::Result<()> {
    let mut r = std::io::BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut index = 0u64;
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let mut end = buf.len();
        while end > 0 && matches!(buf[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        if buf[..end].iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = std::str::from_utf8(&buf[..end]).map_err(|err| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {line_no} is not UTF-8: {err}"),
            )
        })?;
        f(index, line);
        index += 1;
    }
    Ok(())
}

/// The input records at `indices` (in that order), and how often each occurs in the whole
/// input (a fault keyed by its line needs a line that occurs once).
pub fn input_lines_at(answers: &Answers, indices: &[u64]) -> std::io::Result<Vec<(String, u64)>> {
    match answers {
        // Every generated answer has its own id.
        Answers::Generated { seed, .. } => Ok(indices
            .iter()
            .map(|&i| (answer_json(*seed, i), 1))
            .collect()),
        Answers::Lines(path) => {
            let mut lines: Vec<Option<String>> = vec![None; indices.len()];
            for_each_input_line(path, |i, line| {
                for (k, &at) in indices.iter().enumerate() {
                    if at == i {
                        lines[k] = Some(line.to_owned());
                    }
                }
            })?;
            let lines: Vec<String> = lines
                .into_iter()
                .zip(indices)
                .map(|(l, i)| {
                    l.ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("the input has no record {i}"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut counts = vec![0u64; lines.len()];
            for_each_input_line(path, |_, line| {
                for (k, l) in lines.iter().enumerate() {
                    if l == line {
                        counts[k] += 1;
                    }
                }
            })?;
            Ok(lines.into_iter().zip(counts).collect())
        }
    }
}

/// The committed output compared with the expected one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Lines committed.
    pub committed: u64,
    /// Extra copies of expected ids (an id committed k times more than expected counts k).
    pub duplicates: u64,
    /// Expected ids not committed (as often as expected).
    pub missing: u64,
    /// Committed lines whose id is not expected at all.
    pub unexpected: u64,
    /// Committed lines that are not an expected line (wrong content), by multiset.
    pub wrong_lines: u64,
    /// Committed lines without a numeric id before the first comma.
    pub unparsable: u64,
    /// Up to 10 duplicated ids, for diagnosis.
    pub duplicate_examples: Vec<u64>,
    /// Up to 10 missing ids, for diagnosis.
    pub missing_examples: Vec<u64>,
}

/// Compares `lines` (committed) with `expected`, with `weir_testing`'s [`ExactlyOnce`]: by
/// answer id (duplicates, missing, unexpected), and by line content (a committed line that is
/// not one of the expected lines, by multiset, is wrong).
pub fn tally(expected: &Expected, lines: &[String]) -> Tally {
    let mut unparsable = 0;
    let ids: Vec<u64> = lines
        .iter()
        .filter_map(|line| {
            let id = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
            unparsable += u64::from(id.is_none());
            id
        })
        .collect();
    let by_id = ExactlyOnce::new(expected.kept.iter().map(|k| k.id)).check(ids);
    let by_line = ExactlyOnce::new(expected.kept.iter().map(|k| k.line_hash))
        .check(lines.iter().map(|l| line_hash(l)));
    Tally {
        committed: lines.len() as u64,
        duplicates: by_id.duplicates,
        missing: by_id.missing,
        unexpected: by_id.unexpected,
        // Extra copies of an expected line, and lines not expected at all.
        wrong_lines: by_line.duplicates + by_line.unexpected,
        unparsable,
        duplicate_examples: by_id.duplicate_ids,
        missing_examples: by_id.missing_ids,
    }
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
