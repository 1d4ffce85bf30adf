//! `etl`: the answer-cleaning job (`weir_examples::answers`) over a JSON Lines file, with
//! per-record latency. Prints one JSON line:
//!
//! ```text
//! {"bench":"etl","records":N,"parallelism":P,"seconds":..,"records_per_sec":..,
//!  "latency_p50_ms":..,"latency_p99_ms":..,"peak_rss_bytes":..,"output_lines":..}
//! ```
//!
//! ```text
//! cargo run --release -p weir-benches --bin etl -- --generate 1000000 --input /tmp/answers.jsonl
//! cargo run --release -p weir-benches --bin etl -- --input /tmp/answers.jsonl --parallelism 2 --output /tmp/etl-out
//! ```
//!
//! The graph has the operators and uids of `build_answer_cleaning` (`source`, `levels`,
//! `connect`, `flat_map`, `split`, `filter`, `map`, `sink`, `malformed`) and calls the same
//! functions (`Attach`, `clean_str`, `Cleaned::is_kept`, `format_cleaned`'s line), but every record
//! also carries the monotonic time its source batch was read (one clock read per batch), and
//! the sink is a file sink that also records `now - stamp` per record (one clock read per
//! batch) in a per-subtask histogram of 10 µs buckets, merged at the end. Latency is thus
//! source read → sink write, including queueing in channels, and is at most one batch-read
//! time pessimistic.
//!
//! Where latency comes from: at parallelism 1 the `source` subtask (reading lines into a
//! shared batch buffer: about a fifth of the job's CPU time in a `perf` profile: the read
//! system call's copy, finding newlines, UTF-8 validation, the copy into the batch) is about
//! four times as fast as its `connect` chain (parse, level, format, write: the rest, most of
//! it serde_json), so it runs ahead until the channel between them is full; from then on
//! every record waits behind a full channel, and p50 latency is about
//! `(channel_capacity + 2) * batch_size / throughput` (about 4 ms with the defaults 2 x 1024
//! at 1 M records/s). `--channel-capacity` and `--batch-size` show the effect. (As in
//! `build_answer_cleaning`, `levels` is made before `source`: subtasks are dealt to arbiter
//! threads round robin in graph order, so with two
//! arbiters `source` and `connect` run on different threads. `--arbiters` changes that.)
//!
//! At parallelism `p`, source subtask `k` reads the `k`-th byte range of the file
//! (`weir::source::jsonl`: files are split by byte range, not dealt whole), and feeds the
//! `connect` subtask of its index over a forward edge; `--rebalance` deals its lines round
//! robin instead.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use weir::sink::{Sink, SinkContext};
use weir::source::jsonl::{LinePosition, LineReader, TEXT_BATCH_BYTES};
use weir::source::text::{Text, TextBatch};
use weir::source::{Source, SourceContext, SourceStatus};
use weir::{DataStream, Env, EnvConfig, SinkError, SourceError};
use weir_benches::{clock_ns, peak_rss_bytes, LatencyHistogram};
use weir_examples::answers::{
    clean_str, levels_stream, prepare_output_dir, uid, write_answers, Attach, Cleaned, Levels,
    Tagged, DEFAULT_SEED,
};

