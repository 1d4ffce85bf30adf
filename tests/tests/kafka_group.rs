//! Scale-out: several processes in one consumer group, each running a job per assigned
//! partition (`weir_kafka::KafkaGroup`, the `kafka_group` binary), against a real broker
//! (`WEIR_KAFKA_BROKERS`). 200k ids on 8 partitions, exactly-once sinks, checkpoints every
//! 200 ms; a member SIGKILLed; a member SIGSTOPped past its session and resumed (fenced); a
//! member joining and leaving (2 → 3 → 2 processes). Each ends with every id once at a
//! read_committed reader that applies the markers, and no transaction left open.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_kafka::testing::{
    assert_no_transaction_left_open, create_topic, ids, partition_offsets, produce_ids,
    read_committed, required_brokers, unique_topic,
};
use weir_testing::ExactlyOnce;

const IDS: u64 = 200_000;
const PARTITIONS: i32 = 8;

/// A member process, its stdin (closed to make it leave) and the lines it printed (stdout:
/// its events; stderr: its warnings, shown when a test fails).
struct Member {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl Member {
    fn start(name: &'static str, args: &[&str], rate: u64) -> Member {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kafka_group"))
            .args(args)
            .args(["--rate", &rate.to_string()])
            .env("WEIR_STDERR_WARNINGS", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a member");
        let stdin = child.stdin.take();
        let lines = collect_lines(child.stdout.take().expect("its stdout"));
        let warnings = collect_lines(child.stderr.take().expect("its stderr"));
        Member {
            name,
            child,
            stdin,
            lines,
            warnings,
        }
    }

    /// Its events and warnings, for a failed test's report.
    fn report(&self) -> String {
        let warnings = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        format!(
            "member {}: events {:?}\n  its stderr ({} lines):\n    {}",
            self.name,
            self.events(),
            warnings.len(),
            warnings.join("\n    ")
        )
    }

    /// `(kind, partition, at_ms)` of its events so far.
    fn events(&self) -> Vec<(String, i32, u64)> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|l| {
                let mut w = l.strip_prefix("event ")?.split(' ');
                Some((
                    w.next()?.to_owned(),
                    w.next()?.parse().ok()?,
                    w.next()?.parse().ok()?,
                ))
            })
            .collect()
    }

    /// The partitions it runs now, by its events.
    fn owned(&self) -> Vec<i32> {
        let mut owned = std::collections::BTreeSet::new();
        for (kind, p, _) in self.events() {
            match kind.as_str() {
                "started" => {
                    owned.insert(p);
                }
                "stopped" | "lost" => {
                    owned.remove(&p);
                }
                _ => {} // failed: restarted if still its own
            }
        }
        owned.into_iter().collect()
    }

