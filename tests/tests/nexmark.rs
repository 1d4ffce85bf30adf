//! The Nexmark queries on Weir equal their sequential references (`weir_nexmark::reference`)
//! over generated events: every result once, nothing missing, at parallelism 1, 2 and 4, for
//! several generator settings and seeds, and after a fault that makes the job restart from a
//! checkpoint. The blackhole sink's count and checksum equal the reference's too.
//!
//! Every implemented query of `weir_nexmark::queries::QUERIES` is checked: a query added
//! there is checked here with no change to this file.
//!
//! The fault runs wait on events, never on time: each source subtask emits half of its
//! events, then holds (idle) until a checkpoint has completed; the fault fires at the first
//! batch after that checkpoint, so the job always restores one.
//!
//! And every query over the generated events shuffled within the 4 s bound and beyond it
//! (`common/shuffled.rs`: the late set cannot depend on timing), with no fault, after a
//! restart from a checkpoint taken mid-window, and after a stop with a savepoint mid-window
//! and a restore, at parallelism 1, 2 and 4.

mod common;
#[path = "common/shuffled.rs"]
mod shuffled;

use std::collections::HashSet;
use std::time::Duration;

use shuffled::{implemented, Gate};
use weir::source::{Source, SourceContext, SourceStatus, SourceWaker};
use weir::{Env, EnvConfig, RestartStrategy, SourceError};
use weir_nexmark::queries::{self, Query, QueryVisitor, QUERIES, SOURCE_UID};
use weir_nexmark::reference::Timeline;
use weir_nexmark::{Blackhole, Event, GeneratorConfig, NexmarkSource};
use weir_testing::{Fault, FaultKind, FaultPlan};

/// Generator settings the queries are checked on: the suite's, a sparser timeline (events
/// spread over seconds, so windows differ), other proportions, and other seeds.
fn settings() -> Vec<GeneratorConfig> {
    vec![
        GeneratorConfig::new(6_000),
        GeneratorConfig::new(4_999)
            .with_first_event_rate(1_000)
            .with_base_time(1_500_000_000_123)
            .with_first_event_id(1_000_000),
        GeneratorConfig::new(3_001)
            .with_first_event_rate(100)
            .with_proportions(2, 3, 5)
            .with_first_event_id(70),
    ]
}

/// A Nexmark source that holds (idle) once half of its share is out, until its gate opens.
struct Held {
    inner: NexmarkSource,
    /// Hold while this many events or fewer remain.
    hold_at: u64,
    gate: Gate,
}

impl Source<Event> for Held {
    fn set_waker(&mut self, waker: SourceWaker) {
        self.gate.register(waker);
    }
    fn poll_batch(
        &mut self,
        out: &mut Vec<Event>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        if self.gate.is_open() {
            return self.inner.poll_batch(out, max);
        }
        let remaining = self.inner.remaining();
        if remaining <= self.hold_at {
            return Ok(SourceStatus::Idle {
                until: Some(Duration::from_millis(50)),
            });
        }
        let n = (remaining - self.hold_at).min(max as u64) as usize;
        self.inner.poll_batch(out, n)?;
        Ok(SourceStatus::More)
    }
    fn position(&self) -> Option<Vec<u8>> {
        self.inner.position()
    }
    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        self.inner.seek(position)
    }
}

/// Where a fault run fails.
#[derive(Debug, Clone, Copy)]
enum FaultAt {
    /// The query's first operator.
    Query,
    /// The source.
    Source,
    /// The collect sink.
    Sink,
}

/// Runs a query and checks it against its reference.
struct Check {
    config: GeneratorConfig,
    parallelism: usize,
    fault: Option<FaultAt>,
}

impl QueryVisitor for Check {
    type Output = ();

