//! A replayable source of generated transactions whose end a driver can hold back
//! ([`Release`]): it emits transactions below the released bound, then idles until the next
//! release wakes it (`SourceStatus::Idle`, no CPU spent), so a drill
//! can let a checkpoint complete, arm a fault or change the config at a known transaction.
//! Its checkpointed position is the next transaction id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use weir::source::{Source, SourceStatus, SourceWaker};
use weir::SourceError;

use super::{transaction, Transaction};

/// The bound a driver moves: transactions with an id below it may be emitted.
#[derive(Debug, Clone)]
pub struct Release {
    bound: Arc<AtomicU64>,
    /// The id the source waits at (all below it emitted), `u64::MAX` while it is not waiting.
    waiting_at: Arc<AtomicU64>,
    /// The running source's waker: a release ends its idle wait.
    waker: Arc<Mutex<Option<SourceWaker>>>,
}

impl Release {
    /// Everything up to `bound` (exclusive) is released at first.
    pub fn new(bound: u64) -> Self {
        Release {
            bound: Arc::new(AtomicU64::new(bound)),
            waiting_at: Arc::new(AtomicU64::new(u64::MAX)),
            waker: Arc::default(),
        }
    }
    /// Releases transactions below `bound` (and wakes the source if it waits).
    pub fn release(&self, bound: u64) {
        self.bound.fetch_max(bound, Ordering::SeqCst);
        let waker = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = waker.as_ref() {
            w.wake();
        }
    }
    /// Whether the source has emitted every transaction below `bound` and waits.
    pub fn is_waiting_at(&self, bound: u64) -> bool {
        self.waiting_at.load(Ordering::SeqCst) == bound
    }
}

/// Transactions `start..end` of stream `seed` over `cards` cards, up to the released bound.
#[derive(Debug)]
pub struct TransactionSource {
    seed: u64,
    cards: u64,
    next: u64,
    end: u64,
    release: Release,
}

impl TransactionSource {
    /// The source of transactions `0..n` (one subtask).
    pub fn new(seed: u64, cards: u64, n: u64, release: Release) -> Self {
        TransactionSource {
            seed,
            cards,
            next: 0,
            end: n,
            release,
        }
    }
}

impl Source<Transaction> for TransactionSource {
    fn set_waker(&mut self, waker: SourceWaker) {
        // A restarted source replaces the waker of the one before.
        *self
            .release
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(waker);
    }

    fn poll_batch(
        &mut self,
        out: &mut Vec<Transaction>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        if self.next >= self.end {
            return Ok(SourceStatus::End);
        }
        let bound = self.release.bound.load(Ordering::SeqCst).min(self.end);
        if self.next >= bound {
            // Idle, at no cost, until a release wakes it.
            self.release.waiting_at.store(self.next, Ordering::SeqCst);
            return Ok(SourceStatus::Idle { until: None });
        }
        let stop = bound.min(self.next + max as u64);
        out.extend((self.next..stop).map(|i| transaction(self.seed, i, self.cards)));
        self.next = stop;
        Ok(SourceStatus::More)
    }

    fn position(&self) -> Option<Vec<u8>> {
        Some(self.next.to_le_bytes().to_vec())
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let bytes: [u8; 8] = position.try_into().map_err(|_| SourceError::BadPosition {
            message: format!(
                "a transaction source position is 8 bytes, got {}",
                position.len()
            ),
        })?;
        self.next = u64::from_le_bytes(bytes);
        Ok(())
    }
}