    /// Leaves the group (stdin closed) and waits for the process.
    fn leave(&mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for a member");
        assert!(status.success(), "member {} left with {status}", self.name);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines `from` gives, collected by a thread of their own.
fn collect_lines(from: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

/// A test's topics and group.
struct Topics {
    brokers: String,
    input: String,
    output: String,
    group: String,
}

/// Polls `done` until it holds; past [`common::TIMEOUT`] fails naming `what`, after printing
/// the members' events and warnings and the state of the topics.
fn poll_until(what: &str, members: &[&Member], topics: &Topics, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::TIMEOUT;
    while !done() {
        if Instant::now() >= deadline {
            for m in members {
                eprintln!("{}", m.report());
            }
            eprintln!("{}", topics.report());
            panic!("waited in vain: {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Topics {
    /// Where the partitions' sources are (the positions they commit for lag monitoring), and
    /// what the output holds per partition: its offsets (an open transaction holds the
    /// stable offset back), the committed records, and the ids missing (partition `p` gets
    /// the ids `p mod PARTITIONS`: the sinks keep the input partition).
    fn report(&self) -> String {
        let (brokers, output) = (&self.brokers, &self.output);
        let mut report = format!(
            "input {}, positions (group {}-positions): ",
            self.input, self.group
        );
        report.push_str(&self.positions());
        report.push_str(&format!("\noutput {output}:"));
        match partition_offsets(brokers, output) {
            Ok(offsets) => report.push_str(&format!("\n  offsets {offsets:?}")),
            Err(e) => report.push_str(&format!("\n  offsets: {e}")),
        }
        let records = match read_committed(brokers, output) {
            Ok(r) => r,
            Err(e) => return format!("{report}\n  records: {e}"),
        };
        for p in 0..PARTITIONS {
            let mut got: Vec<u64> = records
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| ids(std::slice::from_ref(r))[0])
                .collect();
            let committed = got.len();
            got.sort_unstable();
            got.dedup();
            let missing: Vec<u64> = (0..IDS)
                .filter(|id| id % PARTITIONS as u64 == p as u64)
                .filter(|id| got.binary_search(id).is_err())
                .collect();
            report.push_str(&format!(
                "\n  partition {p}: {committed} committed, {} distinct, {} missing{}",
                got.len(),
                missing.len(),
                match (missing.first(), missing.last()) {
                    (Some(first), Some(last)) => format!(" ({first}..={last})"),
                    _ => String::new(),
                }
            ));
        }
        report
    }

    /// The offsets the partitions' sources committed, by partition.
    fn positions(&self) -> String {
        use weir_kafka::testing::rdkafka::consumer::{BaseConsumer, Consumer};
        use weir_kafka::testing::rdkafka::{ClientConfig, TopicPartitionList};
        let consumer: BaseConsumer = match ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("{}-positions", self.group))
            .set("enable.auto.commit", "false")
            .create()
        {
            Ok(c) => c,
            Err(e) => return format!("no consumer: {e}"),
        };
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(&self.input, p);
        }
        match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
            Ok(got) => format!(
                "{:?}",
                got.elements()
                    .iter()
                    .map(|e| (e.partition(), e.offset()))
                    .collect::<Vec<_>>()
            ),
            Err(e) => format!("cannot read them: {e}"),
        }
    }
}

fn committed(brokers: &str, output: &str) -> usize {
    read_committed(brokers, output)
        .expect("read the output")
        .len()
}

/// Every id once, and (within 10 s, the sinks idle) no transaction left open.
fn assert_exactly_once(topics: &Topics, members: &[&Member]) {
    let (brokers, output) = (&topics.brokers, &topics.output);
    poll_until("every id committed", members, topics, || {
        committed(brokers, output) as u64 >= IDS
    });
    let records = read_committed(brokers, output).expect("read the output");
    let report = ExactlyOnce::new(0..IDS).check(ids(&records));
    if !report.is_exactly_once() {
        for m in members {
            eprintln!("{}", m.report());
        }
        eprintln!("{}", topics.report());
        eprintln!("{}", duplicated_runs(&records));
    }
    report.assert_exactly_once();
    assert_no_transaction_left_open(brokers, output, Duration::from_secs(10));
}

/// Where the duplicated ids sit in the output: per partition, each run of consecutive
/// offsets holding ids already seen earlier in that partition, with the offsets of the
/// first copies (which transaction wrote twice tells which member, and when).
fn duplicated_runs(records: &[weir_kafka::testing::CommittedRecord]) -> String {
    let mut out = String::from(
        "duplicated records (partition: offsets of the second copies <- of the first):",
    );
    for p in 0..PARTITIONS {
        let mut first = std::collections::HashMap::new();
        let mut run: Option<(i64, i64, i64, i64)> = None;
        let mut producers = std::collections::BTreeMap::new();
        let mut runs = Vec::new();
        for r in records.iter().filter(|r| r.partition == p) {
            let id = ids(std::slice::from_ref(r))[0];
            match first.get(&id) {
                None => {
                    first.insert(id, r.offset);
                }
                Some(&at) => {
                    let original = records
                        .iter()
                        .find(|o| o.partition == p && o.offset == at)
                        .map(|o| (o.producer, o.committed_by_epoch));
                    *producers
                        .entry((original, (r.producer, r.committed_by_epoch)))
                        .or_insert(0u64) += 1;
                    match &mut run {
                        Some((_, end, _, end0)) if *end + 1 == r.offset => {
                            *end = r.offset;
                            *end0 = at;
                        }
                        _ => {
                            runs.extend(run.take());
                            run = Some((r.offset, r.offset, at, at));
                        }
                    }
                }
            }
        }
        runs.extend(run);
        for (start, end, start0, end0) in runs {
            out.push_str(&format!("\n  {p}: {start}..={end} <- {start0}..={end0}"));
        }
        for ((first, second), n) in producers {
            out.push_str(&format!(
                "\n  {p}: {n} copies: first by (producer, epoch) and marker epoch {first:?}, second by {second:?}"
            ));
        }
    }
    out
}

/// For each partition that moved: the gap from its stop in one member to its start in the
/// next, printed.
fn print_gaps(members: &[&Member]) {
    let mut all: Vec<(u64, &str, String, i32)> = Vec::new();
    for m in members {
        for (kind, p, at) in m.events() {
            all.push((at, m.name, kind, p));
        }
    }
    all.sort();
    for p in 0..PARTITIONS {
        let mut stopped: Option<(u64, &str)> = None;
        for (at, name, kind, q) in &all {
            if *q != p {
                continue;
            }
            match kind.as_str() {
                "stopped" | "lost" => stopped = Some((*at, name)),
                "started" => {
                    if let Some((t, from)) = stopped.take() {
                        println!("partition {p} moved {from} -> {name}: gap {} ms", at - t);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The tests run one at a time: each starts several processes, and on two cores three at
/// once take twice as long. Prints how long the test took once it ran alone (the issue holds
/// each to under 60 s; not asserted, machines differ).
struct OneAtATime {
    _turn: std::sync::MutexGuard<'static, ()>,
    tag: String,
    start: Instant,
}

impl Drop for OneAtATime {
    fn drop(&mut self) {
        eprintln!("{}: {:.1} s", self.tag, self.start.elapsed().as_secs_f64());
    }
}

fn setup(tag: &str) -> (Topics, common::TempDir, OneAtATime) {
    let brokers = required_brokers();
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let one = OneAtATime {
        _turn: turn,
        tag: tag.to_owned(),
        start: Instant::now(),
    };
    let input = unique_topic(&format!("{tag}-in"));
    let output = unique_topic(&format!("{tag}-out"));
    create_topic(&brokers, &input, PARTITIONS).expect("create the input");
    create_topic(&brokers, &output, PARTITIONS).expect("create the output");
    produce_ids(&brokers, &input, PARTITIONS, 0..IDS).expect("produce the input");
    let dir = common::TempDir::new(tag);
    let group = unique_topic(tag);
    let topics = Topics {
        brokers,
        input,
        output,
        group,
    };
    (topics, dir, one)
}

/// A member's arguments: brokers, input, output, state directory, group.
fn member_args(topics: &Topics, dir: &common::TempDir) -> [String; 5] {
    [
        topics.brokers.clone(),
        topics.input.clone(),
        topics.output.clone(),
        dir.path().to_string_lossy().into_owned(),
        topics.group.clone(),
    ]
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn two_members_one_sigkilled() {
    one_of_two_members_sigkilled(1);
}

/// The same with each partition's job at parallelism 2 (its reader, two subtasks of the
/// operator after it, one writer).
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn two_members_one_sigkilled_with_partition_jobs_at_parallelism_two() {
    one_of_two_members_sigkilled(2);
}

fn one_of_two_members_sigkilled(parallelism: usize) {
    let (topics, dir, _one) = setup(&format!("group-kill-p{parallelism}"));
    let (brokers, output) = (&topics.brokers, &topics.output);
    let mut args = member_args(&topics, &dir).to_vec();
    args.extend(["--parallelism".to_owned(), parallelism.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // 5k records/s per partition: the input lasts about 5 s.
    let a = Member::start("a", &args, 5_000);
    let mut b = Member::start("b", &args, 5_000);
    poll_until(
        "both members run partitions, and some output is committed",
        &[&a, &b],
        &topics,
        || !a.owned().is_empty() && !b.owned().is_empty() && committed(brokers, output) > 0,
    );
    assert!(
        (committed(brokers, output) as u64) < IDS,
        "killed mid-stream"
    );
    let before = partition_offsets(brokers, output).expect("offsets");
    b.child.kill().expect("SIGKILL b");
    let kill = Instant::now();
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    // How long b's transactions stay open: until every partition's stable offset passes
    // where its log ended at the kill (a's later transactions start after that). Printed,
    // not asserted: it is the session timeout plus the broker's rebalance.
    let settled = || {
        let now = partition_offsets(brokers, output).expect("offsets");
        before.iter().all(|b| {
            now.iter()
                .any(|n| n.partition == b.partition && n.last_stable >= b.high_watermark)
        })
    };
    while !settled() && kill.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "the killed member's transactions ended (stable offset past the kill's end on every \
         partition) {} ms after the kill{}",
        kill.elapsed().as_millis(),
        if settled() { "" } else { ": not within 30 s" }
    );
    poll_until("a runs every partition", &[&a, &b], &topics, || {
        a.owned().len() == PARTITIONS as usize
    });
    for (kind, p, at) in a.events() {
        if kind == "started" && at >= killed_at {
            println!(
                "partition {p} moved b -> a after the kill: {} ms",
                at - killed_at
            );
        }
    }
    assert_exactly_once(&topics, &[&a, &b]);
    let mut a = a;
    a.leave();
}

#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_member_joins_and_leaves_two_three_two() {
    let (topics, dir, _one) = setup("group-rebalance");
    let args = member_args(&topics, &dir);
    let args = args.each_ref().map(String::as_str);
    // 2k records/s per partition: the input lasts about 12 s.
    let mut a = Member::start("a", &args, 2_000);
    let mut b = Member::start("b", &args, 2_000);
    poll_until("a and b share the partitions", &[&a, &b], &topics, || {
        a.owned().len() + b.owned().len() == PARTITIONS as usize
            && !a.owned().is_empty()
            && !b.owned().is_empty()
    });
    let mut c = Member::start("c", &args, 2_000);
    poll_until("c runs partitions", &[&a, &b, &c], &topics, || {
        !c.owned().is_empty()
    });
    let moved_in = c.owned().len();
    c.leave();
    poll_until(
        "a and b run every partition again",
        &[&a, &b, &c],
        &topics,
        || a.owned().len() + b.owned().len() == PARTITIONS as usize,
    );
    assert!(moved_in > 0);
    assert_exactly_once(&topics, &[&a, &b, &c]);
    a.leave();
    b.leave();
    print_gaps(&[&a, &b, &c]);
}

/// The members' sinks write each input partition to its own output partition
/// (`partition_by`): on the test broker, a commit overlapping another producer's open
/// transaction is deferred, and a member frozen right after it had its mark lost and its
/// records resent (3 runs in 6 duplicated 825–999 ids before that).
#[test]
#[cfg_attr(
    not(feature = "kafka-broker"),
    ignore = "needs the Kafka test broker: tests/run starts it (feature kafka-broker)"
)]
fn a_stopped_member_resumed_after_its_session_timed_out_is_fenced() {
    let (topics, dir, _one) = setup("group-zombie");
    let (brokers, output) = (&topics.brokers, &topics.output);
    let args = member_args(&topics, &dir);
    let args = args.each_ref().map(String::as_str);
    let a = Member::start("a", &args, 5_000);
    let mut b = Member::start("b", &args, 5_000);
    poll_until(
        "both members run partitions, and some output is committed",
        &[&a, &b],
        &topics,
        || !a.owned().is_empty() && !b.owned().is_empty() && committed(brokers, output) > 0,
    );
    let pid = b.child.id().to_string();
    let signal = |sig: &str| {
        let status = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    poll_until(
        "a runs every partition (b's session timed out)",
        &[&a, &b],
        &topics,
        || a.owned().len() == PARTITIONS as usize,
    );
    // The zombie wakes up with open transactions and jobs that go on: its commits fail
    // (fenced), and it finds its partitions lost.
    signal("-CONT");
    assert_exactly_once(&topics, &[&a, &b]);
    println!("{}", a.report());
    println!("{}", b.report());
    let mut a = a;
    a.leave();
    println!("the zombie's events after it woke: {:?}", b.events());
    b.child.kill().expect("kill b");
}
