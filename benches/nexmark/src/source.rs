//! The replayable Nexmark source: one subtask's share of the generator's timeline, with the
//! generator's offset as its checkpointed position.

use nexmark::config::NexmarkConfig;
use nexmark::EventGenerator;
use serde::{Deserialize, Serialize};

use super::error::NexmarkError;
use super::Event;
use weir::error::SourceError;
use weir::source::{Source, SourceContext, SourceStatus};

/// The events `offset, offset + step, ...` below `end` of the Nexmark generator, where
/// `offset` starts at the subtask's index and `step` is the source's parallelism
/// (`EventGenerator::new(cfg).with_offset(subtask).with_step(parallelism)`).
///
/// Its position is the generator's offset (the next event's number): a source restored from
/// a checkpoint generates exactly the events it had not emitted, the same ones (the
/// generator is a function of the event number).
///
/// ```
/// use weir_nexmark::GeneratorConfig;
/// use weir::source::{Source, SourceContext, SourceStatus};
///
/// let cx = SourceContext { subtask: 0, parallelism: 2 };
/// let config = GeneratorConfig::new(100);
/// let mut source = config.source(cx).unwrap();
/// let mut first = Vec::new();
/// assert_eq!(source.poll_batch(&mut first, 10).unwrap(), SourceStatus::More);
/// let position = source.position().unwrap();
/// let mut rest = Vec::new();
/// while source.poll_batch(&mut rest, 10).unwrap() == SourceStatus::More {}
///
/// // Another instance, restored at the position, emits the same rest.
/// let mut restored = config.source(cx).unwrap();
/// restored.seek(&position).unwrap();
/// let mut again = Vec::new();
/// while restored.poll_batch(&mut again, 7).unwrap() == SourceStatus::More {}
/// assert_eq!(again, rest);
/// assert_eq!(first.len() + rest.len(), 50);
/// ```
#[derive(Debug, Clone)]
pub struct NexmarkSource {
    config: NexmarkConfig,
    generator: EventGenerator,
    subtask: u64,
    step: u64,
    end: u64,
}

/// The checkpointed position: the next offset, and the step it belongs to (a position of
/// another parallelism is refused).
#[derive(Debug, Serialize, Deserialize)]
struct Position {
    offset: u64,
    step: u64,
}

impl NexmarkSource {
    /// Subtask `cx`'s share of the first `events` events of `config`'s timeline.
    ///
    /// ```
    /// use weir::source::SourceContext;
    /// let config = weir_nexmark::GeneratorConfig::new(10).nexmark_config().unwrap();
    /// let cx = SourceContext { subtask: 2, parallelism: 3 };
    /// let source = weir_nexmark::NexmarkSource::new(config, cx, 10).unwrap();
    /// assert_eq!(source.remaining(), 3); // events 2, 5, 8
    /// ```
    pub fn new(
        config: NexmarkConfig,
        cx: SourceContext,
        events: u64,
    ) -> Result<Self, NexmarkError> {
        if cx.parallelism == 0 || cx.subtask >= cx.parallelism {
            return Err(NexmarkError::BadSubtask {
                subtask: cx.subtask,
                parallelism: cx.parallelism,
            });
        }
        let (subtask, step) = (cx.subtask as u64, cx.parallelism as u64);
        Ok(NexmarkSource {
            generator: Self::generator(&config, subtask, step),
            config,
            subtask,
            step,
            end: events,
        })
    }

    fn generator(config: &NexmarkConfig, offset: u64, step: u64) -> EventGenerator {
        EventGenerator::new(config.clone())
            .with_offset(offset)
            .with_step(step)
    }

    /// The number of the next event this source emits (its generator's offset).
    ///
    /// ```
    /// use weir::source::SourceContext;
    /// let cx = SourceContext { subtask: 1, parallelism: 2 };
    /// let source = weir_nexmark::GeneratorConfig::new(10).source(cx).unwrap();
    /// assert_eq!(source.offset(), 1);
    /// ```
    pub fn offset(&self) -> u64 {
        self.generator.offset()
    }

