//! Fraud detection, Flink's fraud-detection tutorial in Weir: a card is flagged when a
//! transaction under $1 is followed, within a minute, by one over $500 (a thief testing a
//! stolen card with a small charge before a large one).
//!
//! The rule is one derived operator, [`FraudDetector`], on the stream keyed by card: its
//! `#[weir(state)]` field is a [`ValueState`] per card (the runtime puts the card's value in it
//! before each transaction), with a one-minute time to live so the flag of a card that never
//! comes back is cleaned; its thresholds are `#[weir(config)]` fields a running job changes.
//!
//! - [`transaction`]: the generated input (seeded, the same on every machine).
//! - [`reference`]: the rule, one transaction after another, to check a job against.
//! - [`source`]: a replayable transaction source whose end a driver can hold back.
//! - [`drill`]: runs the job with faults injected after checkpoints and a live config change,
//!   and checks its alerts against the reference.

pub mod drill;
pub mod source;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::{Collector, Operator, ProcessFunction, ValueState};
use weir_testing::RecordFaults;

use crate::rng::SplitMix64;

/// One card transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// Unique, in generation order.
    pub id: u64,
    /// The card charged.
    pub card: u64,
    /// The amount, in cents.
    pub amount_cents: u64,
    /// When it happened (event time, ms; 100 transactions per ms).
    pub time_ms: u64,
}

/// A card flagged: a small transaction followed by a large one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Alert {
    /// The card.
    pub card: u64,
    /// The small transaction.
    pub small_id: u64,
    /// The large one that followed it.
    pub large_id: u64,
}

/// The rule's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Below this (cents) a transaction is small.
    pub small_cents: u64,
    /// Above this (cents) a transaction is large.
    pub large_cents: u64,
    /// How long after a small transaction a large one is suspicious (event time, ms).
    pub window_ms: u64,
}

impl Default for Thresholds {
    /// Flink's tutorial: under $1, over $500, within a minute.
    fn default() -> Self {
        Thresholds {
            small_cents: 100,
            large_cents: 50_000,
            window_ms: 60_000,
        }
    }
}

/// Transaction `i` of the stream `seed` over `cards` cards: 3 % are under $1, 3 % over $500,
/// the rest in between; a few cards are much busier than the rest.
///
/// ```
/// use weir_examples::fraud::transaction;
/// let t = transaction(7, 12, 1_000);
/// assert_eq!(t, transaction(7, 12, 1_000));
/// assert!(t.card < 1_000 && t.id == 12);
/// ```
pub fn transaction(seed: u64, i: u64, cards: u64) -> Transaction {
    let mut r = SplitMix64::for_item(seed, i);
    // Skewed: half the transactions go to the first tenth of the cards.
    let card = if r.below(2) == 0 {
        r.below(cards.div_ceil(10))
    } else {
        r.below(cards)
    };
    let amount_cents = match r.below(100) {
        0..=2 => r.range(1, 100),
        3..=5 => r.range(50_001, 200_000),
        _ => r.range(100, 50_001),
    };
    Transaction {
        id: i,
        card,
        amount_cents,
        time_ms: i / 100,
    }
}

/// The detector: one derived operator with per-card state and live thresholds.
///
/// ```
/// use weir::{Collector, ProcessFunction};
/// use weir_examples::fraud::{FraudDetector, Transaction};
/// // Outside a job there is no key: the fields act as one card's state.
/// let mut d = FraudDetector::default();
/// let t = |id, amount_cents| Transaction { id, card: 1, amount_cents, time_ms: id };
/// let mut out = Collector::default();
/// d.process(t(0, 50), &mut out);
/// d.process(t(1, 90_000), &mut out);
/// assert_eq!(out.len(), 1);
/// ```
// ANCHOR: detector
#[derive(Clone, Operator)]
#[weir(name = "fraud-detector", version = 1)]
pub struct FraudDetector {
    /// Below this (cents) a transaction is small.
    #[weir(config)]
    pub small_cents: u64,
    /// Above this (cents) a transaction is large.
    #[weir(config)]
    pub large_cents: u64,
    /// How long after a small transaction a large one is suspicious (event time, ms).
    #[weir(config)]
    pub window_ms: u64,
    /// The card's last transaction if it was small: (id, time). Per card; forgotten a minute
    /// (processing time) after it was set, so a card that never comes back costs nothing.
    #[weir(state, ttl = Duration::from_secs(60))]
    small: ValueState<(u64, u64)>,
    /// Faults to inject (fault drills); none in a real job.
    pub faults: Option<ArmedFaults>,
}