    fn visit<Q: Query>(self, query: Q) {
        let Check {
            config,
            parallelism,
            fault,
        } = self;
        let what = format!(
            "{} at parallelism {parallelism} over {config:?}, fault {fault:?}",
            query.name()
        );
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = parallelism;
        cfg.batch_size = 64;
        // Only the injected fault restarts the job: a subtask slowed by a busy machine is not
        // declared hung.
        cfg.heartbeat_timeout = common::TIMEOUT;
        let dir = common::TempDir::new("nexmark");
        let plan = fault.map(|at| {
            let uid = match at {
                FaultAt::Query => query.operator_uids()[0],
                FaultAt::Source => SOURCE_UID,
                FaultAt::Sink => "collect",
            };
            FaultPlan::new(vec![
                Fault::new(uid, FaultKind::Panic, 0).after_checkpoints(1)
            ])
        });
        let gate = Gate::default();
        if let Some(plan) = &plan {
            cfg.checkpoint.interval = Some(Duration::from_millis(10));
            cfg.checkpoint.directory = dir.path().to_owned();
            cfg.restart = Some(RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::ZERO,
            });
            cfg.faults = plan.clone();
            weir_testing::quiet_injected_panics();
        }
        let env = Env::with_config(cfg);
        let events = if fault.is_some() {
            let (c, g) = (config.clone(), gate.clone());
            env.add_source_with_watermarks(
                "nexmark",
                move |cx: SourceContext| {
                    let inner = c.source(cx).map_err(|e| SourceError::Setup {
                        source: Box::new(e),
                    })?;
                    let hold_at = inner.remaining() / 2;
                    Ok(Held {
                        inner,
                        hold_at,
                        gate: g.clone(),
                    })
                },
                weir_nexmark::watermarks(),
            )
            .uid(SOURCE_UID)
        } else {
            queries::source(&env, &config)
        };
        let out = query.build(events);
        let hole = Blackhole::new();
        hole.attach(out.clone()).uid("blackhole");
        let collected = weir::CollectSink::default();
        out.collect_into(&collected).uid("collect");
        let job = env.start(query.name()).expect("the job starts");
        if fault.is_some() {
            weir_testing::wait_for_checkpoint(&job, 1, common::TIMEOUT)
                .unwrap_or_else(|e| panic!("{what}: no checkpoint: {e}"));
            gate.open();
        }
        let result = common::within_timeout(move || job.wait())
            .unwrap_or_else(|e| panic!("{what}: the job failed: {e}"));

        let expected = query.reference(&Timeline::new(config.events()));
        shuffled::assert_equals_reference(&what, &query, collected.take(), &expected, &result);
        assert_eq!(hole.totals(), expected.totals(), "{what}: blackhole totals");
        let source_out: u64 = result.operator(SOURCE_UID).map_or(0, |o| o.records_out);
        if let Some(plan) = plan {
            assert_eq!(plan.fired(), 1, "{what}: the fault fired");
            let stats = result.checkpoints.expect("checkpoint stats");
            assert!(stats.num_restarts >= 1, "{what}: restarted");
            assert!(
                stats.last_restored_checkpoint_id.is_some(),
                "{what}: restored a checkpoint"
            );
            assert!(source_out >= config.events, "{what}: source records");
        } else {
            assert_eq!(source_out, config.events, "{what}: source records");
        }
    }
}

#[test]
fn every_query_equals_its_reference_at_parallelism_1_2_4() {
    for name in implemented() {
        for config in settings() {
            for parallelism in [1, 2, 4] {
                let check = Check {
                    config: config.clone(),
                    parallelism,
                    fault: None,
                };
                queries::visit(name, check).expect("an implemented query");
            }
        }
    }
}

#[test]
fn every_query_equals_its_reference_after_restarting_from_a_checkpoint() {
    let places = [FaultAt::Query, FaultAt::Source, FaultAt::Sink];
    for (k, name) in implemented().into_iter().enumerate() {
        for (j, parallelism) in [1usize, 2, 4].into_iter().enumerate() {
            let config = settings()[(k + j) % 3].clone();
            let check = Check {
                config,
                parallelism,
                fault: Some(places[(k + j) % places.len()]),
            };
            queries::visit(name, check).expect("an implemented query");
        }
    }
}

#[test]
fn the_references_see_the_events_the_parallel_sources_emit() {
    // The multiset of events is the same at every parallelism: the sources interleave one
    // timeline.
    let config = GeneratorConfig::new(2_000).with_first_event_id(500);
    let mut expected: Vec<String> = config
        .events()
        .map(|e| serde_json::to_string(&e).unwrap())
        .collect();
    expected.sort();
    for parallelism in [1, 3] {
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = parallelism;
        let env = Env::with_config(cfg);
        let all = queries::source(&env, &config).collect();
        env.execute("nexmark-events").unwrap();
        let mut got: Vec<String> = all
            .take()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, expected, "parallelism {parallelism}");
    }
}

