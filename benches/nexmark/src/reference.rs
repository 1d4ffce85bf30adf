//! The Nexmark queries as sequential, framework-free functions: what a Weir run of a query
//! must equal, per key and per window, nothing missing and nothing twice.
//!
//! A reference reads a [`Timeline`]: the events in the order they arrive, with the
//! watermarks between them. [`Timeline::new`] puts after every event the suite's watermark,
//! `max(timestamp seen) - 4 s` (`WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`);
//! [`Timeline::from_elements`] takes watermarks placed by hand. The end of the input is a
//! watermark at `i64::MAX`: every window fires.
//!
//! Each reference returns an [`Answer`]: its results as a sorted `Vec` (a multiset), and the
//! records it dropped as late, in arrival order. The semantics are those of the suite's
//! Flink SQL (`nexmark-flink/src/main/resources/queries/*.sql`), read as Flink runs them:
//!
//! | query | what | late records |
//! |---|---|---|
//! | [`q0`] | every bid (`auction, bidder, price, dateTime, extra`) | none (no event-time operator) |
//! | [`q1`] | every bid, price × 0.908 (exact, `DECIMAL(23, 3)`) | none |
//! | [`q2`] | `(auction, price)` of bids with `auction % 123 == 0` | none |
//! | [`q3`] | sellers in OR, ID, CA ⋈ their auctions in category 10: `(name, city, state, id)` | none: a regular join, whatever the arrival order |
//! | [`q4`] | per category, `AVG` of the auctions' winning prices: an auction's `MAX(price)` over bids with `A.dateTime <= B.dateTime <= A.expires` (`BETWEEN`: both ends in) | none: a regular join and two unbounded aggregations; the result is their final state |
//! | [`q5`] | per `HOP` window (10 s every 2 s): the auctions with the most bids, ties all in | a bid counts in each of its windows not yet fired when it arrives (`window.max_timestamp() > watermark`); it is dropped if none is left |
//! | [`q6`] | per seller, as each auction closes: the average winning price of their last 10 closed auctions | see [`q6`] (Flink cannot run the suite's SQL) |
//! | [`q7`] | per 10 s `TUMBLE` window, the bids at its highest price with `window_end - 10 s <= dateTime <= window_end` | the window's `MAX` drops bids of a fired window; the other side of the join is every bid (a regular join drops nothing) |
//! | [`q8`] | per 10 s `TUMBLE` window, persons who joined and opened an auction in it: `(id, name, window)` | a person or auction of a fired window is dropped |
//! | [`q11`] | per bidder, sessions of bids (10 s gap): `(bidder, count, start, end)` | a bid that would open a new session that has already fired is dropped |
//!
//! The watermark is the whole event stream's (persons, auctions and bids), as the suite
//! defines it on its one source table. A window fires when the watermark reaches its
//! [`max_timestamp`](super::Window::max_timestamp) (`end - 1`); windows are aligned to the
//! epoch; session windows merge when they touch (Flink's `TimeWindow.intersects`: `[a, b)`
//! and `[b, c)` merge), so two bids exactly 10 s apart are one session.
//!
//! Flink's DataStream `forBoundedOutOfOrderness(d)` emits `max - d - 1 ms`, one less than the
//! SQL watermark: [`Timeline::bounded`] with `d + 1 ms` models it.
//!
//! ```
//! use weir_nexmark::{reference, GeneratorConfig};
//!
//! let timeline = reference::Timeline::new(GeneratorConfig::new(5_000).events());
//! let answer = reference::q2(&timeline);
//! assert!(answer.results.iter().all(|r| r.auction % 123 == 0));
//! assert!(answer.late.is_empty());
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use super::blackhole::BlackholeTotals;
use super::rows::{
    big, ms, AuctionPrice, BidRow, BidderSession, CategoryAverage, EuroBid, HighestBid, HotItem,
    LocalItem, NewUser, SellerAverage,
};
use super::{event_time, Auction, Bid, Event, Person, Window};

/// The suite's bounded out-of-orderness: the watermark trails the largest timestamp seen by
/// 4 s.
pub const OUT_OF_ORDERNESS: Duration = Duration::from_secs(4);

/// q5's sliding window: 10 s, every 2 s.
pub const Q5_SIZE_MS: i64 = 10_000;
/// q5's slide.
pub const Q5_SLIDE_MS: i64 = 2_000;
/// q7's and q8's tumbling windows: 10 s.
pub const TUMBLE_MS: i64 = 10_000;
/// q11's session gap: 10 s.
pub const SESSION_GAP_MS: i64 = 10_000;
/// q6's number of last closed auctions averaged.
pub const Q6_LAST: usize = 10;

