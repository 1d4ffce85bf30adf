//! The Kafka test tools against the test broker (tansu, which `.ci/run` starts; skipped without
//! `WEIR_KAFKA_BROKERS`): `weir_kafka::testing::read_committed` applies transaction markers
//! itself, and the broker behaves as the exactly-once Kafka sink needs: a lingering
//! transaction of a crashed producer is aborted when its successor initialises; offsets sent
//! to a transaction are committed with it and only with it; an old producer is fenced.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir_kafka::testing::rdkafka::config::ClientConfig;
use weir_kafka::testing::rdkafka::consumer::{BaseConsumer, Consumer};
use weir_kafka::testing::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use weir_kafka::testing::rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_kafka::testing::rdkafka::{Offset, TopicPartitionList};
use weir_kafka::testing::{self as kafka, PartitionOffsets};

/// What a transactional call may take on the test broker (it answers in milliseconds).
const TXN_TIMEOUT: Duration = Duration::from_secs(20);

fn txn_producer(brokers: &str, transactional_id: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("transactional.id", transactional_id)
        .set("linger.ms", "5")
        .create()
        .expect("a transactional producer")
}

/// Sends `ids` (key and value the id in decimal, partition id % partitions) and waits until
/// they are written (flush), inside whatever transaction is open.
fn send_ids(producer: &BaseProducer, topic: &str, partitions: i32, ids: std::ops::Range<u64>) {
    for id in ids {
        let text = id.to_string();
        let partition = i32::try_from(id % u64::try_from(partitions).unwrap()).unwrap();
        producer
            .send(
                BaseRecord::to(topic)
                    .key(text.as_str())
                    .payload(text.as_str())
                    .partition(partition),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(TXN_TIMEOUT).expect("flush");
}

fn offsets(brokers: &str, topic: &str, partition: i32) -> PartitionOffsets {
    kafka::partition_offsets(brokers, topic)
        .expect("partition offsets")
        .into_iter()
        .find(|p| p.partition == partition)
        .expect("the partition")
}

/// Polls `f` until it returns `Some`, or panics naming `what` after `limit`.
fn poll_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} in vain for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sorted_ids(brokers: &str, topic: &str) -> Vec<u64> {
    let mut ids = kafka::ids(&kafka::read_committed(brokers, topic).expect("read_committed"));
    ids.sort_unstable();
    ids
}

/// Committed, aborted, non-transactional and open: the reader sees exactly the committed and
/// the non-transactional records, each once; the open transaction holds the last stable
/// offset back until it ends.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn read_committed_applies_the_transaction_markers() {
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("reader");
    kafka::create_topic(&brokers, &topic, 3).unwrap();

    let producer = txn_producer(&brokers, &kafka::unique_topic("reader-txn"));
    producer.init_transactions(TXN_TIMEOUT).unwrap();
    producer.begin_transaction().unwrap();
    send_ids(&producer, &topic, 3, 0..100);
    producer.commit_transaction(TXN_TIMEOUT).unwrap();
    producer.begin_transaction().unwrap();
    send_ids(&producer, &topic, 3, 100..200);
    producer.abort_transaction(TXN_TIMEOUT).unwrap();
    kafka::produce_ids(&brokers, &topic, 3, 200..300).unwrap();
    let open = txn_producer(&brokers, &kafka::unique_topic("reader-open"));
    open.init_transactions(TXN_TIMEOUT).unwrap();
    open.begin_transaction().unwrap();
    send_ids(&open, &topic, 3, 300..310);

    let expected: Vec<u64> = (0..100).chain(200..300).collect();
    assert_eq!(sorted_ids(&brokers, &topic), expected);
    let records = kafka::read_committed(&brokers, &topic).unwrap();
    assert!(records
        .windows(2)
        .all(|w| (w[0].partition, w[0].offset) < (w[1].partition, w[1].offset)));
    for p in kafka::partition_offsets(&brokers, &topic).unwrap() {
        // Every partition got some of 300..310: each has the open transaction.
        assert!(p.last_stable < p.high_watermark, "{p:?}");
    }

    // Once it is aborted, nothing is open and the visible records are the same.
    open.abort_transaction(TXN_TIMEOUT).unwrap();
    for p in kafka::partition_offsets(&brokers, &topic).unwrap() {
        assert_eq!(p.last_stable, p.high_watermark, "{p:?}");
    }
    assert_eq!(sorted_ids(&brokers, &topic), expected);
}

/// The child of `a_crashed_producers_transaction_is_aborted_by_its_successor`: opens a
/// transaction, writes ids 0..50 to partition 0, says READY and waits to be killed.
const CRASH_CHILD: &str = "WEIR_KAFKA_CRASH_CHILD";

