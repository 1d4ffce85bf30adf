//! A bounded source over the elements of a collection.

use std::sync::Arc;

use super::{Source, SourceStatus};
use crate::error::SourceError;

/// Emits its share of a shared `Vec`, in order, cloning each element once.
pub struct CollectionSource<T> {
    items: Arc<Vec<T>>,
    next: usize,
    end: usize,
}

impl<T> CollectionSource<T> {
    /// Over `items[range]`.
    pub fn new(items: Arc<Vec<T>>, range: std::ops::Range<usize>) -> Self {
        CollectionSource {
            items,
            next: range.start,
            end: range.end,
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Source<T> for CollectionSource<T> {
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        let stop = self.end.min(self.next + max);
        out.extend_from_slice(&self.items[self.next..stop]);
        self.next = stop;
        Ok(if self.next >= self.end {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }

    fn position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&(self.next as u64)).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let next: u64 = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        self.next = (next as usize).min(self.end);
        Ok(())
    }
}
