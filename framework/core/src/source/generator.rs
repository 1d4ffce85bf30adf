//! A bounded source of `n` records computed from their index.

use super::{Source, SourceStatus};
use crate::error::SourceError;

/// Emits `f(i)` for each `i` in its share of `0..n`, in order.
pub struct GeneratorSource<F> {
    f: F,
    next: u64,
    end: u64,
}

impl<F> GeneratorSource<F> {
    /// Over the index range `range`.
    pub fn new(f: F, range: std::ops::Range<u64>) -> Self {
        GeneratorSource {
            f,
            next: range.start,
            end: range.end,
        }
    }
}

impl<T, F> Source<T> for GeneratorSource<F>
where
    F: FnMut(u64) -> T + Send + 'static,
{
    #[inline]
    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        let stop = self.end.min(self.next.saturating_add(max as u64));
        out.extend((self.next..stop).map(&mut self.f));
        self.next = stop;
        Ok(if self.next >= self.end {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }

    fn position(&self) -> Option<Vec<u8>> {
        crate::checkpoint::encode(&self.next).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let next: u64 = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        self.next = next.min(self.end);
        Ok(())
    }
}
