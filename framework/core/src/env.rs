//! The job builder: [`Env`] holds the graph being built, adds sources, and runs jobs.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::config::EnvConfig;
use crate::controller::JobResult;
use crate::erased::{unbox, AnyBox};
use crate::error::{JobError, PlanError, SourceError, TaskError};
use crate::graph::{Built, Graph, Node, OpEnv, Port};
use crate::job::{start, JobHandle};
use crate::operator::BoxOutput;
use crate::source::collection::CollectionSource;
use crate::source::generator::GeneratorSource;
use crate::source::jsonl::{
    BadLine, FailingJsonl, JsonlReader, Line, LineReader, LocatedLines, SkippingJsonl,
    SkippingLines, TextLines,
};
use crate::source::{Source, SourceContext, SourceDriver, SourceWaker};
use crate::stream::{DataStream, SharedGraph};
use crate::Data;

/// Builds and runs jobs.
///
/// ```
/// use weir::Env;
/// let env = Env::new();
/// let out = env.generate(10, |i| i * i).filter(|x| x % 2 == 0).collect();
/// let result = env.execute("squares").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![0, 4, 16, 36, 64]);
/// assert_eq!(result.operators.len(), 3);
/// ```
pub struct Env {
    graph: SharedGraph,
    config: RefCell<EnvConfig>,
    /// Serve the job's REST API from its start ([`Env::serve_rest`]).
    #[cfg(feature = "rest")]
    rest: RefCell<Option<crate::rest::RestConfig>>,
    /// Graph versions a running job can be replaced by ([`Env::register_graph`]).
    graphs: RefCell<Vec<(String, crate::job::GraphFactory)>>,
}

impl Default for Env {
    fn default() -> Self {
        Env::new()
    }
}

impl Env {
    /// An environment with the default [`EnvConfig`].
    pub fn new() -> Self {
        Env::with_config(EnvConfig::default())
    }

    /// An environment with `config` (checked when the job starts).
    pub fn with_config(config: EnvConfig) -> Self {
        Env {
            graph: Rc::new(RefCell::new(Graph::default())),
            config: RefCell::new(config),
            #[cfg(feature = "rest")]
            rest: RefCell::new(None),
            graphs: RefCell::new(Vec::new()),
        }
    }

    /// Registers a version of the job's graph by name: the job started from this `Env` can
    /// be switched to it while it runs ([`JobMonitor::replace_with`](crate::JobMonitor::replace_with), `POST
    /// /jobs/{id}/replace {"graph": name}`). `build` adds the graph's operators to the `Env`
    /// it is given, as the app built the first version; operators keep their state by uid.
    pub fn register_graph(&self, name: &str, build: impl Fn(&Env) + Send + Sync + 'static) {
        let mut graphs = self.graphs.borrow_mut();
        graphs.retain(|(n, _)| n != name);
        let factory: crate::job::GraphFactory = std::sync::Arc::new(move |cfg: &EnvConfig| {
            let env = Env::with_config(cfg.clone());
            build(&env);
            env.take_graph()
        });
        graphs.push((name.to_owned(), factory));
    }

    /// The graph built so far, moved out (a replacement's).
    pub(crate) fn take_graph(&self) -> Graph {
        std::mem::take(&mut *self.graph.borrow_mut())
    }

    /// Serves the job's REST API (`weir::rest`) while it runs, from a server started with
    /// `cfg` when the job starts; [`JobHandle::rest`] gives its address and token. A server
    /// that cannot start (address taken, public address without a token) keeps the job from
    /// starting, with that error.
    ///
    /// ```
    /// use weir::rest::RestConfig;
    /// let env = weir::Env::new();
    /// env.serve_rest(RestConfig::default());
    /// env.generate(u64::MAX, |i| i).add_sink("slow", |_| Ok(weir_testing::PacedSink::new(1e5)));
    /// let job = env.start("served").unwrap();
    /// let rest = job.rest().unwrap();
    /// println!("http://{}/jobs/{} (token in {:?})", rest.addr(), job.id(), rest.token_file());
    /// job.cancel();
    /// let _ = job.wait();
    /// ```
    #[cfg(feature = "rest")]
    pub fn serve_rest(&self, cfg: crate::rest::RestConfig) {
        *self.rest.borrow_mut() = Some(cfg);
    }

    /// The configuration.
    pub fn config(&self) -> EnvConfig {
        self.config.borrow().clone()
    }

    /// Replaces the configuration (for jobs started afterwards).
    pub fn set_config(&self, config: EnvConfig) {
        *self.config.borrow_mut() = config;
    }

