//! `kafka`: Kafka to Kafka throughput, Weir against a plain librdkafka loop. Prints one JSON
//! line.
//!
//! ```text
//! cargo run --release -p weir-benches --bin kafka -- [--brokers B] [--records N] \
//!     [--partitions P] [--parallelism K]
//! ```
//!
//! One input topic gets N records over P partitions (value: the id in decimal, then a space
//! and `x`s up to `--record-bytes`, 100 by default; 0 for the bare decimal), written with a
//! plain producer. Then four measurements, each over all N records into a fresh output topic
//! of P partitions, each timed from before its clients are made to its end:
//!
//! - `weir_at_least_once`: a Weir job, KafkaSource (bounded, earliest) → map (the parsed
//!   id plus one) → KafkaSink at least once, K subtasks, checkpoints every `--checkpoint-ms`; timed
//!   around `Env::with_config` .. `env.execute` (which returns once the bounded source ended
//!   and the sink flushed).
//! - `weir_exactly_once`: the same with `KafkaSink::exactly_once` (one transaction per
//!   subtask and checkpoint; `execute` returns after the final commit).
//! - `loop_plain`: one thread, a BaseConsumer (every partition assigned from the beginning,
//!   read_committed) → the same decode, + 1, encode → a BaseProducer (idempotent, as Weir's
//!   at-least-once sink's is) until N records are consumed, then flush.
//! - `loop_transactional`: the same loop with a transactional producer; every
//!   `--checkpoint-ms` it sends the consumed positions with the consumer's group metadata to
//!   the transaction, commits it, and begins the next; the last is committed at the end.
//!
//! Both sides encode with the same function, send without key, each record to its input's
//! partition (Weir's sink with `KafkaSink::partition_by`: one writer per partition, as
//! the test broker needs, see `check_output`) and, on a full queue, poll the producer for
//! 10 ms as Weir's sink does. `--set KEY=VALUE` passes a librdkafka setting to every client (both
//! sides: Weir's `KafkaConfig::set` and the loops' `ClientConfig`).
//!
//! Checks, after each measurement and outside its time: the output's high watermarks summed
//! (for transactional outputs this counts the commit markers too: `high_watermark_sum - N`
//! is about the markers written), the high watermarks and last stable offsets that the
//! partitions' Fetch replies state, summed (`fetch_stable_offset_sum` is below
//! `fetch_high_watermark_sum` while a transaction is open), and a read_committed reader over the whole output that
//! counts the records and the distinct ids among 1..=N: `ok` is `count == N && distinct ==
//! N` (every id once, nothing else). The test broker (tansu) hands read_committed readers
//! records of aborted transactions too, so an aborted duplicate would show as `count > N`.
//! Tansu also reports a partition's high watermark as its last record batch's base offset
//! plus one, so for the non-transactional outputs `high_watermark_sum` is below N (a
//! transactional partition ends with a one-record marker batch, so there it is right); the
//! input's last record per partition is written in a batch of its own for that reason.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_kafka::{KafkaEnvExt, KafkaStreamExt};

use clap::Parser;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use weir::{Env, EnvConfig};
use weir_kafka::{KafkaConfig, KafkaSink, KafkaSource, StartFrom};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long a blocking client call (metadata, flush, a transaction's commit) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

const MEASUREMENTS: [&str; 4] = [
    "loop_plain",
    "weir_at_least_once",
    "loop_transactional",
    "weir_exactly_once",
];

#[derive(Parser)]
#[command(
    name = "kafka",
    about = "Kafka to Kafka throughput, Weir against a plain librdkafka loop; prints one JSON line."
)]
struct Args {
    /// Bootstrap brokers (default: env WEIR_KAFKA_BROKERS, else 127.0.0.1:19092).
    #[arg(long)]
    brokers: Option<String>,
    /// Records in the input, and in each measurement.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Partitions of the input and of each output topic.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Parallelism of the Weir job.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Bytes per record value: the id in decimal, a space, `x`s (0: the bare decimal).
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// Weir's checkpoint interval, and the transactional loop's commit interval.
    #[arg(long, default_value_t = 200)]
    checkpoint_ms: u64,
    /// Only these measurements (comma separated; default all four, in the order
    /// loop_plain, weir_at_least_once, loop_transactional, weir_exactly_once).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// A librdkafka setting for every client, `KEY=VALUE` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Records per Weir batch (EnvConfig::batch_size; default: the framework's).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Keep the topics (default: delete them at the end, the broker keeps them in memory).
    #[arg(long)]
    keep_topics: bool,
}

