//! Query 7, highest bid: per 10 s tumbling window, the bids at its highest price.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline, TUMBLE_MS};
use crate::rows::{big, ms, HighestBid};
use crate::{Event, Window};
use weir::stream::DataStream;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};

/// Query 7, highest bid: per 10 s tumbling window, its highest price, and every bid at that
/// price with `window_end - 10 s <= dateTime <= window_end` (the suite's join is `BETWEEN`:
/// a bid at exactly `window_end`, in the next window, matches too).
///
/// In two phases, so that no one subtask sees every bid:
/// - `q7-bids` gives each bid its window, and a bid at the very start of a window a second
///   record for the window before (an "edge" record: it may join that window's maximum but
///   takes no part in it), with the event time `window_end - 1`.
/// - `q7-local`, keyed by `auction % 256`: per key and window the highest price of the
///   window's own bids, the bids at it, and the edge records that may still match.
/// - `q7-global`, keyed by window: the same over the partial results of every key, which
///   come with the window's max timestamp as their event time, then the rows.
///
/// A bid of a fired window is late in `q7-local` (dropped, counted). (The suite's join
/// side would still match a late bid at the window's maximum; here a late bid is dropped
/// from both, and a late edge record is counted too. With the suite's in-order generator
/// and its watermarks nothing is late.)
///
/// ```
/// use weir_nexmark::queries::{Query, Q7};
/// assert_eq!(Q7.operator_uids(), ["q7-local", "q7-global", "q7-bids"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q7;

/// How many keys the first phase spreads the bids over.
const LOCAL_KEYS: u64 = 256;

/// A bid as a candidate of `row.window`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Candidate {
    /// In the next window (at its start): it may match, but is not part of the maximum.
    edge: bool,
    row: HighestBid,
}

/// The highest price of a window's own bids so far, the bids at it, and the edge bids that
/// may still match it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Highest {
    max: Option<u64>,
    at_max: Vec<HighestBid>,
    edge: Vec<HighestBid>,
}

impl Highest {
    fn own(&mut self, rows: &[HighestBid], price: u64) {
        match self.max {
            Some(m) if price < m => return,
            Some(m) if price == m => {}
            _ => {
                self.max = Some(price);
                self.at_max.clear();
                self.edge.retain(|r| r.price >= price);
            }
        }
        self.at_max.extend_from_slice(rows);
    }
    fn edge(&mut self, rows: &[HighestBid]) {
        let min = self.max.unwrap_or(0);
        self.edge
            .extend(rows.iter().filter(|r| r.price >= min).cloned());
    }
    fn rows(&self) -> Vec<HighestBid> {
        let Some(m) = self.max else {
            return Vec::new();
        };
        let mut rows = self.at_max.clone();
        rows.extend(self.edge.iter().filter(|r| r.price == m).cloned());
        rows
    }
}

#[derive(Debug, Clone, Copy)]
struct Local;

impl AggregateFunction<Candidate, Highest> for Local {
    type Acc = Highest;
    #[inline]
    fn add(&self, h: &mut Highest, c: Candidate) {
        let price = c.row.price;
        if c.edge {
            h.edge(std::slice::from_ref(&c.row));
        } else {
            h.own(std::slice::from_ref(&c.row), price);
        }
    }
    fn merge(&self, h: &mut Highest, other: &Highest) {
        if let Some(m) = other.max {
            h.own(&other.at_max, m);
        }
        h.edge(&other.edge);
    }
    fn result(&self, h: &Highest) -> Highest {
        h.clone()
    }
}

/// One key's partial result of a window.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Partial {
    window: Window,
    highest: Highest,
}

#[derive(Debug, Clone, Copy)]
struct Global;

impl AggregateFunction<Partial, Highest> for Global {
    type Acc = Highest;
    fn add(&self, h: &mut Highest, p: Partial) {
        Local.merge(h, &p.highest);
    }
    fn merge(&self, h: &mut Highest, other: &Highest) {
        Local.merge(h, other);
    }
    fn result(&self, h: &Highest) -> Highest {
        h.clone()
    }
}

fn candidates(e: Event) -> Vec<Candidate> {
    let Event::Bid(b) = e else {
        return Vec::new();
    };
    let t = ms(b.date_time);
    let start = t - t.rem_euclid(TUMBLE_MS);
    let row = HighestBid {
        window: Window {
            start,
            end: start + TUMBLE_MS,
        },
        auction: big(b.auction),
        price: big(b.price),
        bidder: big(b.bidder),
        date_time: t,
        extra: b.extra,
    };
    if start == t {
        let mut before = row.clone();
        before.window = Window {
            start: start - TUMBLE_MS,
            end: start,
        };
        vec![
            Candidate { edge: false, row },
            Candidate {
                edge: true,
                row: before,
            },
        ]
    } else {
        vec![Candidate { edge: false, row }]
    }
}

impl Query for Q7 {
    type Out = HighestBid;
    fn name(&self) -> &'static str {
        "q7"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<HighestBid> {
        let size = Duration::from_millis(TUMBLE_MS as u64);
        events
            .flat_map(candidates)
            .uid("q7-bids")
            .with_timestamps(|c: &Candidate| c.row.date_time.min(c.row.window.max_timestamp()))
            .key_by(|c: &Candidate| c.row.auction % LOCAL_KEYS)
            .window(TumblingEventTimeWindows::of(size))
            .aggregate_window(Local, |_: &u64, f: &Fired, highest| Partial {
                window: Window {
                    start: f.window.start,
                    end: f.window.end,
                },
                highest,
            })
            .uid("q7-local")
            .with_timestamps(|p: &Partial| p.window.max_timestamp())
            .key_by(|p: &Partial| p.window)
            .window(TumblingEventTimeWindows::of(size))
            .aggregate_window(Global, |_: &Window, _: &Fired, h: Highest| h.rows())
            .uid("q7-global")
            .flat_map(|rows: Vec<HighestBid>| rows)
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q7-local", "q7-global", "q7-bids"]
    }
    fn reference(&self, input: &Timeline) -> Answer<HighestBid> {
        reference::q7(input)
    }
}