    /// Adds a source made per subtask by `factory`.
    pub fn add_source<T, S, F>(&self, name: &str, factory: F) -> DataStream<T>
    where
        T: Data,
        S: Source<T>,
        F: Fn(SourceContext) -> Result<S, SourceError> + Send + 'static,
    {
        self.add_configured_source(name, move |cx, _| factory(cx))
    }

    /// Adds a source whose records get their event time and watermarks from `strategy`
    /// (Flink's `fromSource(source, watermarkStrategy, name)`): each subtask emits the
    /// watermark after its batches, at most once per watermark interval, and goes idle after
    /// the strategy's idleness timeout with nothing read. The stream's timestamps are the
    /// strategy's, for the windows downstream.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::time::WatermarkStrategy;
    ///
    /// let env = weir::Env::new();
    /// let wm = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(1))
    ///     .with_timestamp_assigner(|x: &u64| *x as i64);
    /// env.add_source_with_watermarks(
    ///     "ids",
    ///     |cx| Ok(weir::source::generator::GeneratorSource::new(|i| i, cx.share_of(100))),
    ///     wm,
    /// )
    /// .discard();
    /// env.execute("with-watermarks").unwrap();
    /// ```
    pub fn add_source_with_watermarks<T, S, F>(
        &self,
        name: &str,
        factory: F,
        strategy: crate::time::WatermarkStrategy<T>,
    ) -> DataStream<T>
    where
        T: Data,
        S: Source<T>,
        F: Fn(SourceContext) -> Result<S, SourceError> + Send + 'static,
    {
        if strategy.assigner().is_none() {
            self.graph.borrow_mut().errors.push(PlanError::BadConfig {
                key: "watermark strategy",
                message: format!(
                    "source `{name}`: the strategy has no timestamp assigner (with_timestamp_assigner)"
                ),
            });
        }
        let timestamps = strategy.assigner().cloned();
        let align = strategy.alignment().and_then(|a| {
            let mut g = self.graph.borrow_mut();
            let group = match a.update_interval.is_zero() {
                true => Err(format!(
                    "source `{name}`: watermark alignment group `{}` has an update interval of 0; \
                     give a paused source a time to look again after (Flink's default: 1 s)",
                    a.group
                )),
                false => g.alignment.get(a),
            };
            match group {
                Ok(group) => Some((group, a.update_interval)),
                Err(message) => {
                    g.errors.push(PlanError::BadConfig {
                        key: "watermark alignment",
                        message,
                    });
                    None
                }
            }
        });
        let mut stream =
            self.add_source_inner(name, move |cx, _| factory(cx), Some(strategy), align);
        stream.timestamps = timestamps;
        stream
    }

    /// [`add_source`](Self::add_source) with a factory that also reads the job's config.
    fn add_configured_source<T, S, F>(&self, name: &str, factory: F) -> DataStream<T>
    where
        T: Data,
        S: Source<T>,
        F: Fn(SourceContext, &EnvConfig) -> Result<S, SourceError> + Send + 'static,
    {
        self.add_source_inner(name, factory, None, None)
    }