struct Setup {
    brokers: String,
    settings: Vec<(String, String)>,
    records: u64,
    partitions: i32,
    parallelism: usize,
    record_bytes: usize,
    interval: Duration,
    batch_size: Option<usize>,
    /// Unique per run: topic names, transactional ids and groups start with it.
    run: String,
}

impl Setup {
    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.settings {
            c.set(k, v);
        }
        c
    }

    fn kafka(&self) -> KafkaConfig {
        self.settings
            .iter()
            .fold(KafkaConfig::new(self.brokers.as_str()), |c, (k, v)| {
                c.set(k, v)
            })
    }

    fn topic(&self, what: &str) -> String {
        format!("{}-{what}", self.run)
    }
}

/// Appends record `id`'s value: the decimal, then (with `record_bytes > 0`) a space and `x`s
/// up to `record_bytes`.
fn encode(id: u64, record_bytes: usize, out: &mut Vec<u8>) {
    let start = out.len();
    let _ = write!(out, "{id}");
    if record_bytes > 0 && out.len() - start < record_bytes {
        out.push(b' ');
        out.resize(start + record_bytes, b'x');
    }
}

/// The id at the start of a value (up to the first space).
fn decode(value: &[u8]) -> Result<u64, String> {
    let digits = value.split(|b| *b == b' ').next().unwrap_or_default();
    std::str::from_utf8(digits)
        .map_err(|e| e.to_string())?
        .parse::<u64>()
        .map_err(|e| format!("`{}`: {e}", String::from_utf8_lossy(digits)))
}

/// Delivery reports: failures counted (as Weir's sink does).
#[derive(Default)]
struct Counted {
    failed: AtomicU64,
}

impl ClientContext for Counted {}

impl ProducerContext for Counted {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sends one record, polling the producer for 10 ms while its queue is full.
fn send(
    producer: &BaseProducer<Counted>,
    topic: &str,
    partition: Option<i32>,
    value: &[u8],
) -> Res<()> {
    loop {
        let mut record = BaseRecord::<(), [u8]>::to(topic).payload(value);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(format!("send to {topic}: {e}").into()),
        }
    }
}

fn delivery_failures(producer: &BaseProducer<Counted>, what: &str) -> Res<()> {
    match producer.context().failed.load(Ordering::Relaxed) {
        0 => Ok(()),
        n => Err(format!("{what}: {n} records were not delivered").into()),
    }
}

