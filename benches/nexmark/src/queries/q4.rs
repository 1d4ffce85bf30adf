//! Query 4, average price for a category: a join of auctions and bids within each auction's
//! interval, the winning price per auction, and its average per category.

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline};
use crate::rows::{big, ms, CategoryAverage};
use crate::Event;
use weir::state::KeyedState;
use weir::stream::DataStream;
use weir::{Collector, KeyedProcessFunction};

/// Query 4, average price for a category: per category, the average (rounded down) of its
/// auctions' winning prices, an auction's winning price being its highest bid with
/// `auction.date_time <= bid.date_time <= auction.expires`.
///
/// The suite's SQL is a regular join and two unbounded aggregations; so is this:
/// - `q4-winning`, keyed by auction id: the auction once it came (a repeated id is
///   ignored), the bids that came before it (held until it does), and its highest bid in
///   its interval so far. Each time that highest price rises it emits the change
///   (category, old price if any, new price): an update stream, as Flink's join and `MAX`
///   emit retractions.
/// - `q4-average`, keyed by category: the sum and count of its auctions' current winning
///   prices, kept up to date by the changes. Its result is the final state, emitted when the
///   input ends (what the reference gives; Flink's blackhole would also receive each
///   intermediate average).
///
/// ```
/// use weir_nexmark::queries::{Query, Q4};
/// assert_eq!(Q4.operator_uids(), ["q4-winning", "q4-average", "q4-split"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q4;

/// Keyed by auction id.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Q4In {
    Auction {
        category: u64,
        date_time: i64,
        expires: i64,
    },
    Bid {
        price: u64,
        date_time: i64,
    },
}

/// One auction's side of the join.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Winning {
    /// (category, date_time, expires), once the auction came.
    auction: Option<(u64, i64, i64)>,
    /// (price, date_time) of the bids that came before it.
    held: Vec<(u64, i64)>,
    /// The highest price in its interval so far.
    max: Option<u64>,
}

/// A winning price changed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Change {
    category: u64,
    old: Option<u64>,
    new: u64,
}

#[derive(Debug, Clone, Copy)]
struct WinningPrice;

impl KeyedProcessFunction<u64, (u64, Q4In), Change> for WinningPrice {
    type State = Winning;
    fn process(
        &mut self,
        _auction: &u64,
        w: &mut Winning,
        (_, x): (u64, Q4In),
        out: &mut Collector<Change>,
    ) {
        match x {
            Q4In::Auction {
                category,
                date_time,
                expires,
            } => {
                if w.auction.is_some() {
                    return; // a repeated id: the first auction counts
                }
                w.auction = Some((category, date_time, expires));
                let top = super::best_held_bid(&mut w.held, date_time, expires);
                if let Some(new) = top {
                    w.max = Some(new);
                    out.collect(Change {
                        category,
                        old: None,
                        new,
                    });
                }
            }
            Q4In::Bid { price, date_time } => match w.auction {
                None => w.held.push((price, date_time)),
                Some((category, from, to)) => {
                    if from <= date_time && date_time <= to && w.max.is_none_or(|m| price > m) {
                        out.collect(Change {
                            category,
                            old: w.max,
                            new: price,
                        });
                        w.max = Some(price);
                    }
                }
            },
        }
    }
}

/// A category's winning prices: their sum and count.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Sum {
    sum: u128,
    count: u64,
}

#[derive(Debug, Clone, Copy)]
struct Average;

impl KeyedProcessFunction<u64, Change, CategoryAverage> for Average {
    type State = Sum;
    fn process(&mut self, _c: &u64, s: &mut Sum, x: Change, _out: &mut Collector<CategoryAverage>) {
        match x.old {
            None => s.count += 1,
            Some(old) => s.sum -= u128::from(old),
        }
        s.sum += u128::from(x.new);
    }
    fn end_of_input(
        &mut self,
        state: &mut KeyedState<u64, Sum>,
        out: &mut Collector<CategoryAverage>,
    ) {
        for (&category, s) in state.iter() {
            if s.count > 0 {
                out.collect(CategoryAverage {
                    category,
                    average: u64::try_from(s.sum / u128::from(s.count)).unwrap_or(u64::MAX),
                });
            }
        }
    }
}

impl Query for Q4 {
    type Out = CategoryAverage;
    fn name(&self) -> &'static str {
        "q4"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<CategoryAverage> {
        events
            .flat_map(|e: Event| match e {
                Event::Auction(a) => Some((
                    big(a.id),
                    Q4In::Auction {
                        category: big(a.category),
                        date_time: ms(a.date_time),
                        expires: ms(a.expires),
                    },
                )),
                Event::Bid(b) => Some((
                    big(b.auction),
                    Q4In::Bid {
                        price: big(b.price),
                        date_time: ms(b.date_time),
                    },
                )),
                Event::Person(_) => None,
            })
            .uid("q4-split")
            .key_by(|r: &(u64, Q4In)| r.0)
            .process_with(WinningPrice)
            .uid("q4-winning")
            .key_by(|c: &Change| c.category)
            .process_with(Average)
            .uid("q4-average")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q4-winning", "q4-average", "q4-split"]
    }
    fn reference(&self, input: &Timeline) -> Answer<CategoryAverage> {
        reference::q4(input)
    }
}