    fn add_source_inner<T, S, F>(
        &self,
        name: &str,
        factory: F,
        strategy: Option<crate::time::WatermarkStrategy<T>>,
        align: Option<(
            std::sync::Arc<crate::time::alignment::Group>,
            std::time::Duration,
        )>,
    ) -> DataStream<T>
    where
        T: Data,
        S: Source<T>,
        F: Fn(SourceContext, &EnvConfig) -> Result<S, SourceError> + Send + 'static,
    {
        let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
            let out = unbox::<BoxOutput<T>>(outputs.remove(0));
            let cx = SourceContext {
                subtask: env.info.subtask,
                parallelism: env.info.parallelism,
            };
            let mut source = factory(cx, &env.config).map_err(|source| TaskError::Source {
                uid: env.info.uid.clone(),
                subtask: env.info.subtask,
                source,
            })?;
            if let Some(position) = &env.restored {
                source.seek(position).map_err(|e| env.restore_error(e))?;
            }
            let waker = SourceWaker::new();
            source.set_waker(waker.clone());
            Ok(Built::Source(Box::new(SourceDriver {
                waker,
                source: Box::new(source),
                buf: Vec::with_capacity(env.config.batch_size),
                out,
                batch_size: env.config.batch_size,
                info: env.info.clone(),
                counters: env.counters.clone(),
                limiter: None,
                ended: false,
                fault: env
                    .config
                    .faults
                    .for_instance(&env.info.uid, env.info.subtask),
                watermarks: strategy.as_ref().and_then(|s| s.generator()),
                align: align
                    .as_ref()
                    .map(|(group, every)| crate::source::Aligned::new(group.join(), *every)),
            })))
        });
        let id = self.graph.borrow_mut().add_node(Node {
            name: name.to_owned(),
            uid: None,
            parallelism: None,
            part_of: None,
            is_source: true,
            n_inputs: 0,
            side_outputs: None,
            ports: vec![Port::<T>::boxed()],
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            rescale: crate::rescale::Rule::Refused(
                "it is a source: its read position belongs to its subtask's share of the input"
                    .into(),
            ),
        });
        DataStream::new(self.graph.clone(), id, 0)
    }

    /// `n` records `f(0), f(1), ..., f(n - 1)`; each subtask generates a contiguous share.
    pub fn generate<T, F>(&self, n: u64, f: F) -> DataStream<T>
    where
        T: Data,
        F: FnMut(u64) -> T + Clone + Send + 'static,
    {
        self.add_source("generate", move |cx: SourceContext| {
            Ok(GeneratorSource::new(f.clone(), cx.share_of(n)))
        })
    }

    /// The elements of `items`, in order; each subtask emits a contiguous share.
    pub fn from_collection<T: Data>(&self, items: Vec<T>) -> DataStream<T> {
        let items = std::sync::Arc::new(items);
        self.add_source("collection", move |cx: SourceContext| {
            let r = cx.share_of(items.len() as u64);
            Ok(CollectionSource::new(
                items.clone(),
                r.start as usize..r.end as usize,
            ))
        })
    }

    /// Records of type `T` from a JSON Lines file or directory. A malformed line (too long,
    /// a NUL byte, not UTF-8, not a `T`: see [`jsonl`](crate::source::jsonl)) fails the job
    /// with an error naming the file, line and byte offset ([`MalformedPolicy::Fail`]).
    ///
    /// [`MalformedPolicy::Fail`]: crate::source::jsonl::MalformedPolicy::Fail
    pub fn read_jsonl<T: Data>(&self, path: impl AsRef<Path>) -> DataStream<T> {
        let path: PathBuf = path.as_ref().to_owned();
        self.add_configured_source("read_jsonl", move |cx, cfg| {
            JsonlReader::new(&path, cx)
                .map(|r| FailingJsonl(r.with_max_line_bytes(cfg.max_line_bytes)))
        })
    }

    /// Like [`read_jsonl`](Self::read_jsonl), but malformed lines are skipped, counted
    /// (`records_rejected` of the source) and emitted on the second stream, each with its
    /// file, line and byte offset ([`MalformedPolicy::Skip`]).
    ///
    /// [`MalformedPolicy::Skip`]: crate::source::jsonl::MalformedPolicy::Skip
    pub fn read_jsonl_skipping<T: Data>(
        &self,
        path: impl AsRef<Path>,
    ) -> (DataStream<T>, DataStream<BadLine>) {
        let path: PathBuf = path.as_ref().to_owned();
        let raw: DataStream<Result<T, BadLine>> =
            self.add_configured_source("read_jsonl", move |cx, cfg| {
                JsonlReader::new(&path, cx)
                    .map(|r| SkippingJsonl(r.with_max_line_bytes(cfg.max_line_bytes)))
            });
        raw.split_named("malformed", true)
    }

    /// The lines of a text file or directory, without line endings; blank lines are passed
    /// over. A malformed line (longer than `EnvConfig::max_line_bytes`, a NUL byte, not
    /// UTF-8) fails the job with an error naming the file, line and byte offset.
    pub fn read_lines(&self, path: impl AsRef<Path>) -> DataStream<String> {
        let path: PathBuf = path.as_ref().to_owned();
        self.add_configured_source("read_lines", move |cx, cfg| {
            LineReader::new(&path, cx).map(|r| TextLines(r.with_max_line_bytes(cfg.max_line_bytes)))
        })
    }

    /// Like [`read_lines`](Self::read_lines), but malformed lines are skipped, counted
    /// (`records_rejected`) and emitted on the second stream with their file, line and byte
    /// offset.
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("weir-doc-lines-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let file = dir.join("in.txt");
    /// std::fs::write(&file, b"good\nbad \xff\nalso good").unwrap();
    /// let env = weir::Env::new();
    /// let (good, bad) = env.read_lines_skipping(&file);
    /// let (good, bad) = (good.collect(), bad.collect());
    /// env.execute("lines").unwrap();
    /// assert_eq!(good.take(), ["good", "also good"]);
    /// let bad: Vec<weir::BadLine> = bad.take();
    /// assert_eq!((bad[0].line, bad[0].byte_offset, bad[0].kind), (2, 5, weir::BadLineKind::NotUtf8));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn read_lines_skipping(
        &self,
        path: impl AsRef<Path>,
    ) -> (DataStream<String>, DataStream<BadLine>) {
        let path: PathBuf = path.as_ref().to_owned();
        let raw: DataStream<Result<String, BadLine>> =
            self.add_configured_source("read_lines", move |cx, cfg| {
                LineReader::new(&path, cx)
                    .map(|r| SkippingLines(r.with_max_line_bytes(cfg.max_line_bytes)))
            });
        raw.split_named("malformed", true)
    }

    /// Like [`read_lines_skipping`](Self::read_lines_skipping), but every line comes with its
    /// file, line number and byte offset ([`Line`]), so that what a later operator refuses
    /// can be traced to its place in the input too.
    pub fn read_located_lines_skipping(
        &self,
        path: impl AsRef<Path>,
    ) -> (DataStream<Line>, DataStream<BadLine>) {
        let path: PathBuf = path.as_ref().to_owned();
        let raw: DataStream<Result<Line, BadLine>> =
            self.add_configured_source("read_lines", move |cx, cfg| {
                LineReader::new(&path, cx)
                    .map(|r| LocatedLines::new(r.with_max_line_bytes(cfg.max_line_bytes)))
            });
        raw.split_named("malformed", true)
    }

    /// Plans and starts the job; returns once every subtask is deployed. The graph built so
    /// far moves into the job: an `Env` runs what was added since its last start.
    pub fn start(&self, name: &str) -> Result<JobHandle, JobError> {
        #[cfg(feature = "rest")]
        let server = match self.rest.borrow().clone() {
            None => None,
            Some(cfg) => {
                Some(
                    crate::rest::RestServer::start(cfg).map_err(|e| JobError::Runtime {
                        job: name.to_owned(),
                        message: format!("cannot start the REST server: {e}"),
                    })?,
                )
            }
        };
        let graph = std::mem::take(&mut *self.graph.borrow_mut());
        let graphs = self.graphs.borrow().clone();
        #[allow(unused_mut)]
        let mut job = start(graph, self.config(), name, graphs)?;
        #[cfg(feature = "rest")]
        if let Some(server) = server {
            server.register(job.monitor());
            job.attached.push(Box::new(server));
        }
        Ok(job)
    }

    /// Runs the job to completion and returns its result.
    pub fn execute(&self, name: &str) -> Result<JobResult, JobError> {
        self.start(name)?.wait()
    }
}

