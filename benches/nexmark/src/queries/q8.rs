//! Query 8, monitor new users: persons who joined and opened an auction in the same 10 s
//! tumbling window.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Query;
use crate::reference::{self, Answer, Timeline, TUMBLE_MS};
use crate::rows::{big, ms, NewUser};
use crate::{Event, Window};
use weir::stream::DataStream;
use weir::window::{AggregateFunction, Fired, TumblingEventTimeWindows};

/// Query 8, monitor new users: per 10 s tumbling window, the persons who joined in it and
/// opened an auction in it, as `(id, name, window)`.
///
/// The suite's two windowed `GROUP BY`s and their join on `(id, window)` are one window
/// operator here: `q8-window`, keyed by the person's id (the auction's seller), whose
/// windows hold the names of the persons of that id and whether an auction of theirs came;
/// a window with both emits its persons. A person or auction of a fired window is late
/// (dropped, counted).
///
/// ```
/// use weir_nexmark::queries::{Query, Q8};
/// assert_eq!(Q8.operator_uids(), ["q8-window", "q8-split"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q8;

/// A person (their name) or an auction, by the person's id, at an event time.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Side {
    id: u64,
    time: i64,
    /// `Some(name)` for a person, `None` for an auction.
    person: Option<String>,
}

/// One id's persons and whether it opened an auction, in one window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Joined {
    names: BTreeSet<String>,
    seller: bool,
}

#[derive(Debug, Clone, Copy)]
struct Join;

impl AggregateFunction<Side, Joined> for Join {
    type Acc = Joined;
    fn add(&self, j: &mut Joined, s: Side) {
        match s.person {
            Some(name) => {
                j.names.insert(name);
            }
            None => j.seller = true,
        }
    }
    fn merge(&self, j: &mut Joined, other: &Joined) {
        j.names.extend(other.names.iter().cloned());
        j.seller |= other.seller;
    }
    fn result(&self, j: &Joined) -> Joined {
        j.clone()
    }
}

impl Query for Q8 {
    type Out = NewUser;
    fn name(&self) -> &'static str {
        "q8"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<NewUser> {
        events
            .flat_map(|e: Event| match e {
                Event::Person(p) => Some(Side {
                    id: big(p.id),
                    time: ms(p.date_time),
                    person: Some(p.name),
                }),
                Event::Auction(a) => Some(Side {
                    id: big(a.seller),
                    time: ms(a.date_time),
                    person: None,
                }),
                Event::Bid(_) => None,
            })
            .uid("q8-split")
            .with_timestamps(|s: &Side| s.time)
            .key_by(|s: &Side| s.id)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(
                TUMBLE_MS as u64,
            )))
            .aggregate_window(Join, |id: &u64, f: &Fired, j: Joined| {
                if !j.seller {
                    return Vec::new();
                }
                let window = Window {
                    start: f.window.start,
                    end: f.window.end,
                };
                j.names
                    .into_iter()
                    .map(|name| NewUser {
                        window,
                        id: *id,
                        name,
                    })
                    .collect::<Vec<_>>()
            })
            .uid("q8-window")
            .flat_map(|rows: Vec<NewUser>| rows)
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q8-window", "q8-split"]
    }
    fn reference(&self, input: &Timeline) -> Answer<NewUser> {
        reference::q8(input)
    }
}