/// One element of a [`Timeline`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Element {
    /// An event arrives.
    Event(Event),
    /// The watermark becomes this (ms since the epoch; a lower one than before changes
    /// nothing: watermarks never go back).
    Watermark(i64),
}

/// Events in arrival order, and the watermarks between them.
///
/// ```
/// use weir_nexmark::reference::{Element, Timeline};
/// use weir_nexmark::GeneratorConfig;
///
/// let events: Vec<_> = GeneratorConfig::new(3).with_first_event_rate(1).with_base_time(0).events().collect();
/// let t = Timeline::new(events);
/// // After the event at 2 s: watermark 2 s - 4 s.
/// assert_eq!(t.elements().last(), Some(&Element::Watermark(-2_000)));
/// assert_eq!(t.events().count(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    elements: Vec<Element>,
}

impl Timeline {
    /// `events` in this order, each followed by the suite's watermark (largest timestamp so
    /// far − [`OUT_OF_ORDERNESS`]) where it advanced.
    ///
    /// ```
    /// let t = weir_nexmark::reference::Timeline::new(Vec::new());
    /// assert!(t.elements().is_empty());
    /// ```
    pub fn new(events: impl IntoIterator<Item = Event>) -> Self {
        Self::bounded(events, OUT_OF_ORDERNESS)
    }

    /// `events` in this order, each followed by the watermark `max timestamp - bound` where
    /// it advanced (`bound` in whole ms).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_nexmark::reference::{Element, Timeline};
    /// use weir_nexmark::GeneratorConfig;
    /// let e = GeneratorConfig::new(1).with_base_time(10_000).events().next().unwrap();
    /// let t = Timeline::bounded([e], Duration::from_millis(4_001));
    /// assert_eq!(t.elements()[1], Element::Watermark(5_999));
    /// ```
    pub fn bounded(events: impl IntoIterator<Item = Event>, bound: Duration) -> Self {
        let bound = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
        let mut elements = Vec::new();
        let mut wm = i64::MIN;
        for e in events {
            let w = event_time(&e).saturating_sub(bound);
            elements.push(Element::Event(e));
            if w > wm {
                wm = w;
                elements.push(Element::Watermark(w));
            }
        }
        Timeline { elements }
    }

    /// Events and watermarks as given.
    ///
    /// ```
    /// use weir_nexmark::reference::{Element, Timeline};
    /// let t = Timeline::from_elements(vec![Element::Watermark(5)]);
    /// assert_eq!(t.events().count(), 0);
    /// ```
    pub fn from_elements(elements: Vec<Element>) -> Self {
        Timeline { elements }
    }

    /// The elements, in order.
    ///
    /// ```
    /// assert!(weir_nexmark::reference::Timeline::default().elements().is_empty());
    /// ```
    pub fn elements(&self) -> &[Element] {
        &self.elements
    }

    /// The events, in arrival order.
    ///
    /// ```
    /// assert_eq!(weir_nexmark::reference::Timeline::default().events().count(), 0);
    /// ```
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.elements.iter().filter_map(|e| match e {
            Element::Event(e) => Some(e),
            Element::Watermark(_) => None,
        })
    }

    /// Every event with the watermark in force when it arrives (set by the elements before
    /// it).
    fn scan(&self) -> impl Iterator<Item = (&Event, i64)> {
        let mut wm = i64::MIN;
        self.elements.iter().filter_map(move |e| match e {
            Element::Event(e) => Some((e, wm)),
            Element::Watermark(w) => {
                wm = wm.max(*w);
                None
            }
        })
    }

    fn bids(&self) -> impl Iterator<Item = &Bid> {
        self.events().filter_map(|e| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
    }
}

/// A reference's answer: its results as a multiset, and the records it dropped as late.
///
/// ```
/// use weir_nexmark::reference::{q0, Timeline};
/// let answer = q0(&Timeline::default());
/// assert_eq!(answer.results.len(), 0);
/// assert_eq!(answer.late_dropped(), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    /// The results, sorted.
    pub results: Vec<T>,
    /// The records dropped as late (no window or state took them), in arrival order.
    pub late: Vec<Event>,
}

impl<T: Ord> Answer<T> {
    fn new(mut results: Vec<T>, late: Vec<Event>) -> Self {
        results.sort();
        Answer { results, late }
    }

