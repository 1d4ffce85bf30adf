//! `pipeline`: generator of u64 0..N -> map(x*2+1) -> filter(x%3!=0) -> key_by(x%1024) running
//! count in keyed state -> discard. Prints one JSON line. The total count is checked: the
//! keyed operator's input must equal the number of generated records that pass the filter.
//!
//! `cargo run --release -p weir-benches --bin pipeline -- --records 50000000 --parallelism 1`

use clap::Parser;
use weir::{Collector, Env, EnvConfig, ValueState};

#[derive(Parser)]
struct Args {
    /// Records to generate.
    #[arg(long, default_value_t = 50_000_000)]
    records: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Turn operator chaining off.
    #[arg(long)]
    no_chaining: bool,
    /// Arbiter threads (default: the framework's, one per core). `--arbiters 1` runs the
    /// whole job on one thread: the one-core base a parallel run scales from (at p=1 with
    /// the default, the source and the keyed count already run on two threads).
    #[arg(long)]
    arbiters: Option<usize>,
    /// Capacity of each channel, in batches (default: the framework's): the window's floor,
    /// or the fixed window with `--fixed-window`.
    #[arg(long)]
    channel_capacity: Option<usize>,
    /// The adaptive window's ceiling, in batches (default: the framework's).
    #[arg(long)]
    max_channel_capacity: Option<usize>,
    /// The adaptive window's queueing-delay target, ms (default: the framework's).
    #[arg(long)]
    latency_target_ms: Option<f64>,
    /// Fix every channel's window at `--channel-capacity` (no adaptive credit).
    #[arg(long)]
    fixed_window: bool,
    /// Checkpoint the keyed counts this often (off by default).
    #[arg(long)]
    checkpoint_interval_ms: Option<u64>,
    /// Count in a derived operator's keyed `#[weir(state)]` field (`KeyedStream::apply`)
    /// instead of a `process` closure's per-key state: what moving the key's value in and
    /// out of the field costs.
    #[arg(long)]
    derived: bool,
}

/// The running count as a derived operator: a keyed `ValueState` field.
#[derive(Clone, Default, weir::Operator)]
struct Count {
    #[weir(state)]
    count: ValueState<u64>,
}

impl weir::ProcessFunction<u64, u64> for Count {
    #[inline]
    fn process(&mut self, _x: u64, _out: &mut Collector<u64>) {
        *self.count.get_or_insert_with(|| 0) += 1;
    }
}

/// The job's configuration from the flags (without checkpoints).
fn config(args: &Args) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = args.parallelism;
    cfg.batch_size = args.batch_size;
    cfg.chaining = !args.no_chaining;
    if let Some(a) = args.arbiters {
        cfg.arbiters = a;
    }
    if let Some(c) = args.channel_capacity {
        cfg.channel_capacity = c;
    }
    if let Some(c) = args.max_channel_capacity {
        cfg.max_channel_capacity = c;
    }
    if let Some(ms) = args.latency_target_ms {
        cfg.latency_target = Some(std::time::Duration::from_secs_f64(ms / 1e3));
    }
    if args.fixed_window {
        cfg.latency_target = None;
    }
    cfg
}

/// The channels' window, as the JSON line shows it.
fn window(cfg: &EnvConfig) -> String {
    match cfg.latency_target {
        Some(t) => format!(
            "adaptive {}..={} for {:?}",
            cfg.channel_capacity, cfg.max_channel_capacity, t
        ),
        None => format!("fixed {}", cfg.channel_capacity),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cfg = config(&args);
    let arbiters = cfg.arbiters;
    let channel_capacity = cfg.channel_capacity;
    let window = window(&cfg);
    let mut cfg = cfg;
    let checkpoint_dir = std::env::temp_dir().join(format!("weir-pipeline-{}", std::process::id()));
    if let Some(ms) = args.checkpoint_interval_ms {
        cfg.checkpoint.interval = Some(std::time::Duration::from_millis(ms));
        cfg.checkpoint.directory = checkpoint_dir.clone();
    }
    let env = Env::with_config(cfg);
    let keyed = env
        .generate(args.records, |i| i)
        .map(|x| x * 2 + 1)
        .filter(|x| x % 3 != 0)
        .key_by(|x: &u64| x % 1024);
    let counted = if args.derived {
        keyed.apply(Count::default())
    } else {
        keyed.process(
            |_k: &u64, count: &mut ValueState<u64>, _x: u64, _out: &mut Collector<u64>| {
                *count.get_or_insert_with(|| 0) += 1;
            },
        )
    };
    counted.uid("count").discard();
    let result = env.execute("pipeline")?;
    let _ = std::fs::remove_dir_all(&checkpoint_dir);
    let checkpoints = result
        .checkpoints
        .as_ref()
        .map_or(0, |c| c.number_of_completed_checkpoints);
    let counted = result.operator("count").map(|o| o.records_in).unwrap_or(0);
    let expected = (0..args.records).filter(|x| (x * 2 + 1) % 3 != 0).count() as u64;
    let secs = result.duration.as_secs_f64();
    // Thread hand-offs: wake-ups of every subtask from parked.
    let wakes: u64 = result.operators.iter().map(|o| o.wakes).sum();
    println!(
        "{}",
        serde_json::json!({
            "bench": "pipeline",
            "records": args.records,
            "parallelism": args.parallelism,
            "batch_size": args.batch_size,
            "chaining": !args.no_chaining,
            "arbiters": arbiters,
            "derived": args.derived,
            "channel_capacity": channel_capacity,
            "window": window,
            "wakes": wakes,
            "wakes_by_chain": result
                .operators
                .iter()
                .filter(|o| o.wakes > 0)
                .map(|o| (o.uid.clone(), o.wakes))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "wakes_per_sec": wakes as f64 / secs,
            "checkpoint_interval_ms": args.checkpoint_interval_ms,
            "checkpoints_completed": checkpoints,
            "seconds": secs,
            "records_per_sec": args.records as f64 / secs,
            "counted": counted,
            "count_ok": counted == expected,
        })
    );
    if counted != expected {
        return Err(format!("counted {counted} records, expected {expected}").into());
    }
    Ok(())
}