#[test]
fn unknown_and_unimplemented_queries_are_named() {
    let err = queries::resolve("q0,q42").unwrap_err().to_string();
    assert!(err.contains("q42"), "{err}");
    let not_yet: Vec<&str> = QUERIES
        .iter()
        .filter(|q| !q.implemented)
        .map(|q| q.name)
        .collect();
    if let Some(first) = not_yet.first() {
        let err = queries::resolve("all").unwrap_err().to_string();
        assert!(err.contains(&not_yet.join(", ")), "{err}");
        assert!(err.contains("not implemented"), "{err}");
        assert!(queries::resolve(first).is_err());
    }
    assert_eq!(
        queries::resolve(&implemented().join(",")).unwrap(),
        implemented()
    );
}

#[test]
fn a_bad_generator_setting_fails_the_job_without_restarts() {
    let mut cfg = EnvConfig::default();
    cfg.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    let env = Env::with_config(cfg);
    let config = GeneratorConfig::new(10).with_proportions(1, 0, 1);
    queries::source(&env, &config).discard();
    let err = env.execute("nexmark-bad").unwrap_err().to_string();
    assert!(err.contains("auction_proportion"), "{err}");
}

/// Counts records (a window aggregation for the watermark test).
#[derive(Clone)]
struct Count;

impl weir::window::AggregateFunction<i64, u64> for Count {
    type Acc = u64;
    fn add(&self, n: &mut u64, _t: i64) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: &u64) {
        *n += other;
    }
    fn result(&self, n: &u64) -> u64 {
        *n
    }
}

#[test]
fn the_source_s_watermarks_fire_event_time_windows_with_nothing_late() {
    // 200 events/s of event time: 3,000 events span 15 s of 1 s windows. The source's
    // watermarks (each subtask's max - 4 s, merged as the minimum) never make one of its
    // own records late, at any parallelism.
    let config = GeneratorConfig::new(3_000).with_first_event_rate(200);
    let mut expected = std::collections::BTreeMap::<i64, u64>::new();
    for e in config.events() {
        let t = weir_nexmark::event_time(&e);
        *expected.entry(t - t.rem_euclid(1_000)).or_default() += 1;
    }
    let expected: Vec<(i64, u64)> = expected.into_iter().collect();
    for parallelism in [1, 2, 4] {
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = parallelism;
        cfg.batch_size = 16;
        let env = Env::with_config(cfg);
        let counts = queries::source(&env, &config)
            .map(|e: Event| weir_nexmark::event_time(&e))
            .with_timestamps(|t: &i64| *t)
            .key_by(|_: &i64| 0u8)
            .window(weir::window::TumblingEventTimeWindows::of(
                Duration::from_secs(1),
            ))
            .aggregate_window(Count, |_: &u8, f: &weir::window::Fired, n| {
                (f.window.start, n)
            })
            .uid("per-second")
            .collect();
        let result = env.execute("nexmark-watermarks").unwrap();
        let mut got = counts.take();
        got.sort();
        assert_eq!(got, expected, "parallelism {parallelism}");
        let op = result.operator("per-second").unwrap();
        assert_eq!(op.late_records_dropped, 0, "parallelism {parallelism}");
    }
}

#[test]
fn every_setting_s_auction_and_person_ids_are_unique() {
    // The joins (q3, q4, q6, q8) take an id for one auction or person; a seed off the
    // generator's cycle would repeat them, and is refused.
    for config in settings() {
        let (mut auctions, mut persons) = (HashSet::new(), HashSet::new());
        for e in config.events() {
            match e {
                Event::Auction(a) => assert!(auctions.insert(a.id), "{config:?}: auction {}", a.id),
                Event::Person(p) => assert!(persons.insert(p.id), "{config:?}: person {}", p.id),
                Event::Bid(_) => {}
            }
        }
        assert!(!auctions.is_empty() && !persons.is_empty());
    }
    let off_cycle = GeneratorConfig::new(100).with_first_event_id(1_000_003);
    let err = off_cycle.validate().unwrap_err().to_string();
    assert!(err.contains("first_event_id"), "{err}");
}

#[test]
fn q5_with_other_windows_equals_its_reference() {
    // The 60 s / 1 s, and a size that is no multiple of the slide.
    let config = settings()[2].clone();
    for (size, slide) in [(60_000, 1_000), (5_000, 2_000)] {
        let options = queries::QueryOptions {
            q5_size_ms: size,
            q5_slide_ms: slide,
        };
        for parallelism in [1, 2, 4] {
            let check = Check {
                config: config.clone(),
                parallelism,
                fault: None,
            };
            queries::visit_with("q5", &options, check).expect("q5");
        }
    }
}