    /// How many records were dropped as late.
    ///
    /// ```
    /// let a = weir_nexmark::reference::q1(&Default::default());
    /// assert_eq!(a.late_dropped(), 0);
    /// ```
    pub fn late_dropped(&self) -> usize {
        self.late.len()
    }
}

impl<T: Hash> Answer<T> {
    /// The results' count and checksum, as a [`Blackhole`](super::Blackhole) that received
    /// them shows them.
    ///
    /// ```
    /// let a = weir_nexmark::reference::q2(&Default::default());
    /// assert_eq!(a.totals().results, 0);
    /// ```
    pub fn totals(&self) -> BlackholeTotals {
        BlackholeTotals::of(&self.results)
    }
}

/// The tumbling window of `size` ms that holds `t`.
fn tumble(t: i64, size: i64) -> Window {
    let start = t - t.rem_euclid(size);
    Window {
        start,
        end: start.saturating_add(size),
    }
}

/// The sliding windows (`size` every `slide` ms) that hold `t`.
fn hop(t: i64, size: i64, slide: i64) -> Vec<Window> {
    let mut start = t - t.rem_euclid(slide);
    let mut windows = Vec::new();
    while start > t.saturating_sub(size) {
        windows.push(Window {
            start,
            end: start.saturating_add(size),
        });
        start -= slide;
    }
    windows
}

/// Query 0, pass-through: every bid.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(100).events());
/// assert_eq!(reference::q0(&t).results.len(), 92); // 46 of every 50 events
/// ```
pub fn q0(input: &Timeline) -> Answer<BidRow> {
    Answer::new(
        input.bids().cloned().map(BidRow::from).collect(),
        Vec::new(),
    )
}

/// Query 1, currency conversion: every bid with its price × 0.908.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(100).events());
/// let q1 = reference::q1(&t);
/// assert_eq!(q1.results.len(), reference::q0(&t).results.len());
/// ```
pub fn q1(input: &Timeline) -> Answer<EuroBid> {
    Answer::new(
        input.bids().cloned().map(EuroBid::from).collect(),
        Vec::new(),
    )
}

/// Query 2, selection: `(auction, price)` of the bids on every 123rd auction.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(10_000).events());
/// assert!(!reference::q2(&t).results.is_empty());
/// ```
pub fn q2(input: &Timeline) -> Answer<AuctionPrice> {
    Answer::new(
        input
            .bids()
            .filter(|b| b.auction % 123 == 0)
            .map(|b| AuctionPrice {
                auction: big(b.auction),
                price: big(b.price),
            })
            .collect(),
        Vec::new(),
    )
}

/// Query 3, local item suggestion: every (person, auction) with `auction.seller == person.id`,
/// the person in OR, ID or CA, the auction in category 10 (a regular inner join: any arrival
/// order, no lateness).
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(20_000).events());
/// let q3 = reference::q3(&t);
/// assert!(q3.results.iter().all(|r| ["OR", "ID", "CA"].contains(&r.state.as_str())));
/// ```
pub fn q3(input: &Timeline) -> Answer<LocalItem> {
    let mut persons: HashMap<usize, Vec<&Person>> = HashMap::new();
    let mut auctions: Vec<&Auction> = Vec::new();
    for e in input.events() {
        match e {
            Event::Person(p) if matches!(p.state.as_str(), "OR" | "ID" | "CA") => {
                persons.entry(p.id).or_default().push(p)
            }
            Event::Auction(a) if a.category == 10 => auctions.push(a),
            _ => {}
        }
    }
    let mut results = Vec::new();
    for a in auctions {
        for p in persons.get(&a.seller).into_iter().flatten() {
            results.push(LocalItem {
                name: p.name.clone(),
                city: p.city.clone(),
                state: p.state.clone(),
                auction: big(a.id),
            });
        }
    }
    Answer::new(results, Vec::new())
}

/// Per (auction id, category): the highest price of the bids on it with
/// `auction.date_time <= bid.date_time <= auction.expires` (q4's winning bids, as the
/// suite's join finds them). Auction ids are unique (the generator's are): of a repeated id
/// the first auction counts.
fn winning_prices(input: &Timeline) -> HashMap<(usize, usize), usize> {
    let mut bids: HashMap<usize, Vec<&Bid>> = HashMap::new();
    let mut auctions = Vec::new();
    for e in input.events() {
        match e {
            Event::Auction(a) => auctions.push(a),
            Event::Bid(b) => bids.entry(b.auction).or_default().push(b),
            Event::Person(_) => {}
        }
    }
    let mut best: HashMap<(usize, usize), usize> = HashMap::new();
    let mut seen = HashSet::new();
    for a in auctions {
        if !seen.insert(a.id) {
            continue; // a repeated auction id: the first one counts
        }
        let top = bids
            .get(&a.id)
            .into_iter()
            .flatten()
            .filter(|b| a.date_time <= b.date_time && b.date_time <= a.expires)
            .map(|b| b.price)
            .max();
        if let Some(price) = top {
            let slot = best.entry((a.id, a.category)).or_insert(price);
            *slot = (*slot).max(price);
        }
    }
    best
}