fn crash_child(spec: &str) {
    let (brokers, rest) = spec.split_once('|').unwrap();
    let (topic, transactional_id) = rest.split_once('|').unwrap();
    let producer = txn_producer(brokers, transactional_id);
    producer.init_transactions(TXN_TIMEOUT).unwrap();
    producer.begin_transaction().unwrap();
    send_ids(&producer, topic, 1, 0..50);
    println!("READY");
    loop {
        std::thread::park();
    }
}

/// Runs this test binary's `test` alone with `env` set, and waits for its READY line.
fn spawn_child(test: &str, env: (&str, &str)) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("READY") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        panic!("the child producer did not get its transaction open in 30 s");
    }
    child
}

/// A producer killed (SIGKILL) inside a transaction leaves it open; a new producer with the
/// same transactional.id, at init_transactions, has it aborted: the ABORT marker is written
/// and the last stable offset reaches the high watermark.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_crashed_producers_transaction_is_aborted_by_its_successor() {
    if let Ok(spec) = std::env::var(CRASH_CHILD) {
        crash_child(&spec);
        return;
    }
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("crash");
    kafka::create_topic(&brokers, &topic, 1).unwrap();
    let transactional_id = kafka::unique_topic("crash-txn");
    let spec = format!("{brokers}|{topic}|{transactional_id}");
    let mut child = spawn_child(
        "a_crashed_producers_transaction_is_aborted_by_its_successor",
        (CRASH_CHILD, &spec),
    );
    child.kill().unwrap(); // SIGKILL: no abort, no close
    child.wait().unwrap();

    let before = offsets(&brokers, &topic, 0);
    eprintln!("after the kill: {before:?}");
    assert_eq!(before.high_watermark, 50);
    assert!(before.last_stable < before.high_watermark, "{before:?}");
    assert_eq!(sorted_ids(&brokers, &topic), Vec::<u64>::new());

    let successor = txn_producer(&brokers, &transactional_id);
    let started = Instant::now();
    successor.init_transactions(TXN_TIMEOUT).unwrap();
    eprintln!("successor init_transactions took {:?}", started.elapsed());
    let after = poll_until("the lingering transaction's abort", TXN_TIMEOUT, || {
        let p = offsets(&brokers, &topic, 0);
        (p.last_stable == p.high_watermark).then_some(p)
    });
    eprintln!(
        "lingering transaction ended {:?} after init started: {after:?}",
        started.elapsed()
    );
    assert_eq!(
        after.high_watermark, 51,
        "one ABORT marker after the 50 records"
    );
    assert_eq!(sorted_ids(&brokers, &topic), Vec::<u64>::new());

    // The successor works as usual.
    successor.begin_transaction().unwrap();
    send_ids(&successor, &topic, 1, 100..110);
    successor.commit_transaction(TXN_TIMEOUT).unwrap();
    assert_eq!(sorted_ids(&brokers, &topic), (100..110).collect::<Vec<_>>());
}

fn group_consumer(brokers: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer")
}

/// The offset group `group` has committed for (topic, 0), read by a fresh consumer.
fn committed(brokers: &str, group: &str, topic: &str) -> Offset {
    let consumer = group_consumer(brokers, group);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let got = consumer
        .committed_offsets(tpl, TXN_TIMEOUT)
        .expect("committed offsets");
    got.find_partition(topic, 0).expect("partition 0").offset()
}

/// Offsets sent to a transaction (for a group that never joined: the sink's source does not
/// use group membership) are committed with the transaction, and not when it is aborted.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn offsets_sent_to_a_transaction_commit_with_it() {
    let brokers = kafka::required_brokers();
    let input = kafka::unique_topic("offsets-in");
    let output = kafka::unique_topic("offsets-out");
    kafka::create_topic(&brokers, &input, 1).unwrap();
    kafka::create_topic(&brokers, &output, 1).unwrap();
    kafka::produce_ids(&brokers, &input, 1, 0..100).unwrap();
    let group = kafka::unique_topic("offsets-group");
    assert_eq!(committed(&brokers, &group, &input), Offset::Invalid);

    let consumer = group_consumer(&brokers, &group);
    let metadata = consumer.group_metadata().expect("group metadata");
    let producer = txn_producer(&brokers, &kafka::unique_topic("offsets-txn"));
    producer.init_transactions(TXN_TIMEOUT).unwrap();
    let in_transaction = |offset: i64, commit: bool, ids: std::ops::Range<u64>| {
        producer.begin_transaction().unwrap();
        send_ids(&producer, &output, 1, ids);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&input, 0, Offset::Offset(offset))
            .unwrap();
        producer
            .send_offsets_to_transaction(&tpl, &metadata, TXN_TIMEOUT)
            .unwrap();
        if commit {
            producer.commit_transaction(TXN_TIMEOUT).unwrap();
        } else {
            producer.abort_transaction(TXN_TIMEOUT).unwrap();
        }
    };

    in_transaction(10, true, 0..5);
    assert_eq!(committed(&brokers, &group, &input), Offset::Offset(10));
    in_transaction(20, false, 5..10);
    assert_eq!(
        committed(&brokers, &group, &input),
        Offset::Offset(10),
        "an aborted transaction's offsets must not be committed"
    );
    in_transaction(30, true, 10..15);
    assert_eq!(committed(&brokers, &group, &input), Offset::Offset(30));
    let mut expected: Vec<u64> = (0..5).chain(10..15).collect();
    expected.sort_unstable();
    assert_eq!(sorted_ids(&brokers, &output), expected);
}

