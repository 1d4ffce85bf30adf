//! The Nexmark benchmark on Weir: its events, a replayable source of them, the
//! suite's queries on Weir, a sequential reference of each query, and a blackhole sink.
//!
//! Nexmark (github.com/nexmark/nexmark) models an online auction: a stream of [`Person`]
//! (new users), [`Auction`] (items put up for sale) and [`Bid`] events, in the proportion
//! 1:3:46. Stream engines are compared on its queries; this module runs them the way the
//! suite's Flink SQL does.
//!
//! - [`GeneratorConfig`] and [`NexmarkSource`]: the suite's generator (the `nexmark` crate's
//!   port of it), configured as in the Flink suite: proportions 1:3:46, a fixed `base_time`
//!   (1436918400000, 2015-07-15, so runs repeat), `first_event_rate` events per second of
//!   event time, and a number of events over all source subtasks. Subtask `i` of `p`
//!   generates the events `i, i + p, i + 2p, ...` of one global timeline; its checkpointed
//!   position is its generator's offset, so a restored source goes on with exactly the
//!   events it had not emitted.
//! - [`event_time`]: an event's timestamp in ms since the epoch, and [`watermarks`], the
//!   suite's watermark strategy on it (`dateTime - INTERVAL '4' SECOND`), which
//!   [`queries::source`] gives the source.
//! - [`queries`]: the queries on Weir, as a table that the `nexmark` harness
//!   (`benches/src/bin/nexmark.rs`) and the tests run.
//! - [`reference`]: every query as a sequential, framework-free function over a list of
//!   events and watermarks, which says which records are late; what a Weir run must equal.
//! - [`Blackhole`]: a sink that keeps only a count and an order-independent checksum of what
//!   it was given (the suite's `'connector' = 'blackhole'`), exactly once under checkpoints.
//!
//! The events are the `nexmark` crate's own types (re-exported here): its `serde` feature
//! makes them [`Data`](weir::Data), so the source hands out what the generator makes with no
//! copy into structs of Weir's own. The queries' results are Weir's structs ([`rows`]), with
//! Flink's `BIGINT` columns as `u64`/`i64` and `DECIMAL(23, 3)` as [`Decimal3`].
//!
//! ```
//! use weir_nexmark::{self as nexmark, GeneratorConfig};
//!
//! let env = weir::Env::new();
//! let config = GeneratorConfig::new(5_000);
//! let bids = env
//!     .add_source("nexmark", config.factory())
//!     .filter(|e: &nexmark::Event| matches!(e, nexmark::Event::Bid(_)))
//!     .collect();
//! env.execute("nexmark-doc").unwrap();
//! // 46 of every 50 events are bids.
//! assert_eq!(bids.take().len(), 5_000 / 50 * 46);
//! ```

mod blackhole;
mod config;
mod error;
pub mod queries;
pub mod reference;
pub mod rows;
mod source;

pub use blackhole::{record_hash, Blackhole, BlackholeTotals};
pub use config::{GeneratorConfig, DEFAULT_BASE_TIME, DEFAULT_FIRST_EVENT_RATE};
pub use error::NexmarkError;
pub use nexmark::event::{Auction, Bid, Event, EventType, Person};
pub use rows::{Decimal3, Window};
pub use source::NexmarkSource;

/// An event's time: its `date_time`, in milliseconds since the Unix epoch (the suite's
/// `dateTime` column). A time past `i64::MAX` (which the generator never makes) is
/// `i64::MAX`.
///
/// ```
/// use weir_nexmark::{event_time, GeneratorConfig, DEFAULT_BASE_TIME};
///
/// let first = GeneratorConfig::new(1).events().next().unwrap();
/// assert_eq!(event_time(&first), DEFAULT_BASE_TIME as i64);
/// ```
pub fn event_time(e: &Event) -> i64 {
    rows::ms(e.timestamp())
}

/// The suite's watermark strategy (`WATERMARK FOR dateTime AS dateTime - INTERVAL '4'
/// SECOND`): timestamps by [`event_time`], watermarks trailing the largest timestamp a
/// source subtask has emitted by [`reference::OUT_OF_ORDERNESS`] (4 s), every 200 ms (the
/// default interval). No idleness: every subtask of the source emits until its share ends.
///
/// ```
/// use weir_nexmark::{watermarks, GeneratorConfig};
///
/// let env = weir::Env::new();
/// let config = GeneratorConfig::new(1_000);
/// let bids = env
///     .add_source_with_watermarks("nexmark", config.factory(), watermarks())
///     .filter(|e: &weir_nexmark::Event| matches!(e, weir_nexmark::Event::Bid(_)))
///     .collect();
/// env.execute("watermarks-doc").unwrap();
/// assert_eq!(bids.take().len(), 920);
/// assert_eq!(watermarks().out_of_orderness(), std::time::Duration::from_secs(4));
/// ```
pub fn watermarks() -> weir::time::WatermarkStrategy<Event> {
    weir::time::WatermarkStrategy::for_bounded_out_of_orderness(reference::OUT_OF_ORDERNESS)
        .with_timestamp_assigner(event_time)
}
