//! The job the Kafka fault tests run as a process of its own, to SIGKILL it: ids read from a
//! topic (value: the id in decimal), mapped, written to another topic exactly once.
//!
//! `kafka_job BROKERS INPUT OUTPUT CHECKPOINT_DIR PREFIX [options]`, options:
//! `--bounded` (end at the input's offsets at the start), `--rate N` (records/s, to keep
//! the job running while a test acts), `--die-before-commit N` (abort the process when
//! checkpoint N is complete, before the sink commits its transaction), `--parallelism N`.
//! It resumes from the newest checkpoint an earlier run left in `CHECKPOINT_DIR`.

use std::time::Duration;
use weir_kafka::KafkaEnvExt;

use weir::sink::Sink;
use weir::{Env, EnvConfig, RestoreLatest, SinkError};
use weir_kafka::{KafkaConfig, KafkaSink, KafkaSource, StartFrom};

/// A sink that aborts the process when checkpoint `die_at` completes, before the wrapped
/// sink commits: the kill "after checkpoint N completes, before its commit".
struct DieBeforeCommit<S> {
    inner: S,
    die_at: Option<u64>,
}

impl<T, S: Sink<T>> Sink<T> for DieBeforeCommit<S> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        self.inner.write_batch(batch)
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.inner.finish()
    }
    fn pre_commit(&mut self, checkpoint: u64) -> Result<Option<Vec<u8>>, SinkError> {
        self.inner.pre_commit(checkpoint)
    }
    fn commit(&mut self, checkpoint: u64) -> Result<(), SinkError> {
        if self
            .die_at
            .is_some_and(|n| checkpoint >= n && checkpoint != u64::MAX)
        {
            eprintln!("kafka_job: dying at the commit of checkpoint {checkpoint}");
            std::process::abort();
        }
        self.inner.commit(checkpoint)
    }
    fn initialize(&mut self, restored: Option<&[u8]>) -> Result<(), SinkError> {
        self.inner.initialize(restored)
    }
}

/// The optional flags.
struct Flags {
    bounded: bool,
    rate: Option<f64>,
    die_at: Option<u64>,
    parallelism: usize,
}

impl Flags {
    /// Parses `args`; exits with the usage on a bad one.
    fn parse(args: &[String], usage: &str) -> Flags {
        let mut bounded = false;
        let mut rate = None;
        let mut die_at = None;
        let mut parallelism = 2;
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let mut value = |name: &str| -> u64 {
                match rest.next().map(|v| v.parse::<u64>()) {
                    Some(Ok(v)) => v,
                    _ => {
                        eprintln!("{name} needs a number; usage: {usage}");
                        std::process::exit(2);
                    }
                }
            };
            match flag.as_str() {
                "--bounded" => bounded = true,
                "--rate" => rate = Some(value("--rate") as f64),
                "--die-before-commit" => die_at = Some(value("--die-before-commit")),
                "--parallelism" => parallelism = value("--parallelism") as usize,
                other => {
                    eprintln!("unknown argument `{other}`; usage: {usage}");
                    std::process::exit(2);
                }
            }
        }
        Flags {
            bounded,
            rate,
            die_at,
            parallelism,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "kafka_job BROKERS INPUT OUTPUT CHECKPOINT_DIR PREFIX [--bounded] [--rate N] \
                 [--die-before-commit N] [--parallelism N]";
    if args.len() < 5 {
        eprintln!("usage: {usage}");
        std::process::exit(2);
    }
    let (brokers, input, output, dir, prefix) = (&args[0], &args[1], &args[2], &args[3], &args[4]);
    let Flags {
        bounded,
        rate,
        die_at,
        parallelism,
    } = Flags::parse(&args[5..], usage);

    let mut cfg = EnvConfig::default();
    cfg.default_parallelism = parallelism;
    cfg.checkpoint.interval = Some(Duration::from_millis(200));
    cfg.checkpoint.directory = dir.into();
    cfg.checkpoint.restore_latest = Some(RestoreLatest::if_any(&cfg.checkpoint.directory));
    if let Some(r) = rate {
        cfg.rate_control.enabled = true;
        cfg.rate_control.initial_rate = Some(r);
        cfg.rate_control.min_rate = r;
        cfg.rate_control.max_rate = Some(r);
    }
    let env = Env::with_config(cfg);
    let kafka = KafkaConfig::new(brokers.as_str());
    let mut source = KafkaSource::new(kafka.clone(), input.as_str(), |r| {
        let text = std::str::from_utf8(r.value.unwrap_or_default()).map_err(|e| e.to_string())?;
        text.parse::<u64>().map_err(|e| format!("`{text}`: {e}"))
    })
    .start_from(StartFrom::Earliest);
    if bounded {
        source = source.bounded();
    }
    let sink: KafkaSink<u64> =
        KafkaSink::new(kafka, output.as_str(), |id: &u64, out: &mut Vec<u8>| {
            out.extend_from_slice(id.to_string().as_bytes());
            Ok(())
        })
        // Id `i` was read from input partition `i % 8` (the tests' layout): the same output
        // partition, so each has one writer (see kafka_group.rs for why).
        .partition_by(|id| *id)
        .exactly_once(prefix.as_str());
    if let Err(e) = sink.check_config(&env.config()) {
        eprintln!("kafka_job: {e}");
        std::process::exit(2);
    }
    env.kafka_source("ids", source)
        .uid("ids")
        .map(|id| id)
        .uid("identity")
        .add_sink("out", move |cx| {
            Ok(DieBeforeCommit {
                inner: sink.subtask_sink(cx)?,
                die_at,
            })
        })
        .uid("out");
    match env.execute("kafka-job") {
        Ok(_) => println!("kafka_job: finished"),
        Err(e) => {
            eprintln!("kafka_job: {e}");
            std::process::exit(1);
        }
    }
}
