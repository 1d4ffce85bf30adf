//! Event time under many seeds (#19, acceptance 1): per seed, a small Nexmark event set
//! (random size, density, base time and proportions), shuffled within the 4 s bound and
//! beyond it (`common/shuffled.rs`: the late set cannot depend on timing), every implemented
//! query in one job at a random parallelism of 1, 2 or 4, with a random fault: none, a
//! restart from a checkpoint taken mid-window (after a panic of a random query's main
//! operator at its first record after it, or at its snapshot of the next checkpoint), a
//! stop with a savepoint mid-window and a restore, or the promotion of a random query's main
//! operator's buffer-queue backup mid-window. Each query's results must equal its
//! sequential reference per key per window (nothing missing or twice), and its late records
//! the reference's.
//!
//! 100 seeds by default; `WEIR_SEEDS=1000` runs more, `WEIR_SEED=17` just one (a failure
//! names its seed). Faults and checks wait on events (the source's hold, the watermark in
//! the job's metrics, a checkpoint completed, a savepoint taken), never on time.

mod common;
#[path = "common/shuffled.rs"]
mod shuffled;

use std::collections::BTreeMap;
use std::time::Instant;

use shuffled::Fault;
use weir_examples::rng::SplitMix64;
use weir_nexmark::GeneratorConfig;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// Seed `seed`'s run: the generator's settings, the split, the parallelism and the fault.
fn case(seed: u64, queries: usize) -> (GeneratorConfig, f64, f64, usize, Fault) {
    let mut r = SplitMix64::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xe7e7);
    let events = r.range(300, 900);
    // 10 to 40 events a second of event time: part 1 spans 2 to 60 s.
    let rate = r.range(10, 40);
    let mut config = GeneratorConfig::new(events)
        .with_first_event_rate(rate)
        .with_base_time(1_600_000_000_000 + r.below(100_000));
    if r.below(2) == 0 {
        config = config.with_proportions(2, 3, 5);
    }
    let part1 = 0.3 + 0.4 * r.unit();
    let behind = 0.02 + 0.2 * r.unit();
    let p = [1, 2, 4][r.below(3) as usize];
    let at = r.below(queries as u64) as usize;
    let fault = match r.below(5) {
        0 => Fault::None,
        1 => Fault::PanicAtRecord(at),
        2 => Fault::PanicAtSnapshot(at),
        3 => Fault::Promote(at),
        _ => Fault::Savepoint,
    };
    (config, part1, behind, p, fault)
}

#[test]
fn every_query_equals_its_reference_over_many_seeds() {
    weir_testing::quiet_injected_panics();
    let names = shuffled::implemented();
    let seeds: Vec<u64> = match env_u64("WEIR_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("WEIR_SEEDS").unwrap_or(100)).collect(),
    };
    let start = Instant::now();
    let mut late: BTreeMap<&str, u64> = BTreeMap::new();
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    for &seed in &seeds {
        let (config, part1, behind, p, fault) = case(seed, names.len());
        let input = shuffled::input(&config, seed, part1, behind);
        let outcome = shuffled::run(&input, p, fault, &names).unwrap_or_else(|e| {
            panic!(
                "seed {seed} (rerun with WEIR_SEED={seed}): p={p}, {fault:?}, {} events, \
                 part 2 at {}, {} behind, {config:?}: {e}",
                input.events.len(),
                input.part2,
                input.behind.len()
            )
        });
        for (q, l) in outcome.late {
            *late.entry(q).or_default() += l.reference;
        }
        let kind = match fault {
            Fault::PanicAtRecord(_) => "panic at a record".to_owned(),
            Fault::PanicAtSnapshot(_) => "panic at a snapshot".to_owned(),
            Fault::Promote(_) => "promote".to_owned(),
            f => format!("{f:?}").to_lowercase(),
        };
        *faults.entry(format!("{kind} p={p}")).or_default() += 1;
    }
    println!(
        "{} seeds in {:.1} s; runs {faults:?}; reference's late records per query {late:?}",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    if seeds.len() >= 20 {
        // The seeds cover every fault at every parallelism, and late records in every
        // windowed query.
        assert_eq!(faults.len(), 15, "{faults:?}");
        for q in ["q5", "q7", "q8", "q11"] {
            assert!(late.get(q).copied().unwrap_or(0) > 0, "{q}: {late:?}");
        }
    }
}
