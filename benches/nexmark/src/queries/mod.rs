//! The Nexmark queries on Weir, and the table of the suite's queries that the `nexmark`
//! harness and the tests go through.
//!
//! A [`Query`] builds its part of a job on a stream of [`Event`]s and names its
//! [reference](super::reference); [`visit`] finds one by name and hands it, typed, to a
//! [`QueryVisitor`] (the harness's runner, a test's check), so a query added here is run and
//! checked by both with no other change. [`QUERIES`] lists the suite's queries, implemented
//! or not.
//!
//! ```
//! use weir_nexmark::queries::{self, Query, QueryVisitor};
//! use weir_nexmark::{reference::Timeline, GeneratorConfig};
//!
//! /// Runs a query on 2,000 events and checks it against its reference.
//! struct Check;
//! impl QueryVisitor for Check {
//!     type Output = usize;
//!     fn visit<Q: Query>(self, query: Q) -> usize {
//!         let config = GeneratorConfig::new(2_000);
//!         let env = weir::Env::new();
//!         let out = query.build(queries::source(&env, &config)).collect();
//!         env.execute(query.name()).unwrap();
//!         let mut got = out.take();
//!         got.sort();
//!         assert_eq!(got, query.reference(&Timeline::new(config.events())).results);
//!         got.len()
//!     }
//! }
//! assert!(queries::visit("q2", Check).unwrap() > 0);
//! assert!(queries::visit("q9", Check).is_err());
//! ```

mod q11;
mod q3;
mod q4;
mod q5;
mod q6;
mod q7;
mod q8;

use std::hash::Hash;

pub use q11::Q11;
pub use q3::Q3;
pub use q4::Q4;
pub use q5::Q5;
pub use q6::Q6;
pub use q7::Q7;
pub use q8::Q8;

use super::error::NexmarkError;
use super::reference::{self, Answer, Timeline};
use super::rows::{big, AuctionPrice, BidRow, EuroBid};
use super::{Event, GeneratorConfig};
use weir::stream::DataStream;
use weir::Data;
use weir::JobResult;

/// The uid of the Nexmark source that [`source`] adds.
pub const SOURCE_UID: &str = "source";

/// The Nexmark source of `config` in `env` (uid [`SOURCE_UID`]), at the job's default
/// parallelism, with the suite's watermarks ([`watermarks`](super::watermarks): each
/// subtask emits its largest timestamp so far − 4 s).
///
/// ```
/// let env = weir::Env::new();
/// let config = weir_nexmark::GeneratorConfig::new(100);
/// let all = weir_nexmark::queries::source(&env, &config).collect();
/// env.execute("source-doc").unwrap();
/// assert_eq!(all.take().len(), 100);
/// ```
pub fn source(env: &weir::Env, config: &GeneratorConfig) -> DataStream<Event> {
    env.add_source_with_watermarks("nexmark", config.factory(), super::watermarks())
        .uid(SOURCE_UID)
}

/// One Nexmark query: its operators on Weir, and its reference.
pub trait Query: Send + Sync + 'static {
    /// A result row.
    type Out: Data + Ord + Hash + std::fmt::Debug;

    /// The suite's name: `q0`, `q1`, ...
    fn name(&self) -> &'static str;

    /// The query's operators on `events` (at the job's default parallelism), up to the
    /// stream its sink takes.
    fn build(&self, events: DataStream<Event>) -> DataStream<Self::Out>;

    /// The uids of the query's own operators, its main stateful one first (where a test
    /// injects faults).
    fn operator_uids(&self) -> &'static [&'static str];

    /// What the query must give on `input`: [`reference`](super::reference).
    fn reference(&self, input: &Timeline) -> Answer<Self::Out>;

    /// Records the query's operators dropped as late in the job that `result` reports (0 for
    /// a query without event-time operators): the sum over its [`operator_uids`](Self::operator_uids).
    fn late_dropped(&self, result: &JobResult) -> u64 {
        self.operator_uids()
            .iter()
            .filter_map(|uid| result.operator(uid))
            .map(|o| o.late_records_dropped)
            .sum()
    }
}

/// Something done with a query whose type is known only by its name (see [`visit`]).
pub trait QueryVisitor {
    /// What the visit gives.
    type Output;
    /// Does it with `query`.
    fn visit<Q: Query>(self, query: Q) -> Self::Output;
}