/// The old producer of `a_successor_fences_the_old_producer`, fenced: its open transaction of
/// ids 0..20 was aborted by the successor's init. Returns the successor.
fn fenced_pair(brokers: &str, topic: &str) -> (BaseProducer, BaseProducer) {
    kafka::create_topic(brokers, topic, 1).unwrap();
    let transactional_id = kafka::unique_topic("fence-txn");
    let old = txn_producer(brokers, &transactional_id);
    old.init_transactions(TXN_TIMEOUT).unwrap();
    old.begin_transaction().unwrap();
    send_ids(&old, topic, 1, 0..20);

    let new = txn_producer(brokers, &transactional_id);
    let started = Instant::now();
    new.init_transactions(TXN_TIMEOUT).unwrap();
    eprintln!("successor init_transactions took {:?}", started.elapsed());
    let after_init = offsets(brokers, topic, 0);
    assert_eq!(
        (after_init.high_watermark, after_init.last_stable),
        (21, 21),
        "the old producer's open transaction is aborted (20 records and the ABORT marker)"
    );
    (old, new)
}

/// The fenced producer's commit error: printed, and checked as on Kafka unless the broker is
/// tansu (`kafka::broker_is_tansu`: `WEIR_KAFKA_BROKER_KIND=tansu`), where `on_tansu` is the code it gives instead.
fn check_fenced(what: &str, result: Result<(), KafkaError>, on_tansu: RDKafkaErrorCode) {
    let error = result.expect_err("the fenced producer's commit must fail");
    let KafkaError::Transaction(e) = &error else {
        panic!("expected a transaction error, got {error:?}");
    };
    eprintln!(
        "{what}: code {:?} fatal {} retriable {} requires abort {}",
        e.code(),
        e.is_fatal(),
        e.is_retriable(),
        e.txn_requires_abort()
    );
    if kafka::broker_is_tansu() {
        assert_eq!(e.code(), on_tansu, "{e:?}");
    } else {
        assert!(
            matches!(
                e.code(),
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            ),
            "{e:?}"
        );
    }
}

/// Nothing of the old producer is visible, and the successor works.
fn check_successor(brokers: &str, topic: &str, new: &BaseProducer) {
    let p = offsets(brokers, topic, 0);
    assert_eq!(p.last_stable, p.high_watermark, "{p:?}");
    assert_eq!(sorted_ids(brokers, topic), Vec::<u64>::new());
    new.begin_transaction().unwrap();
    send_ids(new, topic, 1, 100..110);
    new.commit_transaction(TXN_TIMEOUT).unwrap();
    assert_eq!(sorted_ids(brokers, topic), (100..110).collect::<Vec<_>>());
}

/// A second producer with the same transactional.id fences the first: its init aborts the
/// first's open transaction (ABORT marker), and the first's commit fails.
///
/// On Kafka the old producer's commit fails at once with a fencing error. tansu 0.6 detects
/// the fencing (its log says `ProducerFenced`) but does not answer the EndTxn with the error:
/// librdkafka retries, and the commit ends by its timeout with the retriable
/// `OperationTimedOut` (5 s here).
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_successor_fences_the_old_producers_commit() {
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("fence-commit");
    let (old, new) = fenced_pair(&brokers, &topic);
    let started = Instant::now();
    let result = old.commit_transaction(Duration::from_secs(5));
    let what = format!("the fenced producer's commit ({:?})", started.elapsed());
    check_fenced(&what, result, RDKafkaErrorCode::OperationTimedOut);
    check_successor(&brokers, &topic, &new);
}