/// Query 4, average price for a category: per category, the average (`AVG` of `BIGINT`:
/// rounded down) over its auctions of their winning price, the highest bid with
/// `auction.date_time <= bid.date_time <= auction.expires`. Auctions without such a bid do
/// not count. A regular join and unbounded aggregations: the final state, no lateness.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(20_000).events());
/// let q4 = reference::q4(&t);
/// assert!(!q4.results.is_empty() && q4.results.len() <= 5); // 5 categories
/// ```
pub fn q4(input: &Timeline) -> Answer<CategoryAverage> {
    let mut per_category: BTreeMap<usize, (u128, u128)> = BTreeMap::new();
    for ((_, category), price) in winning_prices(input) {
        let (sum, n) = per_category.entry(category).or_default();
        *sum += price as u128;
        *n += 1;
    }
    Answer::new(
        per_category
            .into_iter()
            .map(|(category, (sum, n))| CategoryAverage {
                category: big(category),
                average: u64::try_from(sum / n).unwrap_or(u64::MAX),
            })
            .collect(),
        Vec::new(),
    )
}

/// Query 5, hot items: per sliding window (10 s every 2 s), the auctions with the most bids
/// in it (ties: all). A bid counts in each of its windows that has not fired when it
/// arrives; a bid all of whose windows have fired is late.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(10_000).events());
/// let q5 = reference::q5(&t);
/// assert!(!q5.results.is_empty());
/// assert!(q5.late.is_empty()); // the generator's events come in order
/// ```
pub fn q5(input: &Timeline) -> Answer<HotItem> {
    q5_with(input, Q5_SIZE_MS, Q5_SLIDE_MS)
}

/// [`q5`] with sliding windows of `size_ms` every `slide_ms` (the issue compares 60 s / 1 s
/// with the suite's 10 s / 2 s). `slide_ms` must be at least 1 ms and at most `size_ms`.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(5_000).with_first_event_rate(1_000).events());
/// let q5 = reference::q5_with(&t, 3_000, 1_000);
/// assert!(q5.results.iter().all(|r| r.window.end - r.window.start == 3_000));
/// assert!(q5.results.iter().all(|r| r.window.start % 1_000 == 0));
/// ```
pub fn q5_with(input: &Timeline, size_ms: i64, slide_ms: i64) -> Answer<HotItem> {
    let mut counts: BTreeMap<Window, HashMap<usize, u64>> = BTreeMap::new();
    let mut late = Vec::new();
    for (e, wm) in input.scan() {
        let Event::Bid(b) = e else { continue };
        let mut counted = false;
        for w in hop(ms(b.date_time), size_ms, slide_ms) {
            if w.max_timestamp() > wm {
                *counts.entry(w).or_default().entry(b.auction).or_default() += 1;
                counted = true;
            }
        }
        if !counted {
            late.push(e.clone());
        }
    }
    let mut results = Vec::new();
    for (window, per_auction) in counts {
        let max = per_auction.values().copied().max().unwrap_or(0);
        results.extend(
            per_auction
                .into_iter()
                .filter(|&(_, n)| n == max)
                .map(|(auction, num)| HotItem {
                    window,
                    auction: big(auction),
                    num,
                }),
        );
    }
    Answer::new(results, late)
}

