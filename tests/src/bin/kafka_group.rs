//! One member of a Kafka consumer group running a job per assigned partition (ids read,
//! written to another topic exactly once), for the group tests to start, kill, stop and
//! resume as processes.
//!
//! `kafka_group BROKERS INPUT OUTPUT STATE_DIR GROUP [--rate N] [--session-ms N]`: runs until
//! its stdin ends, then leaves the group (each partition's job checkpoints and stops).
//! Prints one line per partition event: `event started|stopped|lost P AT_MS`; logs to
//! stderr (`RUST_LOG`, by default warnings and the Kafka modules' info).

use std::io::{Read, Write};
use std::time::Duration;
use weir_kafka::KafkaStreamExt;

use weir::EnvConfig;
use weir_kafka::{KafkaConfig, KafkaGroup, KafkaSink, KafkaSource, TaskEvent};

/// The optional flags.
struct Flags {
    rate: Option<f64>,
    session: Duration,
    parallelism: usize,
}

impl Flags {
    /// Parses `args`; exits with the usage on a bad one.
    fn parse(args: &[String], usage: &str) -> Flags {
        let mut rate = None;
        let mut session = Duration::from_secs(6);
        let mut parallelism = 1;
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let value = rest.next().and_then(|v| v.parse::<u64>().ok());
            match (flag.as_str(), value) {
                ("--rate", Some(v)) => rate = Some(v as f64),
                ("--session-ms", Some(v)) => session = Duration::from_millis(v),
                ("--parallelism", Some(v)) if v > 0 => parallelism = v as usize,
                _ => {
                    eprintln!("bad argument `{flag}`; usage: {usage}");
                    std::process::exit(2);
                }
            }
        }
        Flags {
            rate,
            session,
            parallelism,
        }
    }
}

/// Each partition's job: checkpoints every 200 ms on one arbiter, at `rate` if given.
fn config(rate: Option<f64>) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    cfg.checkpoint.interval = Some(Duration::from_millis(200));
    cfg.arbiters = 1;
    if let Some(r) = rate {
        cfg.rate_control.enabled = true;
        cfg.rate_control.initial_rate = Some(r);
        cfg.rate_control.min_rate = r;
        cfg.rate_control.max_rate = Some(r);
    }
    cfg
}

/// Prints the events after the first `printed` as lines, and counts them printed.
fn print_events(events: &[TaskEvent], printed: &mut usize) {
    let mut stdout = std::io::stdout().lock();
    for e in &events[*printed..] {
        let line = match e {
            TaskEvent::Started { partition, at_ms } => {
                format!("event started {partition} {at_ms}")
            }
            TaskEvent::Stopped { partition, at_ms } => {
                format!("event stopped {partition} {at_ms}")
            }
            TaskEvent::Lost { partition, at_ms } => format!("event lost {partition} {at_ms}"),
            TaskEvent::Failed { partition, at_ms } => {
                format!("event failed {partition} {at_ms}")
            }
            _ => format!("event {e:?}"),
        };
        let _ = writeln!(stdout, "{line}");
    }
    let _ = stdout.flush();
    *printed = events.len();
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,weir_kafka=info")),
        )
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "kafka_group BROKERS INPUT OUTPUT STATE_DIR GROUP [--rate N] [--session-ms N] [--parallelism N]";
    if args.len() < 5 {
        eprintln!("usage: {usage}");
        std::process::exit(2);
    }
    let (brokers, input, output, dir, group) = (&args[0], &args[1], &args[2], &args[3], &args[4]);
    let Flags {
        rate,
        session,
        parallelism,
    } = Flags::parse(&args[5..], usage);
    let kafka = KafkaConfig::new(brokers.as_str());
    let source = KafkaSource::new(kafka.clone(), input.as_str(), |r| {
        let text = std::str::from_utf8(r.value.unwrap_or_default()).map_err(|e| e.to_string())?;
        text.parse::<u64>().map_err(|e| format!("`{text}`: {e}"))
    });
    let out = output.clone();
    let member = KafkaGroup::new(
        source,
        group.as_str(),
        dir.as_str(),
        move |_env, ids, task| {
            let sink = KafkaSink::new(kafka.clone(), out.as_str(), |id: &u64, b: &mut Vec<u8>| {
                b.extend_from_slice(id.to_string().as_bytes());
                Ok(())
            })
            // The input partition's records go to the same output partition: one writer
            // per partition (the test broker defers the commit of a transaction that
            // overlaps another producer's open one on a partition, and may then lose its
            // offsets: see the book's "The test broker").
            .partition_by({
                let p = task.partition as u64;
                move |_| p
            })
            .exactly_once(task.job.clone())
            .lease(task.lease.clone());
            // At `--parallelism` above 1 the identity runs on that many subtasks (fed round
            // robin by the partition's one reader); the sink stays one writer.
            ids.map(|id| id)
                .uid("identity")
                .sink_to_kafka("out", sink)
                .uid("out")
                .set_parallelism(1);
        },
    )
    .parallelism(parallelism)
    .config(config(rate))
    .session_timeout(session)
    .start();
    let member = match member {
        Ok(m) => m,
        Err(e) => {
            eprintln!("kafka_group: {e}");
            std::process::exit(1);
        }
    };
    // Stdin's end is the signal to leave.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = done_tx.send(());
    });
    let mut printed = 0;
    while done_rx.recv_timeout(Duration::from_millis(20)).is_err() {
        print_events(&member.events(), &mut printed);
    }
    let events = member.stop();
    print_events(&events, &mut printed);
    println!("kafka_group: left");
}