/// The fenced producer writes on: its records do not land in the log, and its commit fails at
/// once, on tansu with `ProducerFenced` as an abortable error (not fatal).
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_successor_fences_the_old_producers_writes() {
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("fence-write");
    let (old, new) = fenced_pair(&brokers, &topic);
    for id in 20..30u64 {
        let text = id.to_string();
        let sent = old.send(
            BaseRecord::to(&topic)
                .key(&text)
                .payload(&text)
                .partition(0),
        );
        if let Err((e, _)) = sent {
            eprintln!("the fenced producer's send of {id} failed: {e:?}");
        }
    }
    let flushed = old.flush(Duration::from_secs(5));
    let p = offsets(&brokers, &topic, 0);
    eprintln!("the fenced producer's flush: {flushed:?}; log now {p:?}");
    assert_eq!(
        p.high_watermark, 21,
        "no record of the fenced producer lands"
    );
    let started = Instant::now();
    let result = old.commit_transaction(Duration::from_secs(5));
    let what = format!("the fenced producer's commit ({:?})", started.elapsed());
    check_fenced(&what, result, RDKafkaErrorCode::ProducerFenced);
    let aborted = old.abort_transaction(Duration::from_secs(5));
    eprintln!("the fenced producer's abort: {aborted:?}");
    check_successor(&brokers, &topic, &new);
}

/// Dropping an rdkafka producer inside a transaction does not end it (librdkafka sends no
/// EndTxn at destroy; rdkafka's Drop purges what is unsent and flushes): to the broker this is
/// a crash. The transaction stays open (tansu never times transactions out) until a producer
/// with the same transactional.id initialises.
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn dropping_a_producer_leaves_its_transaction_open() {
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("drop");
    kafka::create_topic(&brokers, &topic, 1).unwrap();
    let transactional_id = kafka::unique_topic("drop-txn");
    let producer = txn_producer(&brokers, &transactional_id);
    producer.init_transactions(TXN_TIMEOUT).unwrap();
    producer.begin_transaction().unwrap();
    send_ids(&producer, &topic, 1, 0..10);
    drop(producer);
    let p = offsets(&brokers, &topic, 0);
    assert_eq!(
        (p.high_watermark, p.last_stable),
        (10, 0),
        "still open after the drop"
    );

    let successor = txn_producer(&brokers, &transactional_id);
    successor.init_transactions(TXN_TIMEOUT).unwrap();
    let p = offsets(&brokers, &topic, 0);
    assert_eq!(
        (p.high_watermark, p.last_stable),
        (11, 11),
        "aborted by the successor"
    );
    assert_eq!(sorted_ids(&brokers, &topic), Vec::<u64>::new());
}

/// The offsets the helpers report are right where the broker's ListOffsets is not: after 50
/// records in one batch the high watermark is 50, and an open transaction's first offset is
/// the last stable offset. (tansu 0.6 answers ListOffsets with the last batch's base offset +
/// 1, and with 0 for read_committed while a transaction is open; librdkafka's watermark query
/// uses ListOffsets: printed for comparison.)
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn partition_offsets_are_the_logs() {
    let brokers = kafka::required_brokers();
    let topic = kafka::unique_topic("offsets");
    kafka::create_topic(&brokers, &topic, 1).unwrap();
    let watermarks = || {
        let consumer = group_consumer(&brokers, &kafka::unique_topic("watermarks"));
        consumer.fetch_watermarks(&topic, 0, TXN_TIMEOUT).unwrap()
    };
    kafka::produce_ids(&brokers, &topic, 1, 0..50).unwrap();
    let p = offsets(&brokers, &topic, 0);
    eprintln!(
        "50 records: {p:?}; ListOffsets {:?}; rdkafka fetch_watermarks {:?}",
        kafka::list_offsets(&brokers, &topic).unwrap(),
        watermarks()
    );
    assert_eq!((p.high_watermark, p.last_stable), (50, 50));

    let producer = txn_producer(&brokers, &kafka::unique_topic("offsets-txn"));
    producer.init_transactions(TXN_TIMEOUT).unwrap();
    producer.begin_transaction().unwrap();
    send_ids(&producer, &topic, 1, 100..150);
    let p = offsets(&brokers, &topic, 0);
    eprintln!(
        "and 50 in an open transaction: {p:?}; ListOffsets {:?}; rdkafka fetch_watermarks {:?}",
        kafka::list_offsets(&brokers, &topic).unwrap(),
        watermarks()
    );
    assert_eq!((p.high_watermark, p.last_stable), (100, 50));
    producer.commit_transaction(TXN_TIMEOUT).unwrap();
    let p = offsets(&brokers, &topic, 0);
    assert_eq!(
        (p.high_watermark, p.last_stable),
        (101, 101),
        "and the COMMIT marker"
    );
    assert_eq!(
        sorted_ids(&brokers, &topic),
        (0..50).chain(100..150).collect::<Vec<_>>()
    );
}
