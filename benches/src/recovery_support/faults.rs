//! The harness's faults in `flat_map` ([`FlatMapFaults`], [`FaultyParseAndLevel`], by
//! [`Kind`]) and the [`FaultWatch`] that finds, per fault, the record whose arrival at the sink
//! times its recovery (see the parent module's "Faults in `flat_map`" and "Recovery of several
//! faults").

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir::{
    Collector, ConfigError, ConfigKey, Operator, ProcessFunction, StateError, StateSnapshot,
};
use weir_examples::answers::{uid, BadRecord, Cleaned, ParseAndLevel, Tagged};
use weir_testing::{FaultKind, FaultPlan, RecordFaults};

use super::{KeptRecord, RecoveryProbe, UNSET};

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
