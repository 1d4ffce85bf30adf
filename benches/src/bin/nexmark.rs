//! `nexmark`: the Nexmark queries of `weir_nexmark` over the suite's generator, each into
//! a blackhole sink (a count and an order-independent checksum), one JSON line per query:
//!
//! `{"query", "events", "parallelism", "seconds", "events_per_sec", "cores",
//!   "events_per_sec_per_core", "results", "checksum", "late_dropped", "checkpoints"}`
//!
//! (q5's lines also name its window: `q5_size_ms`, `q5_slide_ms`; with `--verify`, `verified`
//! says whether count and checksum equal the sequential reference's.)
//!
//! `seconds` is the job's wall time (from `execute` to its end); `cores` is the process's
//! CPU time over that wall time (user + system of every thread, from `/proc/self/stat`), as
//! Nexmark counts cores; `events_per_sec_per_core` is `events_per_sec / cores`.
//!
//! `cargo run --release -p weir-benches --bin nexmark -- --query all --events 1000000 --parallelism 2`

use std::time::{Duration, Instant};

use clap::Parser;
use weir::{Env, EnvConfig};
use weir_nexmark::queries::{self, Query, QueryOptions, QueryVisitor};
use weir_nexmark::reference::Timeline;
use weir_nexmark::{Blackhole, GeneratorConfig};

#[derive(Parser, Clone)]
struct Args {
    /// `all`, or query names separated by commas (`q0,q5`).
    #[arg(long, default_value = "all")]
    query: String,
    /// Events in total, over all source subtasks.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Events per second of event time (the suite's `first-event-rate`; Flink's run: 10M).
    #[arg(long, default_value_t = weir_nexmark::DEFAULT_FIRST_EVENT_RATE)]
    first_event_rate: u64,
    /// Checkpoint this often (off by default).
    #[arg(long)]
    checkpoint_interval_ms: Option<u64>,
    /// q5's sliding window size, ms.
    #[arg(long, default_value_t = weir_nexmark::reference::Q5_SIZE_MS)]
    q5_size_ms: i64,
    /// q5's slide, ms.
    #[arg(long, default_value_t = weir_nexmark::reference::Q5_SLIDE_MS)]
    q5_slide_ms: i64,
    /// Records per batch (default: the framework's).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Also compute each query's sequential reference and say whether the blackhole's count
    /// and checksum equal it (not timed; needs the events in memory).
    #[arg(long)]
    verify: bool,
}

/// CPU seconds this process has used (user + system, all threads): `/proc/self/stat`'s
/// `utime` and `stime`, in clock ticks of `USER_HZ` (100 on Linux).
fn cpu_seconds() -> f64 {
    const USER_HZ: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line (proc(5)): 11 and 12 after the name.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / USER_HZ
}

/// Runs one query and prints its line.
struct Run<'a> {
    args: &'a Args,
}

impl QueryVisitor for Run<'_> {
    type Output = Result<(), String>;

    fn visit<Q: Query>(self, query: Q) -> Result<(), String> {
        let args = self.args;
        let config = GeneratorConfig::new(args.events).with_first_event_rate(args.first_event_rate);
        let mut cfg = EnvConfig::default();
        cfg.default_parallelism = args.parallelism;
        if let Some(b) = args.batch_size {
            cfg.batch_size = b;
        }
        let dir = std::env::temp_dir().join(format!(
            "weir-nexmark-{}-{}",
            std::process::id(),
            query.name()
        ));
        if let Some(ms) = args.checkpoint_interval_ms {
            cfg.checkpoint.interval = Some(Duration::from_millis(ms));
            cfg.checkpoint.directory = dir.clone();
        }
        let env = Env::with_config(cfg);
        let hole = Blackhole::new();
        hole.attach(query.build(queries::source(&env, &config)))
            .uid("blackhole");
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let result = env
            .execute(query.name())
            .map_err(|e| format!("{}: {e}", query.name()))?;
        let seconds = t0.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        let _ = std::fs::remove_dir_all(&dir);
        let totals = hole.totals();
        let events_per_sec = args.events as f64 / seconds;
        let cores = cpu / seconds;
        let mut line = serde_json::json!({
            "query": query.name(),
            "events": args.events,
            "parallelism": args.parallelism,
            "seconds": seconds,
            "events_per_sec": events_per_sec.round(),
            "cores": (cores * 1000.0).round() / 1000.0,
            "events_per_sec_per_core": if cores > 0.0 { (events_per_sec / cores).round() } else { 0.0 },
            "results": totals.results,
            "checksum": format!("{:016x}", totals.checksum),
            "late_dropped": query.late_dropped(&result),
            "checkpoints": result.checkpoints.as_ref().map_or(0, |c| c.number_of_completed_checkpoints),
        });
        if query.name() == "q5" {
            line["q5_size_ms"] = args.q5_size_ms.into();
            line["q5_slide_ms"] = args.q5_slide_ms.into();
        }
        if args.verify {
            let expected = query.reference(&Timeline::new(config.events())).totals();
            line["verified"] = (expected == totals).into();
        }
        println!("{line}");
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let names = queries::resolve(&args.query)?;
    let options = QueryOptions {
        q5_size_ms: args.q5_size_ms,
        q5_slide_ms: args.q5_slide_ms,
    };
    for name in names {
        queries::visit_with(name, &options, Run { args: &args })??;
    }
    Ok(())
}