fn person(id: usize, name: &str, t: u64) -> Event {
    Event::Person(weir_nexmark::Person {
        id,
        name: name.into(),
        email_address: String::new(),
        credit_card: String::new(),
        city: "Bend".into(),
        state: "OR".into(),
        date_time: t,
        extra: String::new(),
    })
}

fn auction(id: usize, seller: usize, t: u64, expires: u64) -> Event {
    Event::Auction(weir_nexmark::Auction {
        id,
        item_name: String::new(),
        description: String::new(),
        initial_bid: 1,
        reserve: 1,
        date_time: t,
        expires,
        seller,
        category: 10,
        extra: String::new(),
    })
}

fn bid(auction: usize, bidder: usize, price: usize, t: u64) -> Event {
    Event::Bid(weir_nexmark::Bid {
        auction,
        bidder,
        price,
        channel: String::new(),
        url: String::new(),
        date_time: t,
        extra: format!("x{t}"),
    })
}

/// Runs every query over `events` in this order, one record per batch with a watermark
/// after each (the reference's timeline), and compares results and late records.
struct ByHand(Vec<Event>);

impl QueryVisitor for ByHand {
    type Output = ();
    fn visit<Q: Query>(self, query: Q) {
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = 1;
        cfg.batch_size = 1;
        let env = Env::with_config(cfg);
        let events = env
            .from_collection(self.0.clone())
            .assign_timestamps_and_watermarks(
                weir_nexmark::watermarks().with_watermark_interval(Duration::ZERO),
            );
        let out = query.build(events).collect();
        let result = env.execute(query.name()).unwrap();
        let expected = query.reference(&Timeline::new(self.0));
        let mut got = out.take();
        got.sort();
        if query.name() == "q7" && !expected.late.is_empty() {
            // Known difference (see `Q7`): the suite's join side still matches a late bid at
            // its window's maximum; Weir's q7 drops a late bid from both. Everything else
            // is there.
            let mut missing = expected.results.clone();
            for r in &got {
                let i = missing.iter().position(|m| m == r);
                let i = i.unwrap_or_else(|| panic!("q7: {r:?} is not in the reference"));
                missing.remove(i);
            }
            for m in missing {
                let row = format!("{m:?}");
                let late_bid = expected.late.iter().any(|e| match e {
                    Event::Bid(b) => row.contains(&format!(
                        "auction: {}, price: {}, bidder: {}, date_time: {},",
                        b.auction, b.price, b.bidder, b.date_time
                    )),
                    _ => false,
                });
                assert!(late_bid, "q7: {row} is missing and not a late bid");
            }
        } else {
            assert_eq!(got, expected.results, "{}", query.name());
        }
        assert_eq!(
            query.late_dropped(&result),
            expected.late_dropped() as u64,
            "{}: late records",
            query.name()
        );
    }
}

#[test]
fn every_query_equals_its_reference_on_timelines_made_by_hand() {
    let timelines = vec![
        // q7: bids at a window's end join it (BETWEEN), a late bid.
        vec![
            bid(1, 1, 5, 1_000),
            bid(2, 2, 9, 2_000),
            bid(3, 3, 9, 9_999),
            bid(4, 4, 9, 10_000),
            bid(5, 5, 4, 11_000),
            bid(6, 6, 1, 30_000),
            bid(7, 7, 3, 12_000),
        ],
        // q11: sessions that touch merge, a bid of a fired session is late.
        vec![
            bid(1, 1, 1, 0),
            bid(1, 1, 1, 10_000),
            bid(1, 2, 1, 5_000),
            bid(1, 1, 1, 40_000),
            bid(1, 1, 1, 15_000),
            bid(1, 1, 1, 27_000),
            bid(1, 1, 1, 31_000),
        ],
        // q8 and q3: persons and auctions in and out of a window, late ones.
        vec![
            person(1, "Ann", 1_000),
            auction(10, 1, 2_000, 9_000),
            auction(11, 1, 3_000, 9_000),
            person(2, "Bob", 4_000),
            auction(12, 2, 12_000, 19_000),
            person(3, "Cy", 30_000),
            auction(13, 3, 30_500, 39_000),
            person(4, "Di", 5_000),
            auction(14, 4, 5_500, 9_000),
        ],
        // q6 and q4: a bid before its auction counts, bids and an auction after the close
        // are late.
        vec![
            bid(1, 1, 50, 1_500),
            auction(1, 7, 1_000, 2_000),
            bid(1, 1, 60, 1_900),
            bid(2, 1, 1, 30_000),
            bid(1, 1, 80, 1_600),
            auction(3, 7, 1_000, 2_000),
            bid(3, 1, 5, 1_500),
        ],
        // q5: a bid whose windows have fired is late, one still counts in a later window.
        vec![
            bid(1, 1, 1, 1_000),
            bid(2, 1, 1, 3_000),
            bid(2, 1, 1, 3_500),
            bid(3, 1, 1, 19_000),
            bid(4, 1, 1, 5_000),
            bid(5, 1, 1, 7_000),
        ],
    ];
    for events in timelines {
        for name in implemented() {
            queries::visit(name, ByHand(events.clone())).expect("an implemented query");
        }
    }
}

