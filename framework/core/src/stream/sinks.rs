//! The ends of a stream: [`DataStream::add_sink`] and the built-in sinks over it (collect,
//! discard, print, text and JSON-lines files, exactly once or not), and [`SinkStream`], the
//! settings of a sink operator. Not the sinks themselves (`sink`).

use crate::erased::AnyBox;
use crate::graph::{Built, Node, OpEnv};
use crate::operator::BoxOutput;
use crate::sink::file::{DisplayLines, FormatLines, JsonLines, LineFileSink, StagedLineSink};
use crate::sink::{CollectSink, DiscardSink, Sink, SinkContext, SinkOp, StdoutSink};
use crate::Data;

use super::DataStream;

impl<T: Data> DataStream<T> {
    /// Adds a sink made per subtask by `factory`.
    pub fn add_sink<S, F>(self, name: &str, factory: F) -> SinkStream
    where
        S: Sink<T>,
        F: Fn(&SinkContext) -> Result<S, crate::error::SinkError> + Send + 'static,
    {
        let part = self.partitioning();
        let builder = Box::new(move |env: &OpEnv, _outputs: Vec<AnyBox>| {
            use crate::checkpoint::StartPoint;
            let cx = SinkContext {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                parallelism: env.info.parallelism,
                checkpointing: env.config.checkpoint.interval.is_some(),
            };
            let mut sink = factory(&cx).map_err(|source| crate::error::TaskError::Sink {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                source,
            })?;
            // A sink error, typed (a refused restore, a broker that cannot be reached), not a
            // state error: its class decides whether a restart may help.
            sink.initialize(env.restored.as_deref()).map_err(|source| {
                crate::error::TaskError::Sink {
                    uid: env.info.uid.clone(),
                    subtask: env.info.subtask,
                    source,
                }
            })?;
            // After `initialize`, which committed what a restored checkpoint staged.
            let epoch = match env.start {
                StartPoint::Promoted => env.counters.sink_epoch(),
                StartPoint::Checkpoint(id) => env.counters.sink_restarted(Some(id)),
                StartPoint::Fresh => env.counters.sink_restarted(None),
            };
            let op: BoxOutput<T> = Box::new(SinkOp {
                since_barrier: 0,
                epoch,
                sink: Box::new(sink),
                info: env.info.clone(),
                counters: env.counters.clone(),
                fault: env
                    .config
                    .faults
                    .for_instance(&env.info.uid, env.info.subtask),
            });
            Ok(Built::Inputs {
                heads: vec![Box::new(op) as AnyBox],
                selection: None,
            })
        });
        let mut g = self.graph.borrow_mut();
        let id = g.add_node(Node {
            name: name.to_owned(),
            uid: None,
            parallelism: None,
            part_of: None,
            is_source: false,
            n_inputs: 1,
            side_outputs: None,
            ports: Vec::new(),
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            rescale: crate::rescale::Rule::Refused(
                "it is a sink: what it staged for the next commit belongs to its subtask".into(),
            ),
        });
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        SinkStream {
            stream: DataStream::<()>::new(self.graph.clone(), id, 0),
        }
    }

    /// Collects every record into memory; read them after the job with the returned handle.
    pub fn collect(self) -> CollectSink<T> {
        let handle = CollectSink::default();
        let h = handle.clone();
        self.add_sink("collect", move |cx| Ok(h.instance(cx)));
        handle
    }

    /// Collects into an existing handle: a job resumed from a savepoint of another job that
    /// collected into `sink` commits each record once across both (commits are idempotent
    /// per subtask and checkpoint).
    pub fn collect_into(self, sink: &CollectSink<T>) -> SinkStream {
        let h = sink.clone();
        self.add_sink("collect", move |cx| Ok(h.instance(cx)))
    }

    /// A sink that writes files into `dir`: `make` builds each subtask's sink over the
    /// directory, which `execute` checks is writable before any record moves.
    fn file_sink<S, F>(self, name: &str, dir: &std::path::Path, make: F) -> SinkStream
    where
        S: Sink<T>,
        F: Fn(&std::path::Path, &SinkContext) -> Result<S, crate::error::SinkError>
            + Send
            + 'static,
    {
        let owned = dir.to_owned();
        self.add_sink(name, move |cx| make(&owned, cx))
            .writes_into(dir)
    }

    /// Drops every record (counted).
    pub fn discard(self) -> SinkStream {
        self.add_sink("discard", |_| Ok(DiscardSink))
    }
}

impl<T: Data + std::fmt::Display> DataStream<T> {
    /// Writes each record's `Display` form as a line to stdout.
    pub fn print(self) -> SinkStream {
        self.add_sink("print", |_| Ok(StdoutSink))
    }

