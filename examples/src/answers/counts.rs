//! Counting records per level: [`LevelCounts`], filled by the `map` operator through one
//! [`LevelCounter`] per subtask, read after the job.
//!
//! Owns the per-subtask slots and their totals. It does not decide the levels (`clean`) nor
//! report them (`summary`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::records::LevelName;

const SLOT_LEVELS: usize = 64;

/// One `map` subtask's counts: only that subtask writes them (no contention).
#[derive(Debug)]
struct Slot {
    names: Mutex<Vec<LevelName>>,
    counts: Vec<AtomicU64>,
}

/// Records per level, counted by the `map` operator of a job; read after the job.
#[derive(Debug, Clone, Default)]
pub struct LevelCounts {
    slots: Arc<Mutex<Vec<Arc<Slot>>>>,
}

impl LevelCounts {
    /// A counter with a slot of its own (so one per subtask: cloning makes a new one).
    pub fn counter(&self) -> LevelCounter {
        let slot = Arc::new(Slot {
            names: Mutex::new(Vec::new()),
            counts: (0..=SLOT_LEVELS).map(|_| AtomicU64::new(0)).collect(),
        });
        lock(&self.slots).push(slot.clone());
        LevelCounter {
            counts: self.clone(),
            slot,
            names: Vec::new(),
        }
    }

    /// Records per level name over every subtask (names beyond the 64th distinct one of a
    /// subtask are counted as `(other)`).
    pub fn totals(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for slot in lock(&self.slots).iter() {
            let names = lock(&slot.names);
            for (i, c) in slot.counts.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let name = names
                    .get(i)
                    .map(|l| l.as_str().to_owned())
                    .unwrap_or_else(|| "(other)".to_owned());
                *m.entry(name).or_insert(0) += n;
            }
        }
        m
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts records per level for one subtask: an uncontended relaxed atomic add per record.
/// Cloning it (as the framework does per subtask) registers a new slot.
#[derive(Debug)]
pub struct LevelCounter {
    counts: LevelCounts,
    slot: Arc<Slot>,
    /// The slot's names, read without the lock.
    names: Vec<LevelName>,
}

impl Clone for LevelCounter {
    fn clone(&self) -> Self {
        self.counts.counter()
    }
}

impl LevelCounter {
    /// Counts one record of `level`.
    #[inline]
    pub fn add(&mut self, level: LevelName) {
        let i = match self.names.iter().position(|n| *n == level) {
            Some(i) => i,
            None if self.names.len() < SLOT_LEVELS => {
                self.names.push(level);
                lock(&self.slot.names).push(level);
                self.names.len() - 1
            }
            None => SLOT_LEVELS,
        };
        self.slot.counts[i].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_per_clone() {
        let counts = LevelCounts::default();
        let mut a = counts.counter();
        let mut b = a.clone();
        let (l0, l1) = (LevelName::new("L0").unwrap(), LevelName::new("L1").unwrap());
        a.add(l0);
        a.add(l1);
        b.add(l1);
        let t = counts.totals();
        assert_eq!(t["L0"], 1);
        assert_eq!(t["L1"], 2);
    }
}
