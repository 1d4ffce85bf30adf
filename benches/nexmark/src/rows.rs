//! The queries' result rows: what each query's sink receives, as in the suite's sink tables
//! (`BIGINT` as `u64` for ids and prices, `i64` ms for times, `DECIMAL(23, 3)` as
//! [`Decimal3`]), plus the window a windowed result belongs to, so results compare per key
//! per window.
//!
//! Every row is ordered and hashed by all its fields: a query's results compare as a sorted
//! `Vec` (a multiset), and a [`Blackhole`](super::Blackhole) sums their hashes.

use serde::{Deserialize, Serialize};

use super::Bid;

/// An event-time window `[start, end)`, ms since the epoch.
///
/// ```
/// let w = weir_nexmark::Window { start: 0, end: 10_000 };
/// assert_eq!(w.max_timestamp(), 9_999);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Window {
    /// The first ms in the window.
    pub start: i64,
    /// The first ms after it.
    pub end: i64,
}

impl Window {
    /// The last ms in the window: the window fires once the watermark reaches it, and a
    /// record for it that comes later is late.
    ///
    /// ```
    /// let w = weir_nexmark::Window { start: 10, end: 20 };
    /// assert_eq!(w.max_timestamp(), 19);
    /// ```
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }
}

/// A decimal with 3 digits after the point (the suite's `DECIMAL(23, 3)`), as an exact
/// count of thousandths.
///
/// ```
/// use weir_nexmark::Decimal3;
/// let euros = Decimal3::times_0_908(1_000);
/// assert_eq!(euros, Decimal3 { thousandths: 908_000 });
/// assert_eq!(euros.to_string(), "908.000");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Decimal3 {
    /// The value in thousandths.
    pub thousandths: u128,
}

impl Decimal3 {
    /// `0.908 * price`, exactly: q1's dollars to euros.
    ///
    /// ```
    /// assert_eq!(weir_nexmark::Decimal3::times_0_908(3).to_string(), "2.724");
    /// ```
    pub fn times_0_908(price: u64) -> Self {
        Decimal3 {
            thousandths: u128::from(price) * 908,
        }
    }
}

impl std::fmt::Display for Decimal3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{:03}",
            self.thousandths / 1000,
            self.thousandths % 1000
        )
    }
}

/// `usize` (the generator's ids and prices) as `u64` (the suite's `BIGINT`).
pub(crate) fn big(x: usize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// q0's row: a bid passed through (`auction, bidder, price, dateTime, extra`).
///
/// ```
/// use weir_nexmark::rows::BidRow;
/// let bid = weir_nexmark::Bid {
///     auction: 1000, bidder: 2001, price: 5, channel: "Google".into(),
///     url: "https://x".into(), date_time: 7, extra: String::new(),
/// };
/// assert_eq!(BidRow::from(bid).price, 5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BidRow {
    /// The auction bid on.
    pub auction: u64,
    /// Who bid.
    pub bidder: u64,
    /// The price, in cents.
    pub price: u64,
    /// When, ms since the epoch.
    pub date_time: i64,
    /// The bid's extra field.
    pub extra: String,
}

impl From<Bid> for BidRow {
    fn from(b: Bid) -> Self {
        BidRow {
            auction: big(b.auction),
            bidder: big(b.bidder),
            price: big(b.price),
            date_time: ms(b.date_time),
            extra: b.extra,
        }
    }
}

/// q1's row: a bid with its price in euros (`0.908 * price`).
///
/// ```
/// use weir_nexmark::rows::EuroBid;
/// let bid = weir_nexmark::Bid {
///     auction: 1000, bidder: 2001, price: 1_000, channel: String::new(),
///     url: String::new(), date_time: 7, extra: String::new(),
/// };
/// assert_eq!(EuroBid::from(bid).price.to_string(), "908.000");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EuroBid {
    /// The auction bid on.
    pub auction: u64,
    /// Who bid.
    pub bidder: u64,
    /// The price in euros: 0.908 times the price in dollars.
    pub price: Decimal3,
    /// When, ms since the epoch.
    pub date_time: i64,
    /// The bid's extra field.
    pub extra: String,
}

impl From<Bid> for EuroBid {
    fn from(b: Bid) -> Self {
        EuroBid {
            auction: big(b.auction),
            bidder: big(b.bidder),
            price: Decimal3::times_0_908(big(b.price)),
            date_time: ms(b.date_time),
            extra: b.extra,
        }
    }
}

