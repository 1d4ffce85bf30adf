//! The Kafka source and exactly-once sink against a real broker (`WEIR_KAFKA_BROKERS`, which
//! `.ci/run` starts; skipped when unset outside CI): 200k ids on 8 partitions, source → map
//! → exactly-once sink, checkpoints every 200 ms, under faults in the process (panics, and a
//! restart from the checkpoint) and of the process (SIGKILL mid-stream; death after a
//! checkpoint completed and before the sink committed it). Each ends with every id exactly
//! once at a read_committed reader that applies the transaction markers, and no transaction
//! of the job left open.

mod common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;
use weir_kafka::{KafkaEnvExt, KafkaStreamExt};

use weir::time::WatermarkStrategy;
use weir::window::{AggregateFunction, TumblingEventTimeWindows};
use weir::{Env, EnvConfig, JobError};
use weir_kafka::testing::{
    assert_no_transaction_left_open, create_topic, decode_id, encode_id, ids, partition_offsets,
    produce_ids, read_committed, required_brokers, unique_topic,
};
use weir_kafka::{KafkaConfig, KafkaSink, KafkaSource, Malformed, StartFrom};
use weir_testing::{quiet_injected_panics, ExactlyOnce, Fault, FaultKind, FaultPlan};

const IDS: u64 = 200_000;
const PARTITIONS: i32 = 8;

/// An input topic with ids `0..n` and an empty output topic.
fn topics(brokers: &str, tag: &str, n: u64) -> (String, String) {
    let input = unique_topic(&format!("{tag}-in"));
    let output = unique_topic(&format!("{tag}-out"));
    create_topic(brokers, &input, PARTITIONS).expect("create the input topic");
    create_topic(brokers, &output, PARTITIONS).expect("create the output topic");
    produce_ids(brokers, &input, PARTITIONS, 0..n).expect("produce the input");
    (input, output)
}