/// Creates `topics` with `partitions` each and waits until their metadata shows them.
fn create_topics(s: &Setup, topics: &[String]) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = s.client().create()?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, s.partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    for r in futures::executor::block_on(admin.create_topics(&new, &options))? {
        if let Err((topic, code)) = r {
            return Err(format!("cannot create topic {topic}: {code}").into());
        }
    }
    let probe: BaseConsumer = s.client().create()?;
    let deadline = Instant::now() + CALL_TIMEOUT;
    for t in topics {
        loop {
            let md = probe.fetch_metadata(Some(t), CALL_TIMEOUT)?;
            let n = md
                .topics()
                .iter()
                .find(|m| m.name() == t && m.error().is_none())
                .map_or(0, |m| m.partitions().len());
            if n == s.partitions as usize {
                break;
            }
            if Instant::now() > deadline {
                return Err(
                    format!("topic {t}: {n} partitions visible, not {}", s.partitions).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn delete_topics(s: &Setup, topics: &[String]) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = s.client().create()?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    for r in futures::executor::block_on(admin.delete_topics(&names, &options))? {
        if let Err((topic, code)) = r {
            eprintln!("kafka: cannot delete topic {topic}: {code}");
        }
    }
    Ok(())
}

/// Writes ids 0..N to `topic`, id `i` to partition `i % P`.
fn produce_input(s: &Setup, topic: &str) -> Res<f64> {
    let start = Instant::now();
    let producer: BaseProducer<Counted> = s.client().create_with_context(Counted::default())?;
    let mut buf = Vec::with_capacity(s.record_bytes.max(32));
    // The test broker (tansu) reports a partition's high watermark as the last record
    // batch's base offset + 1, so the last record of each partition goes in a batch of its
    // own (sent and flushed alone): then the high watermark is right, and so is the end of
    // Weir's bounded source, which is the high watermark at its start.
    let tail = s.records.saturating_sub(s.partitions as u64);
    for id in 0..s.records {
        if id == tail {
            producer.flush(CALL_TIMEOUT)?;
        }
        buf.clear();
        encode(id, s.record_bytes, &mut buf);
        send(
            &producer,
            topic,
            Some((id % s.partitions as u64) as i32),
            &buf,
        )?;
        if id >= tail {
            producer.flush(CALL_TIMEOUT)?;
        } else if id % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(CALL_TIMEOUT)?;
    delivery_failures(&producer, "input")?;
    Ok(start.elapsed().as_secs_f64())
}

/// Sum over partitions of `high - low`.
fn watermark_sum(consumer: &BaseConsumer, s: &Setup, topic: &str) -> Res<(i64, Vec<(i64, i64)>)> {
    let mut sum = 0;
    let mut marks = Vec::new();
    for p in 0..s.partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, CALL_TIMEOUT)?;
        sum += high - low;
        marks.push((low, high));
    }
    Ok((sum, marks))
}

/// The output's check: high watermarks and stable offsets, and a read_committed read of
/// every partition to its high watermark counting records and distinct ids in 1..=N. A
/// stable offset stuck behind the high watermark (a transaction left open) shows as
/// `fetch_stable_offset_sum` below `fetch_high_watermark_sum`.
fn check_output(s: &Setup, topic: &str, first: u64) -> Res<Value> {
    let consumer: BaseConsumer = s
        .client()
        .set("group.id", s.topic("verify"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()?;
    let (hw_sum, marks) = watermark_sum(&consumer, s, topic)?;
    // The stable offsets as the partitions' Fetch replies state them (the test broker's
    // ListOffsets is not to be trusted for either end).
    let fetched = weir_kafka::testing::partition_offsets(&s.brokers, topic)?;
    let stable_sum: i64 = fetched.iter().map(|p| p.last_stable).sum();
    let fetched_hw_sum: i64 = fetched.iter().map(|p| p.high_watermark).sum();
    let mut tpl = TopicPartitionList::new();
    let mut open = 0;
    for (p, &(low, high)) in marks.iter().enumerate() {
        if high > low {
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(low))?;
            open += 1;
        }
    }
    consumer.assign(&tpl)?;
    let n = s.records;
    let mut seen = vec![0u64; (n as usize).div_ceil(64) + 1];
    let (mut count, mut distinct, mut foreign, mut bad) = (0u64, 0u64, 0u64, 0u64);
    let mut eof = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while eof.len() < open {
        if Instant::now() > deadline {
            eprintln!("kafka: reading {topic} back timed out");
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                // The end as of now: the position reached the high watermark (past markers).
                let at =
                    consumer
                        .position()?
                        .find_partition(topic, p)
                        .and_then(|e| match e.offset() {
                            Offset::Offset(o) => Some(o),
                            _ => None,
                        });
                if at.is_some_and(|o| o >= marks[p as usize].1) {
                    eof.insert(p);
                }
            }
            Some(Err(e)) => eprintln!("kafka: reading {topic}: {e}"),
            Some(Ok(m)) => {
                count += 1;
                match decode(m.payload().unwrap_or_default()) {
                    Ok(id) if (first..first + n).contains(&id) => {
                        let i = id - first;
                        let (w, b) = ((i / 64) as usize, i % 64);
                        if seen[w] & (1 << b) == 0 {
                            seen[w] |= 1 << b;
                            distinct += 1;
                        }
                    }
                    Ok(_) => foreign += 1,
                    Err(_) => bad += 1,
                }
            }
        }
    }
    let ok = count == n && distinct == n;
    Ok(json!({
        "high_watermark_sum": hw_sum,
        "high_watermark_sum_minus_records": hw_sum - n as i64,
        "fetch_high_watermark_sum": fetched_hw_sum,
        "fetch_stable_offset_sum": stable_sum,
        "read_committed_count": count,
        "distinct_ids": distinct,
        "ids_out_of_range": foreign,
        "undecodable": bad,
        "read_to_end": eof.len() == open,
        "ok": ok,
    }))
}

struct Measured {
    seconds: f64,
    extra: Value,
}

fn run_weir(s: &Setup, input: &str, output: &str, exactly_once: bool) -> Res<Measured> {
    let dir = std::env::temp_dir().join(format!("weir-kafka-bench-{output}"));
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = s.parallelism;
    cfg.checkpoint.interval = Some(s.interval);
    cfg.checkpoint.directory = dir.clone();
    if let Some(b) = s.batch_size {
        cfg.batch_size = b;
    }
    let batch_size = cfg.batch_size;
    let start = Instant::now();
    let env = Env::with_config(cfg);
    let kafka = s.kafka();
    let source = KafkaSource::new(kafka.clone(), input, |r| {
        decode(r.value.unwrap_or_default())
    })
    .bounded()
    .start_from(StartFrom::Earliest);
    let record_bytes = s.record_bytes;
    let partitions = s.partitions as u64;
    let mut sink = KafkaSink::new(kafka, output, move |id: &u64, out: &mut Vec<u8>| {
        encode(*id, record_bytes, out);
        Ok(())
    })
    // Each output record to its input's partition (id - 1 was read from partition
    // (id - 1) % P): one writer per partition. The test broker defers the commit of a
    // transaction overlapping another producer's open one and can leave it unfinished for
    // good, its stable offset stuck (the book's "The test broker").
    .partition_by(move |id| id.wrapping_sub(1) % partitions);
    if exactly_once {
        sink = sink.exactly_once(format!("{output}-txn"));
    }
    env.kafka_source("input", source)
        .uid("input")
        .map(|id| id + 1)
        .uid("plus-one")
        .sink_to_kafka("output", sink)
        .uid("output");
    let result = env.execute(output);
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    let result = result?;
    let checkpoints = result
        .checkpoints
        .as_ref()
        .map_or(0, |c| c.number_of_completed_checkpoints);
    Ok(Measured {
        seconds,
        extra: json!({
            "job_duration_sec": result.duration.as_secs_f64(),
            "checkpoints_completed": checkpoints,
            "batch_size": batch_size,
            "sink_records_in": result.operator("output").map_or(0, |o| o.records_in),
        }),
    })
}

fn run_loop(s: &Setup, input: &str, output: &str, transactional: bool) -> Res<Measured> {
    let start = Instant::now();
    let consumer: BaseConsumer = s
        .client()
        .set("group.id", format!("{output}-group"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let mut config = s.client();
    if transactional {
        config.set("transactional.id", format!("{output}-txn"));
    } else {
        config.set("enable.idempotence", "true");
    }
    let producer: BaseProducer<Counted> = config.create_with_context(Counted::default())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..s.partitions {
        tpl.add_partition_offset(input, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    if transactional {
        producer.init_transactions(CALL_TIMEOUT)?;
        producer.begin_transaction()?;
    }
    let group = consumer.group_metadata();
    let mut next = vec![-1i64; s.partitions as usize];
    let commit = |next: &[i64]| -> Res<()> {
        let mut offsets = TopicPartitionList::new();
        for (p, &o) in next.iter().enumerate() {
            if o >= 0 {
                offsets.add_partition_offset(input, p as i32, Offset::Offset(o))?;
            }
        }
        let group = group
            .as_ref()
            .ok_or("the loop's consumer has no group metadata")?;
        producer.send_offsets_to_transaction(&offsets, group, CALL_TIMEOUT)?;
        producer.commit_transaction(CALL_TIMEOUT)?;
        Ok(())
    };
    let mut buf = Vec::with_capacity(s.record_bytes.max(32));
    let (mut consumed, mut commits) = (0u64, 0u64);
    let mut last_commit = Instant::now();
    while consumed < s.records {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => eprintln!("kafka: loop consumer: {e}"),
            Some(Ok(m)) => {
                let id = decode(m.payload().unwrap_or_default())?;
                buf.clear();
                encode(id + 1, s.record_bytes, &mut buf);
                send(&producer, output, Some(m.partition()), &buf)?;
                next[m.partition() as usize] = m.offset() + 1;
                consumed += 1;
                if consumed % 1024 == 0 {
                    producer.poll(Duration::ZERO);
                }
            }
        }
        if transactional && last_commit.elapsed() >= s.interval {
            commit(&next)?;
            producer.begin_transaction()?;
            commits += 1;
            last_commit = Instant::now();
        }
    }
    if transactional {
        commit(&next)?;
        commits += 1;
    } else {
        producer.flush(CALL_TIMEOUT)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    delivery_failures(&producer, output)?;
    Ok(Measured {
        seconds,
        extra: json!({ "transactions_committed": commits }),
    })
}

/// The run's setup and the measurements to take, from the flags.
fn setup(args: &Args) -> Res<(Setup, Vec<&'static str>)> {
    let brokers = args
        .brokers
        .clone()
        .or_else(|| std::env::var("WEIR_KAFKA_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let mut settings = Vec::new();
    for kv in &args.settings {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--set `{kv}`: not KEY=VALUE"))?;
        settings.push((k.to_string(), v.to_string()));
    }
    let only: Vec<&str> = if args.only.is_empty() {
        MEASUREMENTS.to_vec()
    } else {
        for o in &args.only {
            if !MEASUREMENTS.contains(&o.as_str()) {
                return Err(format!("--only: unknown measurement `{o}` ({MEASUREMENTS:?})").into());
            }
        }
        MEASUREMENTS
            .iter()
            .copied()
            .filter(|m| args.only.iter().any(|o| o == m))
            .collect()
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let s = Setup {
        brokers,
        settings,
        records: args.records,
        partitions: args.partitions,
        parallelism: args.parallelism,
        record_bytes: args.record_bytes,
        interval: Duration::from_millis(args.checkpoint_ms),
        batch_size: args.batch_size,
        run: format!("kb-{}-{stamp}", std::process::id()),
    };
    Ok((s, only))
}

/// Writes the input topic and checks it holds every record; the seconds writing took.
fn write_input(s: &Setup, input: &str) -> Res<f64> {
    eprintln!("kafka: writing {} records to {input}", s.records);
    let input_secs = produce_input(s, input)?;
    let probe: BaseConsumer = s.client().create()?;
    let (input_count, marks) = watermark_sum(&probe, s, input)?;
    let input_check = check_output(s, input, 0)?;
    eprintln!("kafka: input read back: {input_check}");
    if input_count != s.records as i64 || input_check["ok"] != json!(true) {
        eprintln!("kafka: input (low, high) per partition: {marks:?}");
    }
    eprintln!("kafka: input written in {input_secs:.2} s, high watermarks sum {input_count}");
    if input_count != s.records as i64 {
        return Err(format!(
            "the input's high watermarks sum to {input_count}, not {}",
            s.records
        )
        .into());
    }
    Ok(input_secs)
}

/// Takes measurement `m` into `out` (its rate, seconds, run and output check, or its error);
/// whether it ran and its output passed the check.
fn measure(s: &Setup, input: &str, m: &str, out: &mut serde_json::Map<String, Value>) -> Res<bool> {
    let output = s.topic(m);
    eprintln!("kafka: {m} → {output}");
    let measured = match m {
        "weir_at_least_once" => run_weir(s, input, &output, false),
        "weir_exactly_once" => run_weir(s, input, &output, true),
        "loop_plain" => run_loop(s, input, &output, false),
        _ => run_loop(s, input, &output, true),
    };
    let measured = match measured {
        Ok(x) => x,
        Err(e) => {
            eprintln!("kafka: {m} failed: {e}");
            out.insert(format!("{m}_error"), json!(e.to_string()));
            return Ok(false);
        }
    };
    let rate = s.records as f64 / measured.seconds;
    eprintln!(
        "kafka: {m}: {:.2} s, {rate:.0} records/s; checking the output",
        measured.seconds
    );
    let check = check_output(s, &output, 1)?;
    eprintln!("kafka: {m}: {check}");
    let ok = check["ok"].as_bool().unwrap_or(false);
    out.insert(format!("{m}_records_per_sec"), json!(rate));
    out.insert(format!("{m}_seconds"), json!(measured.seconds));
    out.insert(format!("{m}_run"), measured.extra);
    out.insert(format!("{m}_check"), check);
    Ok(ok)
}

/// The JSON line: the rates and ratios first, the setup, then every measurement's details.
fn result_line(
    args: &Args,
    s: &Setup,
    mut out: serde_json::Map<String, Value>,
    input_secs: f64,
    all_ok: bool,
) -> Value {
    let rate = |m: &str| {
        out.get(&format!("{m}_records_per_sec"))
            .and_then(Value::as_f64)
    };
    let ratio = |a: &str, b: &str| match (rate(a), rate(b)) {
        (Some(a), Some(b)) => json!(a / b),
        _ => Value::Null,
    };
    let ratio_at_least_once = ratio("weir_at_least_once", "loop_plain");
    let ratio_exactly_once = ratio("weir_exactly_once", "loop_transactional");
    let mut line = serde_json::Map::new();
    line.insert("bench".into(), json!("kafka"));
    for m in MEASUREMENTS {
        let key = format!("{m}_records_per_sec");
        line.insert(key.clone(), out.remove(&key).unwrap_or(Value::Null));
    }
    line.insert("ratio_at_least_once".into(), ratio_at_least_once);
    line.insert("ratio_exactly_once".into(), ratio_exactly_once);
    line.insert("goal".into(), json!(0.8));
    line.insert("records".into(), json!(s.records));
    line.insert("partitions".into(), json!(s.partitions));
    line.insert("parallelism".into(), json!(s.parallelism));
    line.insert("record_bytes".into(), json!(s.record_bytes));
    line.insert("checkpoint_ms".into(), json!(args.checkpoint_ms));
    line.insert("brokers".into(), json!(s.brokers));
    line.insert("settings".into(), json!(args.settings));
    line.insert("input_write_sec".into(), json!(input_secs));
    line.insert(
        "check".into(),
        json!("per output: high watermarks summed; a read_committed read to the end counting records and distinct ids in 1..=N; ok = count == N && distinct == N"),
    );
    line.insert("ok".into(), json!(all_ok));
    line.extend(out);
    Value::Object(line)
}

fn main() -> Res<()> {
    let args = Args::parse();
    let (s, only) = setup(&args)?;
    let input = s.topic("input");
    let mut topics = vec![input.clone()];
    topics.extend(only.iter().map(|m| s.topic(m)));
    eprintln!("kafka: creating topics {topics:?} on {}", s.brokers);
    create_topics(&s, &topics)?;
    let input_secs = write_input(&s, &input)?;

    let mut out = serde_json::Map::new();
    let mut all_ok = true;
    for m in &only {
        all_ok &= measure(&s, &input, m, &mut out)?;
    }
    if !args.keep_topics {
        delete_topics(&s, &topics)?;
    }
    println!("{}", result_line(&args, &s, out, input_secs, all_ok));
    if !all_ok {
        return Err("a measurement failed or its output check did not pass".into());
    }
    Ok(())
}