/// Query 6, average selling price by seller: as each auction closes with a winning bid, the
/// seller's average winning price over their last [`Q6_LAST`] closed auctions (this one
/// included; rounded down).
///
/// The suite's SQL for q6 does not run on Flink (its `OVER` window cannot take the join's
/// retractions), so these are the event-time semantics the query's description and the
/// original Nexmark give it:
/// - An auction closes when the watermark reaches its `expires`. An auction that arrives
///   closed is late (dropped). Auction ids are unique (the generator's are); a repeated id
///   is ignored.
/// - Its winning bid: the highest price among the bids on it with
///   `date_time <= bid.date_time <= expires` (as q4) that arrive before it closes, before or
///   after the auction itself. Such a bid that arrives after the auction and after the close
///   is late (dropped). A bid that arrives before its auction is held with the auction: it
///   counts if the auction does, and goes with it, not counted as late on its own, if the
///   auction arrives closed. Other bids (another auction's time, an auction never seen) are
///   neither.
/// - A seller's closed auctions are ordered by `(expires, id)` (the order the watermark
///   closes them in); each one with a winner emits the average over the last 10 winners.
///   The suite's frame `ROWS BETWEEN 10 PRECEDING AND CURRENT ROW` would hold 11 rows; the
///   query's "last 10 closed auctions" is followed.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(20_000).events());
/// let q6 = reference::q6(&t);
/// assert!(!q6.results.is_empty());
/// ```
pub fn q6(input: &Timeline) -> Answer<SellerAverage> {
    // Arrival index and watermark of every event.
    let scanned: Vec<(&Event, i64)> = input.scan().collect();
    // Per auction id: the (first) auction, where it arrived, whether it arrived closed.
    let mut auctions: HashMap<usize, (&Auction, usize, bool)> = HashMap::new();
    let mut late_at: BTreeSet<usize> = BTreeSet::new();
    for (i, (e, wm)) in scanned.iter().enumerate() {
        if let Event::Auction(a) = e {
            if auctions.contains_key(&a.id) {
                continue;
            }
            let is_late = ms(a.expires) <= *wm;
            if is_late {
                late_at.insert(i);
            }
            auctions.insert(a.id, (a, i, is_late));
        }
    }
    let mut winners: HashMap<usize, usize> = HashMap::new();
    for (i, (e, wm)) in scanned.iter().enumerate() {
        let Event::Bid(b) = e else { continue };
        let Some(&(a, arrived, auction_late)) = auctions.get(&b.auction) else {
            continue;
        };
        if b.date_time < a.date_time || b.date_time > a.expires {
            continue;
        }
        if i > arrived && ms(a.expires) <= *wm {
            late_at.insert(i);
        } else if !auction_late {
            let w = winners.entry(a.id).or_insert(b.price);
            *w = (*w).max(b.price);
        }
    }
    let mut per_seller: HashMap<usize, Vec<(u64, usize, usize)>> = HashMap::new();
    for (id, price) in &winners {
        if let Some((a, _, _)) = auctions.get(id) {
            per_seller
                .entry(a.seller)
                .or_default()
                .push((a.expires, a.id, *price));
        }
    }
    let mut results = Vec::new();
    for (seller, mut closed) in per_seller {
        closed.sort_unstable();
        for k in 0..closed.len() {
            let last = &closed[k.saturating_sub(Q6_LAST - 1)..=k];
            let sum: u128 = last.iter().map(|&(_, _, p)| p as u128).sum();
            results.push(SellerAverage {
                seller: big(seller),
                auction: big(closed[k].1),
                average: u64::try_from(sum / last.len() as u128).unwrap_or(u64::MAX),
            });
        }
    }
    let late = late_at.into_iter().map(|i| scanned[i].0.clone()).collect();
    Answer::new(results, late)
}

/// Query 7, highest bid: per 10 s tumbling window, its highest price (`MAX` over the bids
/// that arrived before the window fired; the others are late), then every bid at that price
/// with `window.end - 10 s <= date_time <= window.end` (a regular join: every bid, late or
/// not; `BETWEEN` takes both ends, so a bid at exactly `window.end` can match).
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(10_000).events());
/// let q7 = reference::q7(&t);
/// assert!(!q7.results.is_empty());
/// ```
pub fn q7(input: &Timeline) -> Answer<HighestBid> {
    let mut max: HashMap<Window, usize> = HashMap::new();
    let mut late = Vec::new();
    for (e, wm) in input.scan() {
        let Event::Bid(b) = e else { continue };
        let w = tumble(ms(b.date_time), TUMBLE_MS);
        if w.max_timestamp() > wm {
            let m = max.entry(w).or_insert(b.price);
            *m = (*m).max(b.price);
        } else {
            late.push(e.clone());
        }
    }
    let mut results = Vec::new();
    for b in input.bids() {
        let t = ms(b.date_time);
        let own = tumble(t, TUMBLE_MS);
        let mut windows = vec![own];
        if own.start == t {
            windows.push(Window {
                start: t.saturating_sub(TUMBLE_MS),
                end: t,
            });
        }
        for w in windows {
            if max.get(&w) == Some(&b.price) && w.end - TUMBLE_MS <= t && t <= w.end {
                results.push(HighestBid {
                    window: w,
                    auction: big(b.auction),
                    price: big(b.price),
                    bidder: big(b.bidder),
                    date_time: t,
                    extra: b.extra.clone(),
                });
            }
        }
    }
    Answer::new(results, late)
}