impl ProcessFunction<Transaction, Alert> for FraudDetector {
    fn process(&mut self, t: Transaction, out: &mut Collector<Alert>) {
        if let Some(f) = &self.faults {
            f.before_record();
        }
        // Whatever this transaction is, it ends the previous one's flag.
        if let Some((small_id, small_time)) = self.small.take() {
            let in_window = t.time_ms.saturating_sub(small_time) <= self.window_ms;
            if t.amount_cents > self.large_cents && in_window {
                out.collect(Alert {
                    card: t.card,
                    small_id,
                    large_id: t.id,
                });
            }
        }
        if t.amount_cents < self.small_cents {
            self.small.update((t.id, t.time_ms));
        }
    }
}
// ANCHOR_END: detector

impl Default for FraudDetector {
    fn default() -> Self {
        FraudDetector::new(Thresholds::default())
    }
}

impl FraudDetector {
    /// A detector with these thresholds.
    pub fn new(t: Thresholds) -> Self {
        FraudDetector {
            small_cents: t.small_cents,
            large_cents: t.large_cents,
            window_ms: t.window_ms,
            small: ValueState::default(),
            faults: None,
        }
    }
}

/// Faults a drill arms one at a time: the first record a detector instance sees after fault
/// `k` is armed fires it (each fires once, in whichever instance sees a record first).
#[derive(Clone, Debug)]
pub struct ArmedFaults {
    armed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    faults: Vec<RecordFaults<()>>,
}

impl ArmedFaults {
    /// Faults to arm, in order (none armed yet).
    pub fn new(faults: Vec<RecordFaults<()>>) -> Self {
        ArmedFaults {
            armed: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX)),
            faults,
        }
    }
    /// Arms fault `k`: the next record fires it.
    pub fn arm(&self, k: usize) {
        self.armed.store(k, std::sync::atomic::Ordering::SeqCst);
    }
    /// Whether fault `k` has fired.
    pub fn fired(&self, k: usize) -> bool {
        self.faults[k].fired() > 0
    }
    fn before_record(&self) {
        let k = self.armed.load(std::sync::atomic::Ordering::SeqCst);
        if let Some(f) = self.faults.get(k) {
            f.check(&());
        }
    }
}

/// The rule applied to `transactions` in order, with the thresholds in force at each
/// transaction id: what a correct job alerts, sorted.
///
/// ```
/// use weir_examples::fraud::{reference, Thresholds, Transaction};
/// let t = |id, card, amount_cents| Transaction { id, card, amount_cents, time_ms: id };
/// let txns = vec![t(0, 1, 50), t(1, 2, 50), t(2, 1, 90_000), t(3, 2, 1_000), t(4, 2, 90_000)];
/// let alerts = reference(txns, |_| Thresholds::default());
/// assert_eq!(alerts.len(), 1);
/// assert_eq!((alerts[0].small_id, alerts[0].large_id), (0, 2));
/// ```
pub fn reference(
    transactions: impl IntoIterator<Item = Transaction>,
    thresholds_at: impl Fn(u64) -> Thresholds,
) -> Vec<Alert> {
    let mut small: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    let mut alerts = Vec::new();
    for t in transactions {
        let th = thresholds_at(t.id);
        if let Some((small_id, small_time)) = small.remove(&t.card) {
            if t.amount_cents > th.large_cents && t.time_ms - small_time <= th.window_ms {
                alerts.push(Alert {
                    card: t.card,
                    small_id,
                    large_id: t.id,
                });
            }
        }
        if t.amount_cents < th.small_cents {
            small.insert(t.card, (t.id, t.time_ms));
        }
    }
    alerts.sort();
    alerts
}
