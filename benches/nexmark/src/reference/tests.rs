use super::*;

fn person(id: usize, name: &str, state: &str, t: u64) -> Event {
    Event::Person(Person {
        id,
        name: name.into(),
        email_address: String::new(),
        credit_card: String::new(),
        city: format!("{name}-city"),
        state: state.into(),
        date_time: t,
        extra: String::new(),
    })
}

fn auction(id: usize, seller: usize, category: usize, t: u64, expires: u64) -> Event {
    Event::Auction(Auction {
        id,
        item_name: String::new(),
        description: String::new(),
        initial_bid: 1,
        reserve: 1,
        date_time: t,
        expires,
        seller,
        category,
        extra: String::new(),
    })
}

fn bid(auction: usize, bidder: usize, price: usize, t: u64) -> Event {
    Event::Bid(Bid {
        auction,
        bidder,
        price,
        channel: String::new(),
        url: String::new(),
        date_time: t,
        extra: format!("x{t}"),
    })
}

fn w(start: i64, end: i64) -> Window {
    Window { start, end }
}

#[test]
fn the_watermark_trails_the_largest_timestamp_and_never_goes_back() {
    let t = Timeline::new([
        bid(1, 1, 1, 10_000),
        bid(1, 1, 1, 3_000),
        bid(1, 1, 1, 12_000),
    ]);
    let wms: Vec<i64> = t.scan().map(|(_, wm)| wm).collect();
    assert_eq!(wms, [i64::MIN, 6_000, 6_000]);
    assert_eq!(
        t.elements()
            .iter()
            .filter(|e| matches!(e, Element::Watermark(_)))
            .count(),
        2
    );
}

#[test]
fn windows_are_aligned_to_the_epoch() {
    assert_eq!(tumble(0, 10), w(0, 10));
    assert_eq!(tumble(19, 10), w(10, 20));
    assert_eq!(tumble(-1, 10), w(-10, 0));
    assert_eq!(hop(5_000, 10_000, 2_000).len(), 5);
    let mut h = hop(4_000, 10_000, 2_000);
    h.sort();
    assert_eq!(
        h,
        [
            w(-4_000, 6_000),
            w(-2_000, 8_000),
            w(0, 10_000),
            w(2_000, 12_000),
            w(4_000, 14_000)
        ]
    );
}

#[test]
fn q0_q1_q2_map_and_filter_bids_only() {
    let t = Timeline::new([
        person(1, "p", "OR", 0),
        bid(246, 7, 1_000, 1),
        auction(9, 1, 10, 2, 5),
        bid(247, 8, 3, 3),
    ]);
    let q0 = q0(&t).results;
    assert_eq!(q0.len(), 2);
    assert_eq!(
        q0[0],
        BidRow {
            auction: 246,
            bidder: 7,
            price: 1_000,
            date_time: 1,
            extra: "x1".into()
        }
    );
    let q1 = q1(&t).results;
    assert_eq!(q1[0].price.to_string(), "908.000");
    assert_eq!(q1[1].price.to_string(), "2.724");
    assert_eq!(
        q2(&t).results,
        [AuctionPrice {
            auction: 246,
            price: 1_000
        }]
    );
}

#[test]
fn q3_joins_in_any_order_and_filters_state_and_category() {
    let t = Timeline::new([
        auction(100, 1, 10, 0, 9),      // seller 1 arrives later
        person(1, "Ann", "OR", 50_000), // far later: no lateness in a regular join
        person(2, "Bob", "WA", 1),
        auction(101, 2, 10, 2, 9), // WA: filtered
        auction(102, 1, 11, 3, 9), // category 11: filtered
        auction(103, 1, 10, 4, 9),
        person(3, "Cy", "CA", 5), // no auction
    ]);
    let a = q3(&t);
    let got: Vec<(String, u64)> = a
        .results
        .iter()
        .map(|r| (r.name.clone(), r.auction))
        .collect();
    assert_eq!(got, [("Ann".to_string(), 100), ("Ann".to_string(), 103)]);
    assert_eq!(a.results[0].city, "Ann-city");
    assert!(a.late.is_empty());
}

#[test]
fn q4_averages_the_winning_prices_within_each_auction_s_interval() {
    let t = Timeline::new([
        auction(1, 9, 10, 1_000, 2_000),
        auction(2, 9, 10, 1_000, 2_000),
        auction(3, 9, 11, 1_000, 2_000),
        auction(4, 9, 12, 1_000, 2_000), // no bid in its interval
        bid(1, 5, 10, 1_000),            // at date_time: in
        bid(1, 5, 30, 2_000),            // at expires: in (BETWEEN)
        bid(2, 5, 25, 1_500),
        bid(2, 5, 99, 2_001), // after expires
        bid(3, 5, 7, 999),    // before date_time
        bid(3, 5, 8, 1_999),
        bid(4, 5, 1_000, 5_000),
    ]);
    assert_eq!(
        q4(&t).results,
        [
            // (30 + 25) / 2, rounded down
            CategoryAverage {
                category: 10,
                average: 27
            },
            CategoryAverage {
                category: 11,
                average: 8
            },
        ]
    );
}