/// Query 8, monitor new users: per 10 s tumbling window, the persons who joined in it and
/// opened an auction in it (`GROUP BY id, name` and `GROUP BY seller` per window, then an
/// equi-join on id and window). A person or auction that arrives after its window fired is
/// late.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(10_000).events());
/// assert!(!reference::q8(&t).results.is_empty());
/// ```
pub fn q8(input: &Timeline) -> Answer<NewUser> {
    let mut persons: HashMap<Window, BTreeSet<(usize, &str)>> = HashMap::new();
    let mut sellers: HashMap<Window, HashSet<usize>> = HashMap::new();
    let mut late = Vec::new();
    for (e, wm) in input.scan() {
        let w = tumble(event_time(e), TUMBLE_MS);
        let on_time = w.max_timestamp() > wm;
        match e {
            Event::Person(p) if on_time => {
                persons.entry(w).or_default().insert((p.id, &p.name));
            }
            Event::Auction(a) if on_time => {
                sellers.entry(w).or_default().insert(a.seller);
            }
            Event::Person(_) | Event::Auction(_) => late.push(e.clone()),
            Event::Bid(_) => {}
        }
    }
    let mut results = Vec::new();
    for (w, people) in persons {
        let Some(s) = sellers.get(&w) else { continue };
        results.extend(
            people
                .into_iter()
                .filter(|(id, _)| s.contains(id))
                .map(|(id, name)| NewUser {
                    window: w,
                    id: big(id),
                    name: name.to_owned(),
                }),
        );
    }
    Answer::new(results, late)
}

/// Query 11, user sessions: per bidder, the sessions of their bids with a 10 s gap: a bid
/// at `t` opens `[t, t + 10 s)`, which merges with every open session it touches. A session
/// fires when the watermark reaches its end − 1 ms; a bid whose own session would already
/// have fired (and touches no open one) is late.
///
/// ```
/// use weir_nexmark::{reference, GeneratorConfig};
/// let t = reference::Timeline::new(GeneratorConfig::new(10_000).events());
/// let q11 = reference::q11(&t);
/// let bids = reference::q0(&t).results.len() as u64;
/// assert_eq!(q11.results.iter().map(|s| s.bid_count).sum::<u64>(), bids);
/// ```
pub fn q11(input: &Timeline) -> Answer<BidderSession> {
    #[derive(Clone, Copy)]
    struct Open {
        window: Window,
        count: u64,
    }
    let mut open: HashMap<usize, Vec<Open>> = HashMap::new();
    let mut results = Vec::new();
    let mut late = Vec::new();
    let emit = |bidder: usize, s: Open, results: &mut Vec<BidderSession>| {
        results.push(BidderSession {
            bidder: big(bidder),
            window: s.window,
            bid_count: s.count,
        })
    };
    for (e, wm) in input.scan() {
        let Event::Bid(b) = e else { continue };
        let sessions = open.entry(b.bidder).or_default();
        // Sessions the watermark has fired by now.
        let (fired, still): (Vec<Open>, Vec<Open>) = sessions
            .drain(..)
            .partition(|s| s.window.max_timestamp() <= wm);
        for s in fired {
            emit(b.bidder, s, &mut results);
        }
        let t = ms(b.date_time);
        let mut merged = Open {
            window: Window {
                start: t,
                end: t.saturating_add(SESSION_GAP_MS),
            },
            count: 1,
        };
        let mut touched = false;
        let mut kept = Vec::with_capacity(still.len() + 1);
        for s in still {
            let w = merged.window;
            if s.window.start <= w.end && s.window.end >= w.start {
                merged.window = Window {
                    start: w.start.min(s.window.start),
                    end: w.end.max(s.window.end),
                };
                merged.count += s.count;
                touched = true;
            } else {
                kept.push(s);
            }
        }
        if !touched && merged.window.max_timestamp() <= wm {
            late.push(e.clone());
        } else {
            kept.push(merged);
        }
        *sessions = kept;
    }
    for (bidder, sessions) in open {
        for s in sessions {
            emit(bidder, s, &mut results);
        }
    }
    Answer::new(results, late)
}

#[cfg(test)]
mod tests;