impl crate::JobMonitor {
    /// Replaces the running job's graph by the one `build` adds to an `Env` (a fast restart):
    /// the sources pause at a savepoint barrier, every subtask snapshots at it and hands its
    /// state over in memory, the sinks commit, and the new graph is deployed in the same
    /// process (same handle, REST server and metrics) from those states, matched by operator
    /// uid (and dealt to a new parallelism where one changed). Refused before anything stops:
    /// a graph that does not plan, or state of an operator the new graph lacks (unless
    /// [`ReplaceOptions::allow_dropping_state`](crate::ReplaceOptions::allow_dropping_state)). Answered once the new graph completed its
    /// first checkpoint; if it fails before that, or completes none within
    /// [`ReplaceOptions::grace`](crate::ReplaceOptions::grace), the old graph runs again from the same savepoint
    /// ([`ReplaceError::RolledBack`](crate::ReplaceError::RolledBack)). Nothing is lost or duplicated either way.
    ///
    /// ```no_run
    /// # fn demo(job: &weir::JobHandle) -> Result<(), weir::ReplaceError> {
    /// job.replace(
    ///     |env| {
    ///         env.generate(u64::MAX, |i| i).uid("ids").map(|x: u64| x * 2).uid("double").discard();
    ///     },
    ///     weir::ReplaceOptions::default(),
    /// )?;
    /// # Ok(()) }
    /// ```
    pub fn replace(
        &self,
        build: impl FnOnce(&Env),
        options: crate::ReplaceOptions,
    ) -> Result<crate::ReplaceReport, crate::ReplaceError> {
        let env = Env::with_config(self.build_config());
        build(&env);
        self.replace_graph(env.take_graph(), options)
    }
}