/// q2's row: `(auction, price)` of a bid on every 123rd auction.
///
/// ```
/// let row = weir_nexmark::rows::AuctionPrice { auction: 1107, price: 42 };
/// assert_eq!(row.auction % 123, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AuctionPrice {
    /// The auction.
    pub auction: u64,
    /// The bid's price.
    pub price: u64,
}

/// q3's row: a seller in OR, ID or CA and an auction of theirs in category 10.
///
/// ```
/// let row = weir_nexmark::rows::LocalItem {
///     name: "Peter Smith".into(), city: "Bend".into(), state: "OR".into(), auction: 1003,
/// };
/// assert_eq!(row.state, "OR");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LocalItem {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: String,
    /// The seller's state.
    pub state: String,
    /// The auction's id.
    pub auction: u64,
}

/// q4's row: a category and the average of its auctions' winning prices (`AVG` of
/// `BIGINT`: the sum divided by the count, rounded down).
///
/// ```
/// let row = weir_nexmark::rows::CategoryAverage { category: 10, average: 1_234 };
/// assert_eq!(row.category, 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CategoryAverage {
    /// The category.
    pub category: u64,
    /// The average winning price, in cents.
    pub average: u64,
}

/// q5's row: an auction with the most bids of a window (ties: each of them).
///
/// ```
/// use weir_nexmark::{rows::HotItem, Window};
/// let row = HotItem { window: Window { start: 0, end: 10_000 }, auction: 1000, num: 3 };
/// assert_eq!(row.num, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HotItem {
    /// The sliding window (10 s, every 2 s).
    pub window: Window,
    /// The auction.
    pub auction: u64,
    /// Its bids in the window: the window's maximum.
    pub num: u64,
}

/// q6's row: a seller's average winning price over their last 10 closed auctions, emitted as
/// auction `auction` of theirs closed.
///
/// ```
/// let row = weir_nexmark::rows::SellerAverage { seller: 1001, auction: 1007, average: 50 };
/// assert_eq!(row.seller, 1001);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SellerAverage {
    /// The seller.
    pub seller: u64,
    /// The auction whose close this average includes last.
    pub auction: u64,
    /// The average (rounded down), in cents.
    pub average: u64,
}

/// q7's row: a bid at the highest price of a 10 s tumbling window, with the window's end
/// (the suite's `B1.dateTime`).
///
/// The suite's `SELECT B.auction, B.price, B.bidder, ...` fills its sink's columns
/// `auction, bidder, price, ...` by position (price into `bidder`); here each value keeps
/// its name.
///
/// ```
/// use weir_nexmark::{rows::HighestBid, Window};
/// let row = HighestBid {
///     window: Window { start: 0, end: 10_000 }, auction: 1000, price: 99, bidder: 2001,
///     date_time: 5_000, extra: String::new(),
/// };
/// assert_eq!(row.price, 99);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HighestBid {
    /// The window whose maximum the bid's price equals.
    pub window: Window,
    /// The auction bid on.
    pub auction: u64,
    /// The price: the window's highest.
    pub price: u64,
    /// Who bid.
    pub bidder: u64,
    /// When, ms since the epoch.
    pub date_time: i64,
    /// The bid's extra field.
    pub extra: String,
}

/// q8's row: a person who joined and opened an auction in the same 10 s tumbling window.
///
/// ```
/// use weir_nexmark::{rows::NewUser, Window};
/// let row = NewUser { window: Window { start: 0, end: 10_000 }, id: 1000, name: "Kate Jones".into() };
/// assert_eq!(row.window.start, 0); // the suite's `stime`
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NewUser {
    /// The window (its start is the suite's `stime`).
    pub window: Window,
    /// The person's id.
    pub id: u64,
    /// The person's name.
    pub name: String,
}

/// q11's row: the bids of one bidder's session (10 s gap).
///
/// ```
/// use weir_nexmark::{rows::BidderSession, Window};
/// let row = BidderSession { bidder: 1001, window: Window { start: 0, end: 10_000 }, bid_count: 1 };
/// assert_eq!(row.window.end - row.window.start, 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BidderSession {
    /// The bidder.
    pub bidder: u64,
    /// The session: from its first bid to its last bid plus the gap.
    pub window: Window,
    /// Bids in the session.
    pub bid_count: u64,
}

/// A generator time (`u64` ms) as an event time (`i64` ms), saturating.
pub(crate) fn ms(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}