#[derive(Parser, Debug)]
#[command(
    name = "etl",
    about = "The answer-cleaning ETL job over a JSON Lines file; prints one JSON line."
)]
struct Args {
    /// The answers (JSON Lines file or directory). With --generate, this file is written first.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// First write this many generated answers to --input.
    #[arg(long, value_name = "N")]
    generate: Option<u64>,
    /// Seed of the generated answers.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// A JSON Lines file of level thresholds (default: the built-in ones).
    #[arg(long, value_name = "FILE")]
    levels: Option<PathBuf>,
    /// Parallelism of every operator but `levels`.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Output directory (default `<temp dir>/weir-etl`).
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Records per batch (EnvConfig::batch_size; default: the framework's).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Channel capacity in batches (EnvConfig::channel_capacity; default: the framework's).
    #[arg(long)]
    channel_capacity: Option<usize>,
    /// Arbiter threads (EnvConfig::arbiters; default: the framework's, one per core).
    #[arg(long)]
    arbiters: Option<usize>,
    /// Back up `flat_map` (buffer-queue backup with the default policy): its fault-free cost.
    #[arg(long)]
    backup: bool,
    /// Rebalance the source's lines over the `connect` subtasks (default: forward, each
    /// source subtask feeding the `connect` subtask of its index).
    #[arg(long)]
    rebalance: bool,
    /// Checkpoint interval (0: no checkpoints, the default). Checkpoints go to a temporary
    /// directory, deleted at the end.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    checkpoint_interval_ms: u64,
    /// With --backup: records per batch into and out of `flat_map` (0: the job's batch size;
    /// default: the backup policy's).
    #[arg(long, value_name = "N")]
    backup_batch_size: Option<usize>,
}

/// A line with the time its batch was read.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stamped {
    t_ns: u64,
    line: Text,
}

/// `read_lines`, stamping each batch with one clock read taken before reading it. The lines
/// of a batch are copied into one buffer their [`Text`]s share (as `read_located_lines`
/// does): no allocation per line.
struct StampedLines {
    reader: LineReader,
    batch: TextBatch,
    ranges: Vec<Range<usize>>,
}

impl Source<Stamped> for StampedLines {
    fn poll_batch(
        &mut self,
        out: &mut Vec<Stamped>,
        max: usize,
    ) -> Result<SourceStatus, SourceError> {
        let t_ns = clock_ns();
        let mut status = Ok(SourceStatus::More);
        while self.ranges.len() < max && self.batch.len() < TEXT_BATCH_BYTES {
            match self.reader.next_text() {
                Ok(Some(line)) => self.ranges.push(self.batch.push(line)),
                Ok(None) => {
                    status = Ok(SourceStatus::End);
                    break;
                }
                Err(e) => {
                    status = Err(e);
                    break;
                }
            }
        }
        let buf = self.batch.share();
        out.extend(self.ranges.drain(..).map(|r| Stamped {
            t_ns,
            line: Text::new(&buf, r),
        }));
        status
    }

    fn position(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(&self.reader.position()).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        let p: LinePosition =
            serde_json::from_slice(position).map_err(|e| SourceError::BadPosition {
                message: e.to_string(),
            })?;
        self.reader.seek(p)
    }
}

/// Writes lines to `part-sink-<subtask>` (like `write_text`: each batch formatted into one
/// reused buffer, written at once) and records their latency.
struct LatencySink {
    path: PathBuf,
    out: BufWriter<File>,
    lines: Vec<u8>,
    hist: LatencyHistogram,
    merged: Arc<Mutex<(LatencyHistogram, u64)>>,
    written: u64,
}