#[test]
fn q5_counts_per_sliding_window_and_drops_bids_of_fired_windows() {
    // Bids on auction 1 at 1 s and auction 2 twice at 3 s; then a bid at 19 s moves the
    // watermark to 15 s, so a bid at 5 s finds its windows [-4, 6) .. [4, 14) fired and
    // is late; one at 7 s still counts in [6, 16).
    let t = Timeline::new([
        bid(1, 1, 1, 1_000),
        bid(2, 1, 1, 3_000),
        bid(2, 1, 1, 3_500),
        bid(3, 1, 1, 19_000),
        bid(4, 1, 1, 5_000),
        bid(5, 1, 1, 7_000),
    ]);
    let a = q5(&t);
    assert_eq!(a.late, [bid(4, 1, 1, 5_000)]);
    let at = |start: i64| -> Vec<(u64, u64)> {
        a.results
            .iter()
            .filter(|r| r.window.start == start)
            .map(|r| (r.auction, r.num))
            .collect()
    };
    assert_eq!(at(-8_000), [(1, 1)]);
    assert_eq!(at(-6_000), [(2, 2)]);
    assert_eq!(at(0), [(2, 2)]);
    assert_eq!(at(2_000), [(2, 2)]);
    // Only the on-time bid at 7 s, in [6, 16): a tie of one.
    assert_eq!(at(6_000), [(5, 1)]);
    // [10, 20) .. [18, 28): the bid at 19 s alone.
    assert_eq!(at(12_000), [(3, 1)]);
    assert_eq!(at(18_000), [(3, 1)]);
    // [4, 14) has no bid: the one at 7 s came after it fired.
    assert!(at(4_000).is_empty());
    assert!(a
        .results
        .iter()
        .all(|r| r.window.end - r.window.start == 10_000));
    // Ties: both auctions of a window with one bid each.
    let tie = q5(&Timeline::new([bid(1, 1, 1, 0), bid(2, 1, 1, 1)]));
    assert_eq!(
        tie.results.iter().filter(|r| r.window.start == 0).count(),
        2
    );
}

#[test]
fn q6_averages_a_seller_s_last_10_closed_auctions_in_closing_order() {
    let mut events = Vec::new();
    // Seller 7: 12 auctions closing at 10 s, 11 s, ...; auction k's winning price is
    // 100 * (k + 1) (a lower bid too); auction 99 has no bid in its interval.
    for k in 0..12u64 {
        let id = 200 + k as usize;
        events.push(auction(id, 7, 10, 0, 10_000 + 1_000 * k));
        events.push(bid(id, 1, 100 * (k as usize + 1), 5_000));
        events.push(bid(id, 1, 1, 5_001));
    }
    events.push(auction(99, 7, 10, 0, 9_000));
    events.push(bid(99, 1, 5, 9_001));
    let a = q6(&Timeline::new(events));
    let avgs: Vec<(u64, u64)> = a.results.iter().map(|r| (r.auction, r.average)).collect();
    let mut expected = Vec::new();
    for k in 0..12u64 {
        let from = k.saturating_sub(9);
        let sum: u64 = (from..=k).map(|j| 100 * (j + 1)).sum();
        expected.push((200 + k, sum / (k - from + 1)));
    }
    assert_eq!(avgs, expected);
    assert!(a.late.is_empty());
}

#[test]
fn q6_drops_auctions_and_bids_that_come_after_the_close() {
    let t = Timeline::new([
        bid(1, 1, 50, 1_500), // before its auction: counts
        auction(1, 7, 10, 1_000, 2_000),
        bid(2, 1, 1, 30_000),            // watermark 26 s: auction 1 closed
        bid(1, 1, 80, 1_600),            // late
        auction(3, 7, 10, 1_000, 2_000), // late: arrives closed
        bid(3, 1, 5, 1_500),             // late too
    ]);
    let a = q6(&t);
    assert_eq!(
        a.results,
        [SellerAverage {
            seller: 7,
            auction: 1,
            average: 50
        }]
    );
    assert_eq!(
        a.late,
        [
            bid(1, 1, 80, 1_600),
            auction(3, 7, 10, 1_000, 2_000),
            bid(3, 1, 5, 1_500)
        ]
    );
}

#[test]
fn q6_a_bid_held_for_an_auction_that_comes_closed_goes_with_it() {
    let t = Timeline::new([
        bid(1, 1, 50, 1_500),            // before its auction
        bid(2, 1, 1, 30_000),            // watermark 26 s
        auction(1, 7, 10, 1_000, 2_000), // comes closed: late
    ]);
    let a = q6(&t);
    assert!(a.results.is_empty());
    assert_eq!(a.late, [auction(1, 7, 10, 1_000, 2_000)]);
}