/// Generator settings for the shuffled runs: sparse event time (10 ms or 20 ms an event),
/// so part 1 spans tens of seconds, several windows of every query.
fn shuffled_settings() -> Vec<GeneratorConfig> {
    vec![
        GeneratorConfig::new(4_000).with_first_event_rate(100),
        GeneratorConfig::new(3_001)
            .with_first_event_rate(50)
            .with_proportions(2, 3, 5)
            .with_base_time(1_500_000_000_123)
            .with_first_event_id(70),
    ]
}

/// Runs every query over `config`'s events shuffled with `seed` and checks them; returns
/// the reference's late records of q11 (that the input has late records for the other
/// windowed queries is part of the check).
fn shuffled_check(config: &GeneratorConfig, seed: u64, p: usize, fault: shuffled::Fault) -> u64 {
    let input = shuffled::input(config, seed, 0.6, 0.1);
    let names = shuffled::implemented();
    let what = format!("seed {seed}, p={p}, {fault:?}, {config:?}");
    let outcome = shuffled::run(&input, p, fault, &names).unwrap_or_else(|e| panic!("{what}: {e}"));
    let late = |q: &str| {
        outcome
            .late
            .iter()
            .find(|(n, _)| *n == q)
            .map_or(0, |(_, l)| l.reference)
    };
    // The input puts records behind the bound of the windowed queries. (Not always q11's:
    // a bidder's session often lasts, and a bid far behind joins it.)
    for q in ["q5", "q6", "q7", "q8"] {
        assert!(late(q) > 0, "{what}: {q} has late records");
    }
    late("q11")
}

#[test]
fn every_query_equals_its_reference_with_input_shuffled_beyond_the_bound() {
    let mut q11 = 0;
    for (k, config) in shuffled_settings().iter().enumerate() {
        for p in [1, 2, 4] {
            q11 += shuffled_check(config, 100 + k as u64, p, shuffled::Fault::None);
        }
    }
    assert!(q11 > 0, "q11 has late records");
}

#[test]
fn every_query_equals_its_reference_after_a_restart_from_a_checkpoint_mid_window() {
    weir_testing::quiet_injected_panics();
    let n = shuffled::implemented().len();
    let mut q11 = 0;
    for (k, config) in shuffled_settings().iter().enumerate() {
        for (j, p) in [1, 2, 4].into_iter().enumerate() {
            // The fault in another query's main operator each time, at a record (with the
            // rest of the job running) and at a checkpoint's snapshot (the rest of the
            // input comes once the job restored).
            let at = (3 * k + j + 3) % n;
            let seed = 200 + k as u64;
            q11 += shuffled_check(config, seed, p, shuffled::Fault::PanicAtRecord(at));
            let at = (at + 5) % n;
            q11 += shuffled_check(config, seed, p, shuffled::Fault::PanicAtSnapshot(at));
        }
    }
    assert!(q11 > 0, "q11 has late records");
}

#[test]
fn every_query_equals_its_reference_after_a_savepoint_mid_window_and_a_restore() {
    let mut q11 = 0;
    for (k, config) in shuffled_settings().iter().enumerate() {
        for p in [1, 2, 4] {
            q11 += shuffled_check(config, 300 + k as u64, p, shuffled::Fault::Savepoint);
        }
    }
    assert!(q11 > 0, "q11 has late records");
}