/// One of the suite's queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryInfo {
    /// `q0`, `q1`, ...
    pub name: &'static str,
    /// What it computes.
    pub what: &'static str,
    /// Whether Weir runs it yet.
    pub implemented: bool,
}

/// The suite's queries (the Flink set and q6), in order.
pub const QUERIES: &[QueryInfo] = &[
    QueryInfo {
        name: "q0",
        what: "pass-through",
        implemented: true,
    },
    QueryInfo {
        name: "q1",
        what: "currency conversion",
        implemented: true,
    },
    QueryInfo {
        name: "q2",
        what: "selection",
        implemented: true,
    },
    QueryInfo {
        name: "q3",
        what: "local item suggestion (join)",
        implemented: true,
    },
    QueryInfo {
        name: "q4",
        what: "average price for a category",
        implemented: true,
    },
    QueryInfo {
        name: "q5",
        what: "hot items (sliding window)",
        implemented: true,
    },
    QueryInfo {
        name: "q6",
        what: "average selling price by seller",
        implemented: true,
    },
    QueryInfo {
        name: "q7",
        what: "highest bid (tumbling window)",
        implemented: true,
    },
    QueryInfo {
        name: "q8",
        what: "monitor new users (window join)",
        implemented: true,
    },
    QueryInfo {
        name: "q11",
        what: "user sessions (session window)",
        implemented: true,
    },
];

fn names(f: impl Fn(&QueryInfo) -> bool) -> String {
    QUERIES
        .iter()
        .filter(|q| f(q))
        .map(|q| q.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `visitor` on the query named `name`.
///
/// ```
/// use weir_nexmark::queries::{visit, Query, QueryVisitor};
/// use weir_nexmark::NexmarkError;
/// struct Name;
/// impl QueryVisitor for Name {
///     type Output = &'static str;
///     fn visit<Q: Query>(self, q: Q) -> &'static str { q.name() }
/// }
/// assert_eq!(visit("q1", Name).unwrap(), "q1");
/// assert_eq!(visit("q11", Name).unwrap(), "q11");
/// assert!(matches!(visit("q99", Name), Err(NexmarkError::UnknownQuery { .. })));
/// ```
pub fn visit<V: QueryVisitor>(name: &str, visitor: V) -> Result<V::Output, NexmarkError> {
    visit_with(name, &QueryOptions::default(), visitor)
}

/// The queries' settings that a run may change (the suite's by default).
///
/// ```
/// let o = weir_nexmark::queries::QueryOptions::default();
/// assert_eq!((o.q5_size_ms, o.q5_slide_ms), (10_000, 2_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOptions {
    /// q5's sliding window size, ms.
    pub q5_size_ms: i64,
    /// q5's slide, ms.
    pub q5_slide_ms: i64,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            q5_size_ms: reference::Q5_SIZE_MS,
            q5_slide_ms: reference::Q5_SLIDE_MS,
        }
    }
}

/// [`visit`] with `options` (q5's window).
///
/// ```
/// use weir_nexmark::queries::{visit_with, Query, QueryOptions, QueryVisitor};
/// struct Uids;
/// impl QueryVisitor for Uids {
///     type Output = &'static [&'static str];
///     fn visit<Q: Query>(self, q: Q) -> Self::Output { q.operator_uids() }
/// }
/// let options = QueryOptions { q5_size_ms: 60_000, q5_slide_ms: 1_000 };
/// assert_eq!(visit_with("q5", &options, Uids).unwrap()[0], "q5-count");
/// ```
pub fn visit_with<V: QueryVisitor>(
    name: &str,
    options: &QueryOptions,
    visitor: V,
) -> Result<V::Output, NexmarkError> {
    match name {
        "q0" => Ok(visitor.visit(Q0)),
        "q1" => Ok(visitor.visit(Q1)),
        "q2" => Ok(visitor.visit(Q2)),
        "q3" => Ok(visitor.visit(Q3)),
        "q4" => Ok(visitor.visit(Q4)),
        "q5" => Ok(visitor.visit(Q5 {
            size_ms: options.q5_size_ms,
            slide_ms: options.q5_slide_ms,
        })),
        "q6" => Ok(visitor.visit(Q6)),
        "q7" => Ok(visitor.visit(Q7)),
        "q8" => Ok(visitor.visit(Q8)),
        "q11" => Ok(visitor.visit(Q11)),
        other => Err(not_runnable(&[other])),
    }
}

