//! Query 11, user sessions: the bids of each bidder's sessions (10 s gap).

use std::time::Duration;

use super::Query;
use crate::reference::{self, Answer, Timeline, SESSION_GAP_MS};
use crate::rows::{big, ms, BidderSession};
use crate::{Event, Window};
use weir::stream::DataStream;
use weir::window::{AggregateFunction, EventTimeSessionWindows, Fired};

/// Query 11, user sessions: per bidder, the number of bids in each session of their bids,
/// sessions ending 10 s after their last bid, as `(bidder, count, window)`.
///
/// `q11-sessions`, keyed by bidder: event-time session windows counting bids.
///
/// Sessions that touch merge (`[a, b)` and `[b, c)`: two bids exactly 10 s apart are one
/// session), as in Flink. The result's window is `[first bid, last bid + 10 s)`.
///
/// ```
/// use weir_nexmark::queries::{Query, Q11};
/// assert_eq!(Q11.operator_uids(), ["q11-sessions", "q11-bids"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q11;

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

impl Query for Q11 {
    type Out = BidderSession;
    fn name(&self) -> &'static str {
        "q11"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<BidderSession> {
        let gap = Duration::from_millis(SESSION_GAP_MS as u64);
        events
            .flat_map(|e: Event| match e {
                Event::Bid(b) => Some((big(b.bidder), ms(b.date_time))),
                _ => None,
            })
            .uid("q11-bids")
            .with_timestamps(|b: &(u64, i64)| b.1)
            .key_by(|b: &(u64, i64)| b.0)
            .window(EventTimeSessionWindows::with_gap(gap))
            .aggregate_window(CountBids, |bidder: &u64, f: &Fired, bid_count| {
                BidderSession {
                    bidder: *bidder,
                    window: Window {
                        start: f.window.start,
                        end: f.window.end,
                    },
                    bid_count,
                }
            })
            .uid("q11-sessions")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q11-sessions", "q11-bids"]
    }
    fn reference(&self, input: &Timeline) -> Answer<BidderSession> {
        reference::q11(input)
    }
}
