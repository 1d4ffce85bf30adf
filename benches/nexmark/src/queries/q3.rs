//! Query 3, local item suggestion: an incremental join of persons and auctions on the seller.

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline};
use crate::rows::{big, LocalItem};
use crate::Event;
use weir::stream::DataStream;
use weir::{Collector, KeyedProcessFunction};

/// Query 3, local item suggestion: every (person, auction) with `auction.seller ==
/// person.id`, the person in OR, ID or CA and the auction in category 10, as
/// `(name, city, state, auction)`.
///
/// A regular inner join, incremental: `q3-filter` keeps the two sides' fields (chained to the
/// source), `q3-join` is keyed by the person's id (the auction's seller) and keeps, per key,
/// the persons and the auctions seen so far; each new one is joined with the other side's
/// at once. Any arrival order, nothing late. Its state is keyed (by key group), so
/// checkpoints and rescale carry it.
///
/// ```
/// use weir_nexmark::queries::{Query, Q3};
/// assert_eq!(Q3.operator_uids(), ["q3-join", "q3-filter"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q3;

/// One side of the join, keyed by the person's id.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Side {
    Person {
        name: String,
        city: String,
        state: String,
    },
    /// An auction's id.
    Auction(u64),
}

/// A seller's persons and auctions so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Seen {
    persons: Vec<(String, String, String)>,
    auctions: Vec<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Join;

impl KeyedProcessFunction<u64, (u64, Side), LocalItem> for Join {
    type State = Seen;
    fn process(
        &mut self,
        _seller: &u64,
        seen: &mut Seen,
        (_, side): (u64, Side),
        out: &mut Collector<LocalItem>,
    ) {
        match side {
            Side::Person { name, city, state } => {
                for &auction in &seen.auctions {
                    out.collect(LocalItem {
                        name: name.clone(),
                        city: city.clone(),
                        state: state.clone(),
                        auction,
                    });
                }
                seen.persons.push((name, city, state));
            }
            Side::Auction(auction) => {
                for (name, city, state) in &seen.persons {
                    out.collect(LocalItem {
                        name: name.clone(),
                        city: city.clone(),
                        state: state.clone(),
                        auction,
                    });
                }
                seen.auctions.push(auction);
            }
        }
    }
}

impl Query for Q3 {
    type Out = LocalItem;
    fn name(&self) -> &'static str {
        "q3"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<LocalItem> {
        events
            .flat_map(|e: Event| match e {
                Event::Person(p) if matches!(p.state.as_str(), "OR" | "ID" | "CA") => Some((
                    big(p.id),
                    Side::Person {
                        name: p.name,
                        city: p.city,
                        state: p.state,
                    },
                )),
                Event::Auction(a) if a.category == 10 => {
                    Some((big(a.seller), Side::Auction(big(a.id))))
                }
                _ => None,
            })
            .uid("q3-filter")
            .key_by(|r: &(u64, Side)| r.0)
            .process_with(Join)
            .uid("q3-join")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q3-join", "q3-filter"]
    }
    fn reference(&self, input: &Timeline) -> Answer<LocalItem> {
        reference::q3(input)
    }
}