#[test]
fn q7_joins_every_bid_at_its_window_s_maximum() {
    let t = Timeline::new([
        bid(1, 1, 5, 1_000),
        bid(2, 2, 9, 2_000),
        bid(3, 3, 9, 9_999),
        bid(4, 4, 9, 10_000), // window [10, 20): and at the end of [0, 10): BETWEEN
        bid(5, 5, 4, 11_000),
        bid(6, 6, 1, 30_000),   // watermark 26 s: [10, 20) fired
        bid(7, 7, 100, 12_000), // late for the MAX, but joins nothing (max of [10, 20) is 9)
    ]);
    let a = q7(&t);
    assert_eq!(a.late, [bid(7, 7, 100, 12_000)]);
    let got: Vec<(i64, u64)> = a
        .results
        .iter()
        .map(|r| (r.window.end, r.auction))
        .collect();
    assert_eq!(
        got,
        [
            (10_000, 2),
            (10_000, 3),
            (10_000, 4),
            (20_000, 4),
            (40_000, 6)
        ]
    );
    // A late bid at a window's maximum still joins (the join side drops nothing).
    let t = Timeline::new([
        bid(1, 1, 9, 1_000),
        bid(2, 1, 1, 30_000),
        bid(3, 1, 9, 2_000),
    ]);
    let a = q7(&t);
    assert_eq!(a.late, [bid(3, 1, 9, 2_000)]);
    assert_eq!(
        a.results.iter().map(|r| r.auction).collect::<Vec<_>>(),
        [1, 3, 2]
    );
}

#[test]
fn q8_joins_persons_and_sellers_of_the_same_window() {
    let t = Timeline::new([
        person(1, "Ann", "OR", 1_000),
        auction(10, 1, 10, 2_000, 9_000),
        auction(11, 1, 10, 3_000, 9_000), // twice: one row
        person(2, "Bob", "OR", 4_000),
        auction(12, 2, 10, 12_000, 19_000), // next window: no match
        person(3, "Cy", "OR", 30_000),      // watermark 26 s
        auction(13, 3, 10, 30_500, 39_000),
        person(4, "Di", "OR", 5_000),     // late
        auction(14, 4, 10, 5_500, 9_000), // late
    ]);
    let a = q8(&t);
    assert_eq!(
        a.results,
        [
            NewUser {
                window: w(0, 10_000),
                id: 1,
                name: "Ann".into()
            },
            NewUser {
                window: w(30_000, 40_000),
                id: 3,
                name: "Cy".into()
            },
        ]
    );
    assert_eq!(a.late.len(), 2);
}

#[test]
fn q11_merges_touching_sessions_and_drops_bids_of_fired_ones() {
    let t = Timeline::new([
        bid(1, 1, 1, 0),
        bid(1, 1, 1, 10_000), // exactly the gap: the same session
        bid(1, 2, 1, 5_000),
        bid(1, 1, 1, 40_000), // watermark 36 s: bidder 1's [0, 20) and bidder 2's fire
        bid(1, 1, 1, 15_000), // its session [15, 25) has fired: late
        bid(1, 1, 1, 27_000), // [27, 37) is still open (max timestamp 36.999 s > 36 s)
        bid(1, 1, 1, 31_000), // and bridges to 27 s
    ]);
    let a = q11(&t);
    assert_eq!(a.late, [bid(1, 1, 1, 15_000)]);
    assert_eq!(
        a.results,
        [
            BidderSession {
                bidder: 1,
                window: w(0, 20_000),
                bid_count: 2
            },
            BidderSession {
                bidder: 1,
                window: w(27_000, 50_000),
                bid_count: 3
            },
            BidderSession {
                bidder: 2,
                window: w(5_000, 15_000),
                bid_count: 1
            },
        ]
    );
}

#[test]
fn q11_a_bid_between_two_sessions_merges_them() {
    let t = Timeline::from_elements(vec![
        Element::Event(bid(1, 1, 1, 0)),
        Element::Event(bid(1, 1, 1, 18_000)),
        Element::Event(bid(1, 1, 1, 9_000)),
    ]);
    let a = q11(&t);
    assert_eq!(
        a.results,
        [BidderSession {
            bidder: 1,
            window: w(0, 28_000),
            bid_count: 3
        }]
    );
}

#[test]
fn explicit_watermarks_decide_lateness() {
    let t = Timeline::from_elements(vec![
        Element::Watermark(20_000),
        Element::Event(bid(1, 1, 1, 5_000)),
        Element::Watermark(1_000), // does not go back
        Element::Event(bid(1, 1, 1, 6_000)),
    ]);
    assert_eq!(q7(&t).late.len(), 2);
    assert_eq!(q0(&t).results.len(), 2);
}

#[test]
fn over_generated_events_the_references_agree_with_each_other() {
    let t = Timeline::new(super::super::GeneratorConfig::new(30_000).events());
    let bids = q0(&t).results.len();
    assert_eq!(q1(&t).results.len(), bids);
    let q11 = q11(&t);
    assert_eq!(
        q11.results.iter().map(|s| s.bid_count).sum::<u64>(),
        bids as u64
    );
    // In order: nothing is late.
    for late in [q5(&t).late, q6(&t).late, q7(&t).late, q8(&t).late, q11.late] {
        assert!(late.is_empty());
    }
    assert!(!q3(&t).results.is_empty());
    assert!(!q8(&t).results.is_empty());
}
