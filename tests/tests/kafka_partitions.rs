//! A partition added to a running job's topic (Flink's `KafkaSource` partition discovery): the
//! source finds it within its discovery interval and reads it from its start, nothing lost
//! or duplicated at an exactly-once sink.
//!
//! The test broker, tansu 0.6, has no CreatePartitions. It keeps its metadata in an object
//! store, though, and reads it again at every request: this test runs a tansu of its own on
//! the S3 test server (moto) and adds the partition where tansu keeps the topic's partition
//! count (`clusters/<cluster>/meta.json` in its bucket), with a conditional write as tansu's
//! own writes are. The broker then answers Metadata with the new partition and takes
//! produce and fetch requests for it, as a Kafka broker does after CreatePartitions.
//!
//! Needs tansu (`WEIR_TANSU`) and moto (`WEIR_S3_SERVER`), which `tests/run` installs (feature
//! `tansu-s3`); without them the test is reported as ignored, and fails if it is run anyway.

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir::{Env, EnvConfig};
use weir_kafka::testing::{
    assert_no_transaction_left_open, create_topic, decode_id, encode_id, ids, partition_offsets,
    produce_ids, read_committed, unique_topic,
};
use weir_kafka::{KafkaConfig, KafkaEnvExt, KafkaSink, KafkaSource, KafkaStreamExt};
use weir_testing::s3::S3Server;
use weir_testing::ExactlyOnce;

const BUCKET: &str = "tansu";
/// Where tansu keeps its topics' metadata (its default cluster id).
const META: &str = "clusters/tansu_cluster/meta.json";

/// A tansu broker of its own, its storage in a bucket of `s3`; stopped when dropped.
struct TansuOnS3 {
    child: Child,
    brokers: String,
}

impl TansuOnS3 {
    fn start(s3: &S3Server) -> TansuOnS3 {
        let program = std::env::var("WEIR_TANSU").expect(
            "WEIR_TANSU: the tansu binary (tests/run installs it with the Kafka test broker)",
        );
        s3.create_bucket(BUCKET).expect("create tansu's bucket");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&program)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", &format!("s3://{BUCKET}/")])
            .envs(s3.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tansu `{program}`: {e}"));
        let broker = TansuOnS3 {
            child,
            brokers: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    /// Gives `topic` `partitions` partitions where tansu keeps its partition count; retried
    /// when tansu wrote the object in between (412).
    fn grow(&self, s3: &S3Server, topic: &str, partitions: i32) {
        for _ in 0..50 {
            let (body, etag) = s3.get_object(BUCKET, META).expect("read tansu's metadata");
            let mut meta: serde_json::Value =
                serde_json::from_slice(&body).expect("tansu's metadata is JSON");
            let count = &mut meta["topics"][topic]["topic"]["num_partitions"];
            assert!(
                count.as_i64().is_some_and(|n| n < i64::from(partitions)),
                "topic {topic} in tansu's metadata: {count}"
            );
            *count = partitions.into();
            let body = serde_json::to_vec(&meta).expect("encode");
            if s3
                .put_object_if_match(BUCKET, META, &body, &etag)
                .expect("write tansu's metadata")
            {
                return;
            }
        }
        panic!("tansu's metadata changed under 50 writes in a row");
    }
}

impl Drop for TansuOnS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The partitions the broker shows for `topic` (by Metadata).
fn partitions_of(brokers: &str, topic: &str) -> usize {
    partition_offsets(brokers, topic).map_or(0, |p| p.len())
}

/// Two partitions, ids 0..2,000; a job (p = 2, checkpoints every 200 ms, discovery every
/// 500 ms) into an exactly-once sink; once they are committed, the topic gets a third
/// partition and ids 2,000..5,000 go to all three (id % 3). Every id once at the sink, the
/// new partition's among them.
#[test]
#[cfg_attr(
    not(feature = "tansu-s3"),
    ignore = "needs tansu and moto: tests/run installs them (feature tansu-s3)"
)]
fn a_partition_added_while_the_job_runs_is_read_from_its_start() {
    const BEFORE: u64 = 2_000;
    const ALL: u64 = 5_000;
    let s3 = S3Server::start().expect("the S3 test server");
    let tansu = TansuOnS3::start(&s3);
    let brokers = tansu.brokers.clone();
    let input = unique_topic("grow-in");
    let output = unique_topic("grow-out");
    create_topic(&brokers, &input, 2).expect("create the input topic");
    create_topic(&brokers, &output, 2).expect("create the output topic");
    produce_ids(&brokers, &input, 2, 0..BEFORE).expect("produce the first ids");

    let dir = common::TempDir::new("kafka-grow");
    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = 2;
    cfg.checkpoint.interval = Some(Duration::from_millis(200));
    cfg.checkpoint.directory = dir.path().into();
    let env = Env::with_config(cfg);
    let kafka = KafkaConfig::new(brokers.as_str());
    let source = KafkaSource::new(kafka.clone(), input.as_str(), decode_id)
        .discover_every(Some(Duration::from_millis(500)));
    let sink = KafkaSink::new(kafka, output.as_str(), encode_id).exactly_once(unique_topic("grow"));
    env.kafka_source("ids", source)
        .uid("ids")
        .sink_to_kafka("out", sink)
        .uid("out");
    let job = env.start("kafka-grow").expect("the job starts");
    let committed = || ids(&read_committed(&brokers, &output).expect("read the output"));
    common::wait_until("the first ids committed", || {
        committed().len() as u64 >= BEFORE
    });

    tansu.grow(&s3, &input, 3);
    common::wait_until("the broker shows the third partition", || {
        partitions_of(&brokers, &input) == 3
    });
    let grown = Instant::now();
    produce_ids(&brokers, &input, 3, BEFORE..ALL).expect("produce to three partitions");
    let new_partition = |id: &u64| *id >= BEFORE && id % 3 == 2;
    common::wait_until("an id of the new partition committed", || {
        committed().iter().any(new_partition)
    });
    eprintln!(
        "first id of the new partition committed {} ms after the broker showed it \
         (discovery every 500 ms, checkpoints every 200 ms)",
        grown.elapsed().as_millis()
    );
    common::wait_until("every id committed", || committed().len() as u64 >= ALL);
    common::two_more_checkpoints(&job);
    job.cancel();
    let _ = job.wait();

    let got = committed();
    assert_eq!(
        got.iter().filter(|id| new_partition(id)).count() as u64,
        (BEFORE..ALL).filter(new_partition).count() as u64,
        "the new partition's ids"
    );
    ExactlyOnce::new(0..ALL).check(got).assert_exactly_once();
    assert_no_transaction_left_open(&brokers, &output, Duration::from_secs(10));
}