    /// Writes each record's `Display` form as a line, exactly once with checkpoints on (two-
    /// phase commit): each checkpoint interval is staged in a hidden file and becomes visible
    /// as `part-{uid}-{subtask}-{checkpoint}` in `dir` only when its checkpoint completes (the
    /// last interval as `part-{uid}-{subtask}-final` at the end of the input). Readers see
    /// only committed output; a restored job commits what its checkpoint staged and drops the
    /// failed attempt's staging files. For records without `Display` (tuples, serde
    /// structs), [`write_text_exactly_once_with`](Self::write_text_exactly_once_with) or
    /// [`write_jsonl_exactly_once`](Self::write_jsonl_exactly_once).
    pub fn write_text_exactly_once(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, DisplayLines)
        })
    }

    /// Writes each record's `Display` form as a line to `part-{uid}-{subtask}` in `dir`.
    pub fn write_text(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, DisplayLines)
        })
    }
}

impl<T: Data> DataStream<T> {
    /// Writes each record as a line of JSON to `part-{uid}-{subtask}` in `dir`.
    pub fn write_jsonl(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_jsonl", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, JsonLines)
        })
    }

    /// Writes each record as a line of JSON, exactly once with checkpoints on: the files and
    /// their commit are those of [`write_text_exactly_once`](Self::write_text_exactly_once)
    /// (`part-{uid}-{subtask}-{checkpoint}` once the checkpoint completes, `…-final` at the
    /// end). A record that cannot be encoded fails the job, naming the file.
    ///
    /// ```
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Alert { card: u64, amount_cents: u64 }
    ///
    /// let dir = std::env::temp_dir().join(format!("weir-doc-jsonl-eo-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// env.generate(3, |i| Alert { card: i, amount_cents: 100 * i })
    ///     .write_jsonl_exactly_once(&dir)
    ///     .uid("alerts");
    /// env.execute("alerts").unwrap();
    /// let text = std::fs::read_to_string(dir.join("part-alerts-0-final")).unwrap();
    /// assert_eq!(text.lines().next(), Some(r#"{"card":0,"amount_cents":0}"#));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn write_jsonl_exactly_once(self, dir: impl AsRef<std::path::Path>) -> SinkStream {
        self.file_sink("write_jsonl", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, JsonLines)
        })
    }

    /// Like [`write_text`](Self::write_text), each record formatted by `format`, which
    /// appends the line (without its newline) to the buffer it is given: no `Display`
    /// wrapper needed, and no allocation per record (the buffer is reused).
    ///
    /// ```
    /// use std::fmt::Write;
    /// let dir = std::env::temp_dir().join(format!("weir-doc-text-with-{}", std::process::id()));
    /// let env = weir::Env::new();
    /// env.from_collection(vec![("a".to_string(), 1u64), ("b".to_string(), 2)])
    ///     .write_text_with(&dir, |(word, n): &(String, u64), out: &mut String| {
    ///         write!(out, "{word}\t{n}")
    ///     })
    ///     .uid("counts");
    /// env.execute("counts").unwrap();
    /// let text = std::fs::read_to_string(dir.join("part-counts-0")).unwrap();
    /// assert_eq!(text, "a\t1\nb\t2\n");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn write_text_with<F>(self, dir: impl AsRef<std::path::Path>, format: F) -> SinkStream
    where
        F: Fn(&T, &mut String) -> std::fmt::Result + Send + Sync + 'static,
    {
        let format = std::sync::Arc::new(format);
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            LineFileSink::create(dir, cx, FormatLines::new(format.clone()))
        })
    }

    /// Like [`write_text_exactly_once`](Self::write_text_exactly_once), each record
    /// formatted by `format` (as in [`write_text_with`](Self::write_text_with)).
    pub fn write_text_exactly_once_with<F>(
        self,
        dir: impl AsRef<std::path::Path>,
        format: F,
    ) -> SinkStream
    where
        F: Fn(&T, &mut String) -> std::fmt::Result + Send + Sync + 'static,
    {
        let format = std::sync::Arc::new(format);
        self.file_sink("write_text", dir.as_ref(), move |dir, cx| {
            StagedLineSink::create(dir, cx, FormatLines::new(format.clone()))
        })
    }
}

/// The end of a stream: a sink. Settings apply to the sink operator.
pub struct SinkStream {
    stream: DataStream<()>,
}

impl SinkStream {
    /// Sets the sink's uid.
    pub fn uid(self, uid: &str) -> Self {
        SinkStream {
            stream: self.stream.uid(uid),
        }
    }
    /// Sets the sink's display name.
    pub fn name(self, name: &str) -> Self {
        SinkStream {
            stream: self.stream.name(name),
        }
    }
    /// Sets the sink's parallelism.
    pub fn set_parallelism(self, parallelism: usize) -> Self {
        SinkStream {
            stream: self.stream.set_parallelism(parallelism),
        }
    }

    /// Declares a directory the sink writes into: the job checks, before any record moves,
    /// that it can be created and written (and fails naming it and the OS error if not). The
    /// file sinks (`write_text`, `write_jsonl`, ...) declare theirs; call this for a custom
    /// sink made with `add_sink`.
    pub fn writes_into(self, dir: impl AsRef<std::path::Path>) -> Self {
        let dir = dir.as_ref().to_owned();
        self.stream.graph.borrow_mut().output_dirs.push(dir);
        self
    }
}