/// Every id of `0..n` once in `output`, as a read_committed reader applying the markers
/// sees it; and no transaction left open (last stable offset = high watermark everywhere).
fn assert_exactly_once(brokers: &str, output: &str, n: u64) {
    let records = read_committed(brokers, output).expect("read the output");
    let report = ExactlyOnce::new(0..n).check(ids(&records));
    if !report.is_exactly_once() {
        // Where the first duplicates are in the output, to tell a replay from a resend.
        let mut seen = std::collections::HashMap::new();
        let mut shown = 0;
        for r in &records {
            let id = ids(std::slice::from_ref(r))[0];
            if let Some((p, o)) = seen.insert(id, (r.partition, r.offset)) {
                if shown < 10 {
                    eprintln!("id {id} at {p}/{o} and {}/{}", r.partition, r.offset);
                    shown += 1;
                }
            }
        }
    }
    report.assert_exactly_once();
    assert_no_transaction_left_open(brokers, output, Duration::from_secs(10));
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn exactly_once_through_panics_and_restarts_in_the_process() {
    let brokers = required_brokers();
    quiet_injected_panics();
    let (input, output) = topics(&brokers, "eo-panics", IDS);
    let dir = common::TempDir::new("kafka-eo-panics");
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = 2;
    cfg.checkpoint.interval = Some(Duration::from_millis(200));
    cfg.checkpoint.directory = dir.path().into();
    // Slowed to 40k records/s so that the faults land mid-stream (they fire on events
    // whatever the speed: a record every run reads, and checkpoints of an endless job).
    cfg.rate_control.enabled = true;
    cfg.rate_control.initial_rate = Some(40_000.0);
    cfg.rate_control.min_rate = 40_000.0;
    cfg.rate_control.max_rate = Some(40_000.0);
    // A panic in the map before any checkpoint (a fresh restart: the sink aborts what the
    // failed attempt left open), one at the map's snapshot of a checkpoint (a restore),
    // and one at the sink's own snapshot (it has staged a transaction).
    let plan = FaultPlan::new(vec![
        Fault::new("double", FaultKind::Panic, 40_000).in_subtask(1),
        Fault::new("double", FaultKind::Panic, 0)
            .at_snapshot()
            .after_checkpoints(2),
        Fault::new("out", FaultKind::Panic, 0)
            .at_snapshot()
            .after_checkpoints(5)
            .in_subtask(0),
    ]);
    cfg.faults = plan.clone();
    cfg.restart = Some(weir::RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    let env = Env::with_config(cfg);
    let kafka = KafkaConfig::new(brokers.as_str());
    let source = KafkaSource::new(kafka.clone(), input.as_str(), decode_id);
    let sink = KafkaSink::new(kafka, output.as_str(), encode_id).exactly_once(unique_topic("eo"));
    env.kafka_source("ids", source)
        .uid("ids")
        .map(|id| id * 2)
        .uid("double")
        .map(|id| id / 2)
        .sink_to_kafka("out", sink)
        .uid("out");
    let job = env.start("kafka-eo-panics").expect("the job starts");
    poll_until("every fault fired and every id committed", || {
        plan.fired() == 3
            && read_committed(&brokers, &output)
                .expect("read the output")
                .len() as u64
                >= IDS
    });
    job.cancel();
    let _ = job.wait();
    assert_exactly_once(&brokers, &output, IDS);
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn at_least_once_sink_and_source_start_positions() {
    let brokers = required_brokers();
    let (input, output) = topics(&brokers, "alo", 20_000);
    let env = Env::new();
    let kafka = KafkaConfig::new(brokers.as_str());
    let source = KafkaSource::new(kafka.clone(), input.as_str(), decode_id).bounded();
    let sink = KafkaSink::new(kafka.clone(), output.as_str(), encode_id).key_by(|id, k| {
        k.extend_from_slice(id.to_string().as_bytes());
    });
    env.kafka_source("ids", source).sink_to_kafka("out", sink);
    common::execute_within(&env, "kafka-alo").expect("the job completes");
    let records = read_committed(&brokers, &output).expect("read the output");
    ExactlyOnce::new(0..20_000)
        .check(ids(&records))
        .assert_exactly_once();
    for r in &records {
        assert_eq!(r.key, r.value, "the key is the id");
    }

    // `Latest` starts after what is there: a bounded source reads nothing. Not on the test
    // broker, whose ListOffsets answers the last batch's base offset + 1 for "latest".
    if !weir_kafka::testing::broker_is_tansu() {
        let env = Env::new();
        let latest = KafkaSource::new(kafka.clone(), input.as_str(), decode_id)
            .start_from(StartFrom::Latest)
            .bounded();
        let got = env.kafka_source("ids", latest).collect();
        common::execute_within(&env, "kafka-latest").expect("the job completes");
        assert!(got.take().is_empty());
    }

    // The group's offsets: none committed (an at-least-once job without checkpoints), so
    // the earliest.
    let env = Env::new();
    let group = KafkaSource::new(kafka.clone(), input.as_str(), decode_id)
        .start_from(StartFrom::GroupOffsets)
        .group_id(unique_topic("group"))
        .bounded();
    let got = env.kafka_source("ids", group).collect();
    common::execute_within(&env, "kafka-group-offsets").expect("the job completes");
    assert_eq!(got.take().len(), 20_000);

    // A timestamp in the past: everything; one in the future: nothing (not checked on the
    // test broker, whose ListOffsets by time answers offset 0 for it).
    let mut cases = vec![(0, 20_000)];
    if !weir_kafka::testing::broker_is_tansu() {
        cases.push((i64::MAX / 4, 0));
    }
    for (ts, expected) in cases {
        let env = Env::new();
        let at = KafkaSource::new(kafka.clone(), input.as_str(), decode_id)
            .start_from(StartFrom::Timestamp(ts))
            .bounded();
        let got = env.kafka_source("ids", at).collect();
        common::execute_within(&env, "kafka-timestamp").expect("the job completes");
        assert_eq!(got.take().len(), expected, "start at timestamp {ts}");
    }
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_malformed_record_fails_the_job_naming_where_it_is_or_is_skipped() {
    let brokers = required_brokers();
    let (input, _) = topics(&brokers, "malformed", 0);
    produce_ids(&brokers, &input, PARTITIONS, 0..100).expect("produce");
    weir_kafka::testing::produce_values(&brokers, &input, 3, &[b"not-a-number".as_slice()])
        .expect("produce the bad record");
    let kafka = KafkaConfig::new(brokers.as_str());

    let env = Env::new();
    let source = KafkaSource::new(kafka.clone(), input.as_str(), decode_id).bounded();
    env.kafka_source("ids", source).discard();
    let err = common::execute_within(&env, "kafka-malformed").expect_err("a malformed record");
    let message = format!("{err}");
    assert!(
        matches!(err, JobError::SourceFailed { .. }) || message.contains("malformed"),
        "{message}"
    );
    assert!(
        message.contains("partition 3"),
        "names the partition: {message}"
    );
    assert!(message.contains("offset"), "names the offset: {message}");
    assert!(
        message.contains("not-a-number"),
        "says what it is: {message}"
    );

    let env = Env::new();
    let source = KafkaSource::new(kafka, input.as_str(), decode_id)
        .on_malformed(Malformed::Skip)
        .bounded();
    let got = env.kafka_source("ids", source).collect();
    common::execute_within(&env, "kafka-skip").expect("the job completes");
    assert_eq!(common::sorted(got.take()), (0..100).collect::<Vec<u64>>());
}

#[test]
fn exactly_once_settings_are_checked_when_the_job_is_planned() {
    // No broker needed: nothing is started.
    let kafka = KafkaConfig::new("127.0.0.1:1").set("transaction.timeout.ms", "1500");
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_secs(1));
    let env = Env::with_config(cfg);
    let source = KafkaSource::new(kafka.clone(), "in", decode_id);
    let sink = KafkaSink::new(kafka.clone(), "out", encode_id).exactly_once("p");
    env.kafka_source("ids", source).sink_to_kafka("out", sink);
    let err = env.execute("kafka-timeout").expect_err("refused");
    let message = format!("{err}");
    assert!(matches!(err, JobError::Plan { .. }), "{message}");
    assert!(message.contains("1500 ms"), "names the timeout: {message}");
    assert!(message.contains("1000 ms"), "names the interval: {message}");

    // Exactly once without checkpoints.
    let env = Env::new();
    let source = KafkaSource::new(kafka.clone(), "in", decode_id);
    let sink = KafkaSink::new(kafka, "out", encode_id).exactly_once("p");
    env.kafka_source("ids", source).sink_to_kafka("out", sink);
    let err = env.execute("kafka-no-checkpoints").expect_err("refused");
    assert!(format!("{err}").contains("checkpoint"), "{err}");
}

/// A job restored from a savepoint older than what its exactly-once sink has committed since
/// (same transactional prefix) would write the records after the savepoint twice: the sink
/// reads the newest committed mark at its start and refuses, naming both checkpoints, and
/// writes nothing.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_restore_behind_the_committed_output_is_refused() {
    let brokers = required_brokers();
    let n = 20_000;
    let (input, output) = topics(&brokers, "eo-behind", n);
    let dir = common::TempDir::new("kafka-eo-behind");
    let prefix = unique_topic("eo-behind");
    let build = |restore_from: Option<std::path::PathBuf>| {
        let mut cfg = EnvConfig::default();
        cfg.checkpoint.interval = Some(Duration::from_millis(200));
        cfg.checkpoint.directory = dir.path().join("checkpoints");
        cfg.checkpoint.restore_from = restore_from;
        // 10k records/s: the savepoint lands before the end of the input.
        cfg.rate_control.enabled = true;
        cfg.rate_control.initial_rate = Some(10_000.0);
        cfg.rate_control.min_rate = 10_000.0;
        cfg.rate_control.max_rate = Some(10_000.0);
        let env = Env::with_config(cfg);
        let kafka = KafkaConfig::new(brokers.as_str());
        let source = KafkaSource::new(kafka.clone(), input.as_str(), decode_id);
        let sink = KafkaSink::new(kafka, output.as_str(), encode_id).exactly_once(prefix.as_str());
        env.kafka_source("ids", source)
            .uid("ids")
            .sink_to_kafka("out", sink)
            .uid("out");
        env
    };
    let job = build(None)
        .start("kafka-eo-behind")
        .expect("the job starts");
    poll_until("a first checkpoint", || {
        job.checkpoint_stats()
            .and_then(|s| s.last_completed_checkpoint_id)
            .is_some()
    });
    let savepoint = job
        .savepoint(dir.path().join("savepoint"))
        .expect("a savepoint");
    poll_until(
        "every id committed (checkpoints after the savepoint's)",
        || {
            read_committed(&brokers, &output)
                .expect("read the output")
                .len() as u64
                >= n
        },
    );
    job.cancel();
    let _ = job.wait();

    let err = build(Some(savepoint))
        .execute("kafka-eo-behind-again")
        .expect_err("a restore behind the committed output is refused");
    let message = err.to_string();
    match &err {
        JobError::SinkFailed { source, .. } => match source {
            weir::SinkError::RestoredBehind {
                restored,
                committed,
                ..
            } => assert!(restored < committed, "{message}"),
            other => panic!("not RestoredBehind: {other}"),
        },
        other => panic!("not a sink failure: {other}"),
    }
    assert!(message.contains("twice"), "{message}");
    assert_exactly_once(&brokers, &output, n);
}

/// Produces one record per timestamp of `ts` to `partition` of `topic`, the timestamp as
/// its value.
fn produce_timestamps(brokers: &str, topic: &str, partition: i32, ts: impl Iterator<Item = i64>) {
    let values: Vec<Vec<u8>> = ts.map(|t| t.to_string().into_bytes()).collect();
    let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    weir_kafka::testing::produce_values(brokers, topic, partition, &values)
        .expect("produce the timestamps");
}

/// Counts per one-second event-time window of the timestamps read from `source`, as
/// `(window index, count)`.
fn count_per_second(
    env: &Env,
    source: KafkaSource<i64>,
    parallelism: usize,
    idleness: Option<Duration>,
) -> weir::CollectSink<(i64, u64)> {
    let mut wm = WatermarkStrategy::for_monotonous_timestamps()
        .with_timestamp_assigner(|ts: &i64| *ts)
        .with_watermark_interval(Duration::ZERO);
    if let Some(d) = idleness {
        wm = wm.with_idleness(d);
    }
    env.kafka_source_with_watermarks("timestamps", source, wm)
        .set_parallelism(parallelism)
        .key_by(|ts: &i64| ts.div_euclid(1_000))
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate_window(Count, |second: &i64, _: &_, n: u64| (*second, n))
        .collect()
}

/// Counts a window's records.
#[derive(Clone)]
struct Count;

impl AggregateFunction<i64, u64> for Count {
    type Acc = u64;
    fn add(&self, acc: &mut u64, _: i64) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: &u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

fn decode_ts(r: &weir_kafka::RecordView<'_>) -> Result<i64, String> {
    let text = std::str::from_utf8(r.value.unwrap_or_default()).map_err(|e| e.to_string())?;
    text.parse::<i64>().map_err(|e| format!("`{text}`: {e}"))
}

/// Watermarks per partition: a partition read a million milliseconds behind another keeps
/// every record on time (one watermark for the subtask, the highest timestamp seen, would
/// drop it as late).
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_partition_behind_the_others_keeps_its_records_on_time() {
    let brokers = required_brokers();
    let input = unique_topic("wm-lag");
    create_topic(&brokers, &input, 2).expect("create the topic");
    produce_timestamps(&brokers, &input, 0, 1_000_000..1_002_000);
    produce_timestamps(&brokers, &input, 1, 0..2_000);
    let env = Env::new();
    let source = KafkaSource::new(KafkaConfig::new(brokers.as_str()), input, decode_ts).bounded();
    let got = count_per_second(&env, source, 1, None);
    common::execute_within(&env, "kafka-wm-lag").expect("the job completes");
    let mut got = got.take();
    got.sort_unstable();
    assert_eq!(
        got,
        vec![(0, 1_000), (1, 1_000), (1_000, 1_000), (1_001, 1_000)],
        "every record counted in its window"
    );
}

/// An empty partition holds the watermark back only until the idleness timeout: an
/// unbounded source whose records are all in one of three partitions still fires windows.
/// At parallelism 4, subtask 3 has no partition: it is idle at once. (Only the empty
/// partitions can go idle early or late: the one with records going idle moves nothing, so
/// this does not depend on timing.)
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn empty_partitions_hold_the_watermark_only_until_idle() {
    let brokers = required_brokers();
    let input = unique_topic("wm-idle");
    create_topic(&brokers, &input, 3).expect("create the topic");
    produce_timestamps(&brokers, &input, 0, (0..3_000).chain([100_000]));
    let env = Env::new();
    let source = KafkaSource::new(KafkaConfig::new(brokers.as_str()), input, decode_ts);
    let got = count_per_second(&env, source, 4, Some(Duration::from_millis(500)));
    let job = env.start("kafka-wm-idle").expect("the job starts");
    common::wait_until("the windows below the last record fired", || got.len() >= 3);
    job.cancel();
    let _ = job.wait();
    let mut got = got.take();
    got.sort_unstable();
    assert_eq!(got, vec![(0, 1_000), (1, 1_000), (2, 1_000)]);
}

/// The `kafka_job` binary.
fn job(brokers: &str, input: &str, output: &str, dir: &Path, prefix: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kafka_job"));
    c.args([brokers, input, output])
        .arg(dir)
        .arg(prefix)
        .env("WEIR_STDERR_WARNINGS", "0");
    c
}

/// Waits until `done` says so (an event), looking every 20 ms (a look may read a topic);
/// past the tests' timeout the test fails naming `what` it waited for.
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited in vain: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit on its own.
fn wait(child: &mut Child, what: &str) -> ExitStatus {
    let mut status = None;
    common::wait_until(what, || {
        status = child.try_wait().expect("wait for the job");
        status.is_some()
    });
    status.expect("exited")
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_sigkilled_job_resumes_with_every_record_once() {
    let brokers = required_brokers();
    let (input, output) = topics(&brokers, "sigkill", IDS);
    let dir = common::TempDir::new("kafka-sigkill");
    let prefix = unique_topic("sigkill");
    // Slowed so that the kill lands mid-stream.
    let mut first = job(&brokers, &input, &output, dir.path(), &prefix)
        .args(["--rate", "40000"])
        .spawn()
        .expect("start the job");
    // Killed once some transaction has committed: mid-stream, with one open.
    poll_until("a first committed transaction", || {
        !read_committed(&brokers, &output)
            .expect("read the output")
            .is_empty()
    });
    assert!(
        first.try_wait().expect("the job").is_none(),
        "the job was still running when killed"
    );
    first.kill().expect("SIGKILL the job");
    first.wait().expect("reap the job");
    let seen = ids(&read_committed(&brokers, &output).expect("read"));
    assert!(
        (seen.len() as u64) < IDS,
        "killed mid-stream: {} of {IDS} committed",
        seen.len()
    );

    let mut second = job(&brokers, &input, &output, dir.path(), &prefix)
        .arg("--bounded")
        .spawn()
        .expect("restart the job");
    let status = wait(&mut second, "the restarted job to finish");
    assert!(status.success(), "the restarted job: {status}");
    assert_exactly_once(&brokers, &output, IDS);
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn death_after_a_checkpoint_completed_before_its_commit_loses_nothing() {
    let brokers = required_brokers();
    let (input, output) = topics(&brokers, "before-commit", IDS);
    let dir = common::TempDir::new("kafka-before-commit");
    let prefix = unique_topic("before-commit");
    let mut first = job(&brokers, &input, &output, dir.path(), &prefix)
        .args(["--rate", "40000", "--die-before-commit", "3"])
        .spawn()
        .expect("start the job");
    let status = wait(&mut first, "the job to die at checkpoint 3's commit");
    assert!(!status.success(), "it died: {status}");
    // Checkpoint 3 is complete, and its transaction open: its records are not visible.
    let before = read_committed(&brokers, &output).expect("read").len() as u64;
    assert!(before < IDS, "{before}");
    let open = partition_offsets(&brokers, &output)
        .expect("offsets")
        .iter()
        .any(|p| p.last_stable < p.high_watermark);
    assert!(open, "the dead job's transaction is still open");

    let mut second = job(&brokers, &input, &output, dir.path(), &prefix)
        .arg("--bounded")
        .spawn()
        .expect("restart the job");
    let status = wait(&mut second, "the restarted job to finish");
    assert!(status.success(), "the restarted job: {status}");
    assert_exactly_once(&brokers, &output, IDS);
}

/// A source of two topics reads each record of both once, with the topic it came from; a
/// bounded one ends when both are read.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_list_of_topics_is_read_each_record_once() {
    let brokers = required_brokers();
    let (a, b) = (unique_topic("list-a"), unique_topic("list-b"));
    create_topic(&brokers, &a, 3).expect("create topic a");
    create_topic(&brokers, &b, 2).expect("create topic b");
    produce_ids(&brokers, &a, 3, 0..10_000).expect("produce a");
    produce_ids(&brokers, &b, 2, 10_000..16_000).expect("produce b");
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = 2;
    let env = Env::with_config(cfg);
    let kafka = KafkaConfig::new(brokers.as_str());
    let (ta, tb) = (a.clone(), b.clone());
    let source = KafkaSource::with_topics(kafka, [a.as_str(), b.as_str()], move |r| {
        let id = decode_id(r)?;
        let from_a = id < 10_000;
        let want = if from_a { &ta } else { &tb };
        if r.topic != want.as_str() {
            return Err(format!("id {id} came from {}", r.topic));
        }
        Ok(id)
    })
    .bounded();
    let got = env.kafka_source("ids", source).collect();
    common::execute_within(&env, "kafka-topic-list").expect("the job completes");
    ExactlyOnce::new(0..16_000)
        .check(got.take())
        .assert_exactly_once();
}

/// A pattern source reads the matching topics there at its start, and one created while it
/// runs once discovery finds it (every 200 ms here), from its first record; a topic that does
/// not match is not read. Every id once at an exactly-once sink.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_pattern_source_picks_up_a_matching_topic_created_while_it_runs() {
    let brokers = required_brokers();
    let prefix = unique_topic("pattern");
    let (first, later, other) = (
        format!("{prefix}-orders-1"),
        format!("{prefix}-orders-2"),
        format!("{prefix}-returns"),
    );
    let output = unique_topic("pattern-out");
    create_topic(&brokers, &first, 2).expect("create the first topic");
    create_topic(&brokers, &output, 2).expect("create the output");
    produce_ids(&brokers, &first, 2, 0..5_000).expect("produce the first");
    let dir = common::TempDir::new("kafka-pattern");
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = 2;
    cfg.checkpoint.interval = Some(Duration::from_millis(200));
    cfg.checkpoint.directory = dir.path().into();
    let env = Env::with_config(cfg);
    let kafka = KafkaConfig::new(brokers.as_str());
    let pattern = format!("{}-orders-[0-9]+", regex_escape(&prefix));
    let source = KafkaSource::with_topic_pattern(kafka.clone(), &pattern, decode_id)
        .expect("a good pattern")
        .discover_every(Some(Duration::from_millis(200)));
    let sink = KafkaSink::new(kafka, output.as_str(), encode_id).exactly_once(unique_topic("pat"));
    env.kafka_source("ids", source)
        .uid("ids")
        .sink_to_kafka("out", sink)
        .uid("out");
    let job = env.start("kafka-pattern").expect("the job starts");
    let committed = || {
        read_committed(&brokers, &output)
            .expect("read the output")
            .len() as u64
    };
    poll_until("the first topic's ids committed", || committed() >= 5_000);
    create_topic(&brokers, &later, 3).expect("create the later topic");
    create_topic(&brokers, &other, 1).expect("create a topic that does not match");
    produce_ids(&brokers, &later, 3, 5_000..9_000).expect("produce the later");
    produce_ids(&brokers, &other, 1, 9_000..9_500).expect("produce the other");
    poll_until("the later topic's ids committed", || committed() >= 9_000);
    // Two checkpoints longer: the other topic's ids would have come with the later's.
    common::two_more_checkpoints(&job);
    job.cancel();
    let _ = job.wait();
    assert_exactly_once(&brokers, &output, 9_000);
}

/// The regular-expression escape of a topic name (`.` is the only special character topic
/// names may have, with `-` and `_`, which need none).
fn regex_escape(name: &str) -> String {
    name.replace('.', "\\.")
}

/// Split-level watermark alignment: one subtask reads two partitions, one with a backlog 10
/// minutes of event time ahead of the other, whose records arrive while the job runs. Aligned
/// with a drift of 30 s, the ahead partition is paused while the other reads on (the subtask's
/// own watermark is its lowest partition's, so the subtask is never paused whole): after the
/// first batch, no record of it arrives further ahead of the other's newest than the drift and
/// a batch (without split pausing its whole backlog is read at once); the per-minute windows
/// equal a reference.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_partition_ten_minutes_ahead_is_paused_inside_its_subtask() {
    use std::sync::{Arc, Mutex};
    const N: i64 = 6_000;
    const STEP_MS: i64 = 100;
    const AHEAD_MS: i64 = 600_000;
    const BATCH: usize = 64;
    // After the records: one per partition that moves the watermark past every window.
    const END_MS: i64 = 3_000_000;
    let drift = Duration::from_secs(30);
    let brokers = required_brokers();
    let input = unique_topic("wm-split-align");
    create_topic(&brokers, &input, 2).expect("create the topic");
    let ts = |p: i64, i: i64| p * AHEAD_MS + i * STEP_MS;
    produce_timestamps(&brokers, &input, 1, (0..N).map(|i| ts(1, i)));
    produce_timestamps(&brokers, &input, 0, (0..100).map(|i| ts(0, i)));

    let mut cfg = EnvConfig::default();
    cfg.batch_size = BATCH;
    let env = Env::with_config(cfg);
    let decode = |r: &weir_kafka::RecordView<'_>| Ok((r.partition, decode_ts(r)?));
    let source = KafkaSource::new(KafkaConfig::new(brokers.as_str()), input.clone(), decode);
    let wm = WatermarkStrategy::for_monotonous_timestamps()
        .with_timestamp_assigner(|r: &(i32, i64)| r.1)
        .with_watermark_interval(Duration::ZERO)
        .with_watermark_alignment("kafka-split", drift, Duration::from_millis(2));
    // Records in the order the source read them: (partition, timestamp).
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let got = env
        .kafka_source_with_watermarks("timestamps", source, wm)
        .set_parallelism(1)
        .filter(move |r: &(i32, i64)| {
            seen.lock().expect("not poisoned").push(*r);
            true
        })
        .key_by(|r: &(i32, i64)| (r.0, r.1.div_euclid(60_000)))
        .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
        .aggregate_window(CountPairs, |k: &(i32, i64), _: &_, n: u64| (k.0, k.1, n))
        .collect();
    let job = env.start("kafka-split-align").expect("the job starts");
    // The behind partition's records arrive while the job runs (the pace is not asserted).
    for chunk in (100..N).step_by(500) {
        std::thread::sleep(Duration::from_millis(10));
        let to = (chunk + 500).min(N);
        produce_timestamps(&brokers, &input, 0, (chunk..to).map(|i| ts(0, i)));
    }
    produce_timestamps(&brokers, &input, 0, [END_MS].into_iter());
    produce_timestamps(&brokers, &input, 1, [END_MS].into_iter());
    let per_minute = (60_000 / STEP_MS) as u64;
    let reference: Vec<(i32, i64, u64)> = (0..2)
        .flat_map(|p| (0..N * STEP_MS / 60_000).map(move |m| (p, p as i64 * 10 + m, per_minute)))
        .collect();
    common::wait_until("every window below the end fired", || {
        got.len() >= reference.len()
    });
    job.cancel();
    let _ = job.wait();
    let mut got = got.take();
    got.sort_unstable();
    assert_eq!(got, reference, "every record in its window");

    // Records of the ahead partition read further ahead of the other's newest than the drift
    // and a batch, while the other still had records to read: at most the first batch (read
    // before any watermark was known).
    let order = order.lock().expect("not poisoned").clone();
    let bound = drift.as_millis() as i64 + BATCH as i64 * STEP_MS;
    let (mut newest0, mut read0, mut too_far) = (i64::MIN, 0, 0);
    for (p, t) in &order {
        if *p == 0 {
            newest0 = *t;
            read0 += 1;
        } else if read0 < N && *t > newest0.saturating_add(bound) {
            too_far += 1;
        }
    }
    assert_eq!(order.len(), 2 * N as usize + 2, "each record read once");
    assert!(
        too_far <= BATCH,
        "{too_far} records of the ahead partition were read more than {bound} ms ahead of \
         the other"
    );
}

/// Counts a window's records.
#[derive(Clone)]
struct CountPairs;

impl AggregateFunction<(i32, i64), u64> for CountPairs {
    type Acc = u64;
    fn add(&self, acc: &mut u64, _: (i32, i64)) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: &u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}