    /// How many events this source has still to emit.
    ///
    /// ```
    /// use weir::source::SourceContext;
    /// let cx = SourceContext { subtask: 0, parallelism: 1 };
    /// assert_eq!(weir_nexmark::GeneratorConfig::new(7).source(cx).unwrap().remaining(), 7);
    /// ```
    pub fn remaining(&self) -> u64 {
        let offset = self.offset();
        if offset >= self.end {
            0
        } else {
            (self.end - offset).div_ceil(self.step)
        }
    }
}

impl Source<Event> for NexmarkSource {
    #[inline]
    fn poll_batch(
        &mut self,
        out: &mut Vec<Event>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let n = self.remaining().min(max as u64) as usize;
        out.reserve(n);
        out.extend(self.generator.by_ref().take(n));
        Ok(if self.offset() >= self.end {
            SourceStatus::End
        } else {
            SourceStatus::More
        })
    }

    fn position(&self) -> Option<Vec<u8>> {
        weir::checkpoint::encode(&Position {
            offset: self.offset(),
            step: self.step,
        })
        .ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p: Position =
            weir::checkpoint::decode(position).map_err(|message| SourceError::BadPosition {
                message: format!("not a nexmark source position: {message}"),
            })?;
        if p.step != self.step || p.offset % self.step != self.subtask {
            return Err(SourceError::BadPosition {
                message: format!(
                    "nexmark position at offset {} with step {} is not one of subtask {} of \
                     parallelism {}",
                    p.offset, p.step, self.subtask, self.step
                ),
            });
        }
        self.generator = Self::generator(&self.config, p.offset, self.step);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GeneratorConfig;

    fn drain(s: &mut NexmarkSource, max: usize) -> Vec<Event> {
        let mut out = Vec::new();
        while s.poll_batch(&mut out, max).unwrap() == SourceStatus::More {}
        out
    }

    #[test]
    fn the_subtasks_interleave_the_one_timeline() {
        let config = GeneratorConfig::new(1_003);
        let all: Vec<Event> = config.events().collect();
        assert_eq!(all.len(), 1_003);
        for p in [1usize, 2, 3, 4] {
            let mut merged: Vec<Option<Event>> = vec![None; all.len()];
            for i in 0..p {
                let cx = SourceContext {
                    subtask: i,
                    parallelism: p,
                };
                let mine = drain(&mut config.source(cx).unwrap(), 64);
                for (k, e) in mine.into_iter().enumerate() {
                    let n = i + k * p;
                    assert!(merged[n].is_none());
                    merged[n] = Some(e);
                }
            }
            let merged: Vec<Event> = merged.into_iter().map(|e| e.unwrap()).collect();
            assert_eq!(merged, all, "parallelism {p}");
        }
    }

    #[test]
    fn a_position_of_another_subtask_or_parallelism_is_refused() {
        let config = GeneratorConfig::new(100);
        let cx = |subtask, parallelism| SourceContext {
            subtask,
            parallelism,
        };
        let mut s0 = config.source(cx(0, 2)).unwrap();
        let mut batch = Vec::new();
        s0.poll_batch(&mut batch, 3).unwrap();
        let pos = s0.position().unwrap();
        let mut s1 = config.source(cx(1, 2)).unwrap();
        assert!(matches!(
            s1.seek(&pos),
            Err(SourceError::BadPosition { .. })
        ));
        let mut other = config.source(cx(0, 3)).unwrap();
        assert!(matches!(
            other.seek(&pos),
            Err(SourceError::BadPosition { .. })
        ));
        assert!(matches!(
            s1.seek(b"garbage"),
            Err(SourceError::BadPosition { .. })
        ));
        assert!(matches!(
            GeneratorConfig::new(1).source(cx(2, 2)),
            Err(NexmarkError::BadSubtask { .. })
        ));
    }

    #[test]
    fn the_timestamps_follow_the_first_event_rate() {
        // 10M events/s: event n is at base + n / 10_000 ms.
        let config = GeneratorConfig::new(100_001).with_base_time(0);
        let last = config.events().last().unwrap();
        assert_eq!(crate::event_time(&last), 10);
        let slow = GeneratorConfig::new(11)
            .with_base_time(5)
            .with_first_event_rate(100);
        let ts: Vec<i64> = slow.events().map(|e| crate::event_time(&e)).collect();
        assert_eq!(ts, (0..11).map(|n| 5 + n * 10).collect::<Vec<_>>());
    }
}