impl LatencySink {
    fn create(
        dir: &Path,
        cx: &SinkContext,
        merged: Arc<Mutex<(LatencyHistogram, u64)>>,
    ) -> Result<Self, SinkError> {
        let path = dir.join(format!("part-{}-{}", cx.uid, cx.subtask));
        let f = File::create(&path).map_err(|source| SinkError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(LatencySink {
            path,
            out: BufWriter::with_capacity(256 * 1024, f),
            lines: Vec::new(),
            hist: LatencyHistogram::new(),
            merged,
            written: 0,
        })
    }

    fn io(&self, source: std::io::Error) -> SinkError {
        SinkError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl Sink<(u64, Cleaned)> for LatencySink {
    fn write_batch(&mut self, batch: &mut Vec<(u64, Cleaned)>) -> Result<(), SinkError> {
        self.lines.clear();
        for (_, c) in batch.iter() {
            // `format_cleaned`'s line (`Cleaned`'s `Display`); a `Vec` cannot fail.
            let _ = writeln!(self.lines, "{c}");
        }
        let r = self.out.write_all(&self.lines);
        r.map_err(|e| self.io(e))?;
        let now = clock_ns();
        // A batch has few distinct stamps (one per source batch): record runs at once.
        let mut run: Option<(u64, u64)> = None;
        for (t, _) in batch.iter() {
            run = match run {
                Some((rt, n)) if rt == *t => Some((rt, n + 1)),
                Some((rt, n)) => {
                    self.hist.record_n(now.saturating_sub(rt), n);
                    Some((*t, 1))
                }
                None => Some((*t, 1)),
            };
        }
        if let Some((rt, n)) = run {
            self.hist.record_n(now.saturating_sub(rt), n);
        }
        self.written += batch.len() as u64;
        batch.clear();
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.out.flush().map_err(|e| self.io(e))?;
        self.out.get_ref().sync_all().map_err(|e| self.io(e))?;
        let mut m = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        m.0.merge(&self.hist);
        m.1 += self.written;
        Ok(())
    }
}

/// The answer-cleaning graph of `build_answer_cleaning`, with stamped records.
fn build(env: &Env, args: &Args, out_dir: &Path, merged: Arc<Mutex<(LatencyHistogram, u64)>>) {
    let p = args.parallelism;
    let levels = match &args.levels {
        Some(f) => Levels::File(f.clone()),
        None => Levels::Builtin,
    };
    let levels = levels_stream(env, &levels);
    let path = args.input.clone();
    let lines: DataStream<Stamped> = env
        .add_source("read_lines", move |cx: SourceContext| {
            LineReader::new(&path, cx).map(|reader| StampedLines {
                reader,
                batch: TextBatch::default(),
                ranges: Vec::new(),
            })
        })
        .uid(uid::SOURCE)
        .set_parallelism(p);
    // Every source subtask reads its byte range of the file: a forward edge keeps each
    // `connect` subtask fed (`--rebalance` spreads the lines round robin instead).
    let lines = if p > 1 && args.rebalance {
        lines.rebalance()
    } else {
        lines
    };
    let flat_mapped = lines
        .connect_broadcast(levels)
        .broadcast_first()
        .process(Attach)
        .uid(uid::CONNECT)
        .name("connect")
        .set_parallelism(p)
        .flat_map(|t: Tagged<Stamped>| {
            let stamp = t.line.t_ns;
            std::iter::once(clean_str(&t.line.line, &t.levels).map(|c| (stamp, c)))
        })
        .uid(uid::FLAT_MAP)
        .set_parallelism(p);
    let flat_mapped = if args.backup {
        let mut policy = weir::BackupPolicy::default();
        if let Some(n) = args.backup_batch_size {
            policy = policy.batch_size((n > 0).then_some(n));
        }
        flat_mapped.with_backup_policy(policy)
    } else {
        flat_mapped
    };
    let (cleaned, malformed) = flat_mapped.split();
    malformed
        .write_jsonl(out_dir)
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    let dir = out_dir.to_owned();
    cleaned
        .uid(uid::SPLIT)
        .set_parallelism(p)
        .filter(|(_, c): &(u64, Cleaned)| c.is_kept())
        .uid(uid::FILTER)
        .set_parallelism(p)
        // The sink formats `format_cleaned`'s line itself, into its batch buffer.
        .map(|(t, c): (u64, Cleaned)| (t, c))
        .uid(uid::MAP)
        .set_parallelism(p)
        .add_sink("latency_sink", move |cx| {
            LatencySink::create(&dir, cx, merged.clone())
        })
        .uid(uid::SINK)
        .set_parallelism(p);
}

/// Writes the input if asked to, checks it is there, and empties the output directory; the
/// output directory.
fn prepare(args: &Args) -> Result<PathBuf, String> {
    if let Some(n) = args.generate {
        let t = Instant::now();
        write_answers(&args.input, n, args.seed)
            .map_err(|e| format!("cannot write {}: {e}", args.input.display()))?;
        eprintln!(
            "etl: wrote {n} generated answers (seed {}) to {} in {:.2} s",
            args.seed,
            args.input.display(),
            t.elapsed().as_secs_f64()
        );
    }
    std::fs::metadata(&args.input)
        .map_err(|e| format!("cannot read input {}: {e}", args.input.display()))?;
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("weir-etl"));
    prepare_output_dir(&out_dir)
        .map_err(|e| format!("cannot prepare output directory {}: {e}", out_dir.display()))?;
    Ok(out_dir)
}

fn run(args: Args) -> Result<(), String> {
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    let out_dir = prepare(&args)?;

    let mut cfg = EnvConfig::default();
    if let Some(b) = args.batch_size {
        cfg.batch_size = b;
    }
    if let Some(c) = args.channel_capacity {
        cfg.channel_capacity = c;
    }
    if let Some(a) = args.arbiters {
        cfg.arbiters = a;
    }
    let checkpoint_dir = std::env::temp_dir().join(format!("weir-etl-chk-{}", std::process::id()));
    if args.checkpoint_interval_ms > 0 {
        cfg.checkpoint.interval = Some(Duration::from_millis(args.checkpoint_interval_ms));
        cfg.checkpoint.directory = checkpoint_dir.clone();
    }
    let (batch_size, channel_capacity, arbiters) =
        (cfg.batch_size, cfg.channel_capacity, cfg.arbiters);
    let env = Env::with_config(cfg);
    let merged = Arc::new(Mutex::new((LatencyHistogram::new(), 0u64)));
    build(&env, &args, &out_dir, merged.clone());
    clock_ns(); // fixes the clock's base before the job starts
    let started = Instant::now();
    let result = env.execute("etl").map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&checkpoint_dir);
    let result = result?;
    let seconds = started.elapsed().as_secs_f64();

    let records = result.operator(uid::SOURCE).map_or(0, |o| o.records_out);
    let written = result.operator(uid::SINK).map_or(0, |o| o.records_in);
    let malformed = result.operator(uid::MALFORMED).map_or(0, |o| o.records_in);
    let dropped = result
        .operator(uid::FILTER)
        .map_or(0, |o| o.records_in - o.records_out);
    let (hist, output_lines) = {
        let m = merged.lock().unwrap_or_else(|e| e.into_inner());
        (m.0.clone(), m.1)
    };
    if output_lines != written || hist.count() != written {
        return Err(format!(
            "internal check failed: sink counted {written} records, wrote {output_lines} lines, timed {}",
            hist.count()
        ));
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "etl",
            "records": records,
            "parallelism": args.parallelism,
            "seconds": seconds,
            "records_per_sec": records as f64 / seconds,
            "latency_p50_ms": hist.percentile_ms(0.50),
            "latency_p95_ms": hist.percentile_ms(0.95),
            "latency_p99_ms": hist.percentile_ms(0.99),
            "latency_max_ms": hist.max_ms(),
            "peak_rss_bytes": peak_rss_bytes(),
            "output_lines": output_lines,
            "dropped": dropped,
            "malformed": malformed,
            "batch_size": batch_size,
            "channel_capacity": channel_capacity,
            "arbiters": arbiters,
            "backup": args.backup,
            "checkpoint_interval_ms": args.checkpoint_interval_ms,
            "checkpoints_completed": result
                .checkpoints
                .as_ref()
                .map_or(0, |c| c.number_of_completed_checkpoints),
            "backup_queue_entries": result.backups.iter().map(|b| b.queue_entries).sum::<u64>(),
            "backup_filtered": result.backups.iter().map(|b| b.filtered).sum::<u64>(),
            "backup_added": result.backups.iter().map(|b| b.added).sum::<u64>(),
        })
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etl: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