/// The error for queries that cannot run: unknown names first, else the unimplemented.
fn not_runnable(names_asked: &[&str]) -> NexmarkError {
    let unknown: Vec<&str> = names_asked
        .iter()
        .copied()
        .filter(|n| !QUERIES.iter().any(|q| q.name == *n))
        .collect();
    if !unknown.is_empty() {
        return NexmarkError::UnknownQuery {
            name: unknown.join(", "),
            known: names(|_| true),
        };
    }
    NexmarkError::NotImplemented {
        name: names_asked.join(", "),
        implemented: names(|q| q.implemented),
    }
}

/// The queries a harness argument names: `all`, or names separated by commas. Every one must
/// be known and implemented; the error names all that are not.
///
/// ```
/// use weir_nexmark::queries::resolve;
/// assert_eq!(resolve("q0,q2").unwrap(), ["q0", "q2"]);
/// assert_eq!(resolve("all").unwrap().len(), 10);
/// let err = resolve("q0,q42,q77").unwrap_err().to_string();
/// assert!(err.contains("q42, q77"), "{err}");
/// ```
pub fn resolve(spec: &str) -> Result<Vec<&'static str>, NexmarkError> {
    let asked: Vec<&str> = if spec.trim() == "all" {
        QUERIES.iter().map(|q| q.name).collect()
    } else {
        spec.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    };
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for n in asked {
        match QUERIES.iter().find(|q| q.name == n) {
            Some(q) if q.implemented => found.push(q.name),
            _ => missing.push(n),
        }
    }
    if !missing.is_empty() {
        return Err(not_runnable(&missing));
    }
    if found.is_empty() {
        return Err(NexmarkError::UnknownQuery {
            name: spec.to_owned(),
            known: names(|_| true),
        });
    }
    Ok(found)
}

/// Query 0, pass-through: every bid as `(auction, bidder, price, dateTime, extra)`. One
/// operator, `q0`, chained to the source.
///
/// ```
/// use weir_nexmark::queries::{Query, Q0};
/// assert_eq!(Q0.name(), "q0");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q0;

impl Query for Q0 {
    type Out = BidRow;
    fn name(&self) -> &'static str {
        "q0"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<BidRow> {
        events
            .flat_map(|e: Event| match e {
                Event::Bid(b) => Some(BidRow::from(b)),
                _ => None,
            })
            .uid("q0")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q0"]
    }
    fn reference(&self, input: &Timeline) -> Answer<BidRow> {
        reference::q0(input)
    }
}

/// Query 1, currency conversion: every bid with its price in euros (× 0.908, exact). One
/// operator, `q1`.
///
/// ```
/// use weir_nexmark::queries::{Query, Q1};
/// assert_eq!(Q1.operator_uids(), ["q1"]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q1;

impl Query for Q1 {
    type Out = EuroBid;
    fn name(&self) -> &'static str {
        "q1"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<EuroBid> {
        events
            .flat_map(|e: Event| match e {
                Event::Bid(b) => Some(EuroBid::from(b)),
                _ => None,
            })
            .uid("q1")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q1"]
    }
    fn reference(&self, input: &Timeline) -> Answer<EuroBid> {
        reference::q1(input)
    }
}

/// Query 2, selection: `(auction, price)` of the bids with `auction % 123 == 0`. One
/// operator, `q2`.
///
/// ```
/// use weir_nexmark::queries::{Query, Q2};
/// assert_eq!(Q2.name(), "q2");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Q2;

impl Query for Q2 {
    type Out = AuctionPrice;
    fn name(&self) -> &'static str {
        "q2"
    }
    fn build(&self, events: DataStream<Event>) -> DataStream<AuctionPrice> {
        events
            .flat_map(|e: Event| match e {
                Event::Bid(b) if b.auction % 123 == 0 => Some(AuctionPrice {
                    auction: big(b.auction),
                    price: big(b.price),
                }),
                _ => None,
            })
            .uid("q2")
    }
    fn operator_uids(&self) -> &'static [&'static str] {
        &["q2"]
    }
    fn reference(&self, input: &Timeline) -> Answer<AuctionPrice> {
        reference::q2(input)
    }
}

/// The highest of the bids held for an auction that had not come yet (`(price, date_time)`)
/// that fall within its `[from, to]`; empties `held` (q4 and q6 join bids to their auction).
fn best_held_bid(held: &mut Vec<(u64, i64)>, from: i64, to: i64) -> Option<u64> {
    std::mem::take(held)
        .into_iter()
        .filter(|&(_, t)| from <= t && t <= to)
        .map(|(p, _)| p)
        .max()
}
