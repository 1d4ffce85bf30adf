//! Query 5, hot items: bids per auction per sliding window, and per window the auctions at
//! the maximum.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline};
use crate::rows::{big, ms, HotItem};
use crate::{Event, Window};
use weir::stream::DataStream;
use weir::window::{AggregateFunction, Fired, SlidingEventTimeWindows, TumblingEventTimeWindows};

/// Query 5, hot items: per sliding window (`size_ms` every `slide_ms`; the suite's 10 s
/// every 2 s by default), the auctions with the most bids in it, ties all in.
///
/// Two keyed window operators, as Flink's plan (a `HOP` count, then its `MAX` per window
/// joined back):
/// - `q5-count`, keyed by auction: sliding event-time windows counting its bids (kept as
///   panes of `gcd(size, slide)`, each bid added once). Each window's count goes on with
///   the window's max timestamp as its event time.
/// - `q5-local-max`, chained after it on each subtask (no shuffle): per window, the highest
///   count of the subtask's auctions and the auctions at it (ties all in), sent on when the
///   watermark completes the window (or before a checkpoint barrier: it keeps no state), as
///   Flink's local-global aggregation. A 60 s window sliding by 1 s gives each auction 60
///   counts; only each window's local maximum crosses the shuffle.
/// - `q5-max`, keyed by window: a tumbling window of one slide that holds exactly the
///   partial maxima of that window (they all have its max timestamp), firing on the same
///   watermark; it keeps the highest count and the auctions at it.
///
/// A bid counts in its windows not yet fired when it comes; one whose windows have all
/// fired is late (dropped, counted by `q5-count`).
///
/// ```
/// use weir_nexmark::queries::{Query, Q5};
/// let q = Q5 { size_ms: 60_000, slide_ms: 1_000 };
/// assert_eq!(q.operator_uids(), ["q5-count", "q5-local-max", "q5-max", "q5-bids"]);
/// assert_eq!(Q5::default().size_ms, 10_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Q5 {
    /// The windows' size, ms.
    pub size_ms: i64,
    /// The slide, ms (at least 1, at most the size).
    pub slide_ms: i64,
}

impl Default for Q5 {
    fn default() -> Self {
        Q5 {
            size_ms: reference::Q5_SIZE_MS,
            slide_ms: reference::Q5_SLIDE_MS,
        }
    }
}

/// An auction's bids in one window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct AuctionCount {
    window: Window,
    auction: u64,
    num: u64,
}

/// Counts.
#[derive(Debug, Clone, Copy)]
struct CountBids;

impl AggregateFunction<(u64, i64), u64> for CountBids {
    type Acc = u64;
    #[inline]
    fn add(&self, n: &mut u64, _bid: (u64, i64)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

/// The highest count of a window and the auctions at it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Top {
    max: u64,
    auctions: Vec<u64>,
}

impl Top {
    fn offer(&mut self, num: u64, auctions: &[u64]) {
        if num > self.max {
            self.max = num;
            self.auctions.clear();
        }
        if num == self.max {
            self.auctions.extend_from_slice(auctions);
        }
    }
}

/// The local step: a subtask's highest count per window and its auctions at it.
#[derive(Debug, Clone, Copy)]
struct LocalMax;

impl AggregateFunction<AuctionCount, Top> for LocalMax {
    type Acc = Top;
    #[inline]
    fn add(&self, top: &mut Top, c: AuctionCount) {
        top.offer(c.num, &[c.auction]);
    }
    fn merge(&self, top: &mut Top, other: &Top) {
        top.offer(other.max, &other.auctions);
    }
    fn result(&self, top: &Top) -> Top {
        top.clone()
    }
}

/// The global step: merges the subtasks' partial maxima of a window.
#[derive(Debug, Clone, Copy)]
struct MaxCount;

impl AggregateFunction<(Window, Top), Top> for MaxCount {
    type Acc = Top;
    fn add(&self, top: &mut Top, (_, partial): (Window, Top)) {
        if top.auctions.is_empty() {
            *top = partial;
        } else {
            top.offer(partial.max, &partial.auctions);
        }
    }
    fn merge(&self, top: &mut Top, other: &Top) {
        top.offer(other.max, &other.auctions);
    }
    fn result(&self, top: &Top) -> Top {
        top.clone()
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl Query for Q5 {
    type Out = HotItem;
    fn name(&self) -> &'static str {
        "q5"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<HotItem> {
        let (size, slide) = (self.size_ms, self.slide_ms);
        // The counts of window [s, s + size) have event time s + size - 1: the tumbling
        // windows of one slide, shifted to end where the sliding ones end, hold one each.
        let offset = if slide > 0 { size.rem_euclid(slide) } else { 0 };
        events
            .flat_map(|e: Event| match e {
                Event::Bid(b) => Some((big(b.auction), ms(b.date_time))),
                _ => None,
            })
            .uid("q5-bids")
            .with_timestamps(|b: &(u64, i64)| b.1)
            .key_by(|b: &(u64, i64)| b.0)
            .window(SlidingEventTimeWindows::of(millis(size), millis(slide)))
            .aggregate_window(CountBids, |auction: &u64, f: &Fired, num| AuctionCount {
                window: Window {
                    start: f.window.start,
                    end: f.window.end,
                },
                auction: *auction,
                num,
            })
            .uid("q5-count")
            .local_aggregate(
                |c: &AuctionCount| c.window,
                |w: &Window| w.max_timestamp(),
                LocalMax,
            )
            .uid("q5-local-max")
            .with_timestamps(|p: &(Window, Top)| p.0.max_timestamp())
            .key_by(|p: &(Window, Top)| p.0)
            .window(TumblingEventTimeWindows::of(millis(slide)).with_offset(millis(offset)))
            .aggregate_window(MaxCount, |window: &Window, _: &Fired, top: Top| {
                top.auctions
                    .iter()
                    .map(|&auction| HotItem {
                        window: *window,
                        auction,
                        num: top.max,
                    })
                    .collect::<Vec<_>>()
            })
            .uid("q5-max")
            .flat_map(|rows: Vec<HotItem>| rows)
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q5-count", "q5-local-max", "q5-max", "q5-bids"]
    }
    fn reference(&self, input: &Timeline) -> Answer<HotItem> {
        reference::q5_with(input, self.size_ms, self.slide_ms)
    }
}
