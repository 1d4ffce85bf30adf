//! Query 6, average selling price by seller: each auction's winning bid when it closes, and
//! per seller the average of their last 10.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline, Q6_LAST};
use crate::rows::{big, ms, SellerAverage};
use crate::Event;
use weir::stream::DataStream;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};
use weir::{Collector, KeyedProcessFunction};

/// Query 6, average selling price by seller: as each auction closes (the watermark reaches
/// its `expires`) with a winning bid (its highest in `[date_time, expires]`), the average
/// winning price of the seller's last 10 closed auctions, in closing order `(expires, id)`.
/// The semantics are [`reference::q6`]'s (Flink cannot run the suite's SQL).
///
/// Without event-time timers in keyed functions, the close is an event-time window:
/// - `q6-join`, keyed by auction id: the auction once it came (a repeated id is ignored) and
///   the bids that came before it. When it comes it goes on with the highest of those bids
///   in its interval; each later bid in its interval goes on too. Both carry the seller and,
///   as their event time, the auction's `expires`.
/// - `q6-close`, keyed by seller: tumbling windows of 1 ms, so `[expires, expires + 1)`
///   holds what a seller's auctions closing then got, and fires when the watermark reaches
///   `expires`, the close. A record for a closed auction is late there (dropped, counted):
///   an auction that comes closed, or a bid after its auction and its close. It emits the
///   closed auctions with a winner, by id.
/// - `q6-average`, keyed by seller: the last 10 winning prices; the windows of a seller fire
///   in order of their end, one subtask for each key, so they come in closing order.
///
/// ```
/// use weir_nexmark::queries::{Query, Q6};
/// assert_eq!(Q6.operator_uids(), ["q6-join", "q6-close", "q6-average", "q6-split"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q6;

/// Keyed by auction id.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Q6In {
    Auction {
        seller: u64,
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
struct Auction {
    /// (seller, date_time, expires), once it came.
    auction: Option<(u64, i64, i64)>,
    /// (price, date_time) of the bids that came before it.
    held: Vec<(u64, i64)>,
}

/// What an auction's close is made of: the auction itself (with the best of the bids held
/// for it), or a later bid in its interval.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct ForClose {
    seller: u64,
    auction: u64,
    /// Event time: when the auction closes.
    expires: i64,
    /// The auction itself (not a bid).
    is_auction: bool,
    price: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Join;

impl KeyedProcessFunction<u64, (u64, Q6In), ForClose> for Join {
    type State = Auction;
    fn process(
        &mut self,
        auction: &u64,
        a: &mut Auction,
        (_, x): (u64, Q6In),
        out: &mut Collector<ForClose>,
    ) {
        match x {
            Q6In::Auction {
                seller,
                date_time,
                expires,
            } => {
                if a.auction.is_some() {
                    return; // a repeated id: the first auction counts
                }
                a.auction = Some((seller, date_time, expires));
                let price = super::best_held_bid(&mut a.held, date_time, expires);
                out.collect(ForClose {
                    seller,
                    auction: *auction,
                    expires,
                    is_auction: true,
                    price,
                });
            }
            Q6In::Bid { price, date_time } => match a.auction {
                None => a.held.push((price, date_time)),
                Some((seller, from, expires)) => {
                    if from <= date_time && date_time <= expires {
                        out.collect(ForClose {
                            seller,
                            auction: *auction,
                            expires,
                            is_auction: false,
                            price: Some(price),
                        });
                    }
                }
            },
        }
    }
}

/// The auctions of a seller closing at one time: per id, whether the auction came, and its
/// highest price.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Closing {
    auctions: BTreeMap<u64, (bool, Option<u64>)>,
}

impl Closing {
    fn offer(&mut self, auction: u64, is_auction: bool, price: Option<u64>) {
        let (came, best) = self.auctions.entry(auction).or_insert((false, None));
        *came |= is_auction;
        *best = (*best).max(price);
    }
}

#[derive(Debug, Clone, Copy)]
struct Close;

impl AggregateFunction<ForClose, Vec<(u64, u64)>> for Close {
    type Acc = Closing;
    fn add(&self, c: &mut Closing, x: ForClose) {
        c.offer(x.auction, x.is_auction, x.price);
    }
    fn merge(&self, c: &mut Closing, other: &Closing) {
        for (&auction, &(came, price)) in &other.auctions {
            c.offer(auction, came, price);
        }
    }
    /// (auction, winning price) of the auctions with a winner, by id.
    fn result(&self, c: &Closing) -> Vec<(u64, u64)> {
        c.auctions
            .iter()
            .filter_map(|(&auction, &(came, price))| Some((auction, price.filter(|_| came)?)))
            .collect()
    }
}

/// A seller's auctions that closed at one time, with their winning prices, by id.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Closed {
    seller: u64,
    winners: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct LastTen;

impl KeyedProcessFunction<u64, Closed, SellerAverage> for LastTen {
    type State = VecDeque<u64>;
    fn process(
        &mut self,
        seller: &u64,
        last: &mut VecDeque<u64>,
        closed: Closed,
        out: &mut Collector<SellerAverage>,
    ) {
        for (auction, price) in closed.winners {
            if last.len() == Q6_LAST {
                last.pop_front();
            }
            last.push_back(price);
            let sum: u128 = last.iter().map(|&p| u128::from(p)).sum();
            out.collect(SellerAverage {
                seller: *seller,
                auction,
                average: u64::try_from(sum / last.len() as u128).unwrap_or(u64::MAX),
            });
        }
    }
}

impl Query for Q6 {
    type Out = SellerAverage;
    fn name(&self) -> &'static str {
        "q6"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<SellerAverage> {
        events
            .flat_map(|e: Event| match e {
                Event::Auction(a) => Some((
                    big(a.id),
                    Q6In::Auction {
                        seller: big(a.seller),
                        date_time: ms(a.date_time),
                        expires: ms(a.expires),
                    },
                )),
                Event::Bid(b) => Some((
                    big(b.auction),
                    Q6In::Bid {
                        price: big(b.price),
                        date_time: ms(b.date_time),
                    },
                )),
                Event::Person(_) => None,
            })
            .uid("q6-split")
            .key_by(|r: &(u64, Q6In)| r.0)
            .process_with(Join)
            .uid("q6-join")
            .with_timestamps(|c: &ForClose| c.expires)
            .key_by(|c: &ForClose| c.seller)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(1)))
            .aggregate_window(Close, |seller: &u64, _: &Fired, winners| Closed {
                seller: *seller,
                winners,
            })
            .uid("q6-close")
            .filter(|c: &Closed| !c.winners.is_empty())
            .key_by(|c: &Closed| c.seller)
            .process_with(LastTen)
            .uid("q6-average")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q6-join", "q6-close", "q6-average", "q6-split"]
    }
    fn reference(&self, input: &Timeline) -> Answer<SellerAverage> {
        reference::q6(input)
    }
}
