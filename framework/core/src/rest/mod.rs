//! The REST control plane: Flink's REST API (paths, JSON field names, status codes) over the
//! jobs of a process, served by actix-web on a thread of its own, plus every metric in
//! Prometheus text at `/metrics`.
//!
//! A [`RestServer`] starts when asked ([`RestServer::start`]) and serves the jobs registered
//! with it ([`RestServer::register`], a [`JobMonitor`] each). It is safe by default:
//! - it binds `127.0.0.1` unless told otherwise, and refuses a non-loopback address without
//!   an explicit token;
//! - every mutating call (`POST`, `PATCH`) needs `Authorization: Bearer <token>`; the token is
//!   generated at start from the OS's random source and written to a file only the user can
//!   read ([`RestServer::token_file`]), or given in [`RestConfig::token`];
//! - bodies are size-limited and validated, and every error is JSON `{"errors": ["…"]}` with
//!   Flink's status code (400, 401, 404, 405, 409, 413).
//!
//! ```
//! use weir::rest::{RestConfig, RestServer};
//! let server = RestServer::start(RestConfig::default()).unwrap();
//! let env = weir::Env::new();
//! env.generate(u64::MAX, |i| i).add_sink("slow", |_| Ok(weir_testing::PacedSink::new(1e5)));
//! let job = env.start("rest-doc").unwrap();
//! server.register(job.monitor());
//! println!("GET http://{}/jobs/{}", server.addr(), job.id());
//! job.cancel();
//! let _ = job.wait();
//! ```
//!
//! The routes are one table (`routes`: the router, [`ROUTES`] and the check of `openapi.json`
//! come from it); each handler is in the file named for its resource (`jobs`, `checkpoints`,
//! `savepoints`, `rescale`, `replace`, `settings`, `backups`, `prom`, `dashboard`), and the
//! JSON it answers is a type of [`crate::api_types`], which `weirctl` reads back. This module
//! owns the server's life and its settings. The jobs themselves are steered through their
//! controllers' command channels (`controller`).

mod backups;
mod checkpoints;
mod dashboard;
mod jobs;
mod prom;
mod replace;
mod request;
mod rescale;
mod routes;
mod savepoints;
mod settings;
mod triggers;

pub use routes::ROUTES;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::job::JobMonitor;

/// How the REST server starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestConfig {
    /// Where to listen (default `127.0.0.1:0`: loopback, a free port).
    pub addr: SocketAddr,
    /// The bearer token for mutating calls (default: the `WEIR_REST_TOKEN` environment
    /// variable if set, else generated at start). Required for an address that is not
    /// loopback.
    pub token: Option<String>,
    /// Where the generated token is written (default: a file in the temp directory named for
    /// the process and port), readable by the user only.
    pub token_file: Option<PathBuf>,
    /// The largest request body accepted, in bytes (default 64 KiB).
    pub max_body_bytes: usize,
}

impl Default for RestConfig {
    fn default() -> Self {
        RestConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            token_file: None,
            max_body_bytes: 64 * 1024,
        }
    }
}

impl RestConfig {
    /// Listen on `addr`.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Accept request bodies of at most `bytes`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Use `token` for mutating calls.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

/// Why the REST server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestError {
    /// A non-loopback address needs an explicit token.
    #[error("refusing to serve the REST API on {addr} (not loopback) without an explicit token: set RestConfig::token or WEIR_REST_TOKEN")]
    PublicWithoutToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The token given is empty or has characters a header cannot carry.
    #[error("the REST token must be 16 to 256 visible ASCII characters")]
    BadToken,
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The token file could not be written.
    #[error("cannot write the REST token to {path}: {source}")]
    TokenFile {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No random source for the token.
    #[error("cannot generate a REST token: {0}")]
    Random(String),
    /// The server thread could not start.
    #[error("cannot start the REST server: {0}")]
    Runtime(String),
}

/// The environment variable a token may be given in (`RestConfig::token` wins).
pub const TOKEN_ENV: &str = "WEIR_REST_TOKEN";

/// What the routes share: the registered jobs, savepoint triggers, the token.
pub(crate) struct Shared {
    pub(crate) jobs: Mutex<Vec<JobMonitor>>,
    pub(crate) triggers: Mutex<std::collections::HashMap<String, triggers::Trigger>>,
    pub(crate) token: String,
    pub(crate) max_body_bytes: usize,
}

/// A running REST server; it stops when dropped (or with [`RestServer::stop`]).
pub struct RestServer {
    addr: SocketAddr,
    token: String,
    token_file: Option<PathBuf>,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestServer")
            .field("addr", &self.addr)
            .field("token_file", &self.token_file)
            .finish()
    }
}

impl RestServer {
    /// Starts a server with `cfg`; returns once it listens.
    pub fn start(cfg: RestConfig) -> Result<RestServer, RestError> {
        let given = cfg
            .token
            .clone()
            .or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()));
        let (token, generated) = match &given {
            Some(t) => {
                let ok = (16..=256).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic());
                if !ok {
                    return Err(RestError::BadToken);
                }
                (t.clone(), false)
            }
            None if !cfg.addr.ip().is_loopback() => {
                return Err(RestError::PublicWithoutToken { addr: cfg.addr })
            }
            None => (new_token()?, true),
        };
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Vec::new()),
            triggers: Mutex::new(Default::default()),
            token: token.clone(),
            max_body_bytes: cfg.max_body_bytes,
        });
        let (addr, handle, thread) = serve(cfg.addr, shared.clone())?;
        let token_file = if generated {
            let path = cfg.token_file.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!(
                    "weir-rest-{}-{}.token",
                    std::process::id(),
                    addr.port()
                ))
            });
            if let Err(source) = write_private(&path, &token) {
                drop(handle.stop(false));
                return Err(RestError::TokenFile { path, source });
            }
            Some(path)
        } else {
            None
        };
        tracing::info!(%addr, token_file = ?token_file, "REST server listening");
        Ok(RestServer {
            addr,
            token,
            token_file,
            shared,
            handle,
            thread: Some(thread),
        })
    }

    /// Serves `job` from now on (until the server stops; an ended job keeps its final status).
    pub fn register(&self, job: JobMonitor) {
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.retain(|j| j.id() != job.id());
        jobs.push(job);
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token for mutating calls.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Where the generated token was written (`None` when the token was given).
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }

    /// Stops the server and waits for its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // `stop` returns a future; the server's own thread runs it.
        drop(self.handle.stop(true));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = &self.token_file {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl crate::JobHandle {
    /// The REST server that serves this job (`Env::serve_rest`); it stops when the job's
    /// handle is waited on or dropped.
    pub fn rest(&self) -> Option<&RestServer> {
        self.attached
            .iter()
            .find_map(|a| a.downcast_ref::<RestServer>())
    }
}

/// Binds `addr` and runs the server on a thread of its own with an actix `System`.
fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> Result<
    (
        SocketAddr,
        actix_web::dev::ServerHandle,
        std::thread::JoinHandle<()>,
    ),
    RestError,
> {
    type Bound = Result<(SocketAddr, actix_web::dev::ServerHandle), RestError>;
    let (tx, rx) = std::sync::mpsc::channel::<Bound>();
    let thread = std::thread::Builder::new()
        .name("weir-rest".into())
        .spawn(move || {
            let system = actix_rt::System::new();
            system.block_on(async move {
                let data = actix_web::web::Data::from(shared);
                let server = actix_web::HttpServer::new(move || {
                    actix_web::App::new()
                        .app_data(data.clone())
                        .configure(routes::configure)
                        .default_service(actix_web::web::to(routes::not_found))
                })
                .workers(1)
                .disable_signals()
                .bind(addr);
                let server = match server {
                    Ok(s) => s,
                    Err(source) => {
                        let _ = tx.send(Err(RestError::Bind { addr, source }));
                        return;
                    }
                };
                let bound = server.addrs().first().copied().unwrap_or(addr);
                let running = server.run();
                let _ = tx.send(Ok((bound, running.handle())));
                if let Err(e) = running.await {
                    tracing::warn!(error = %e, "REST server stopped with an error");
                }
            });
        })
        .map_err(|e| RestError::Runtime(e.to_string()))?;
    match rx.recv() {
        Ok(Ok((bound, handle))) => Ok((bound, handle, thread)),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => Err(RestError::Runtime("the server thread ended".into())),
    }
}

/// 32 random bytes as 64 hexadecimal digits.
fn new_token() -> Result<String, RestError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| RestError::Random(e.to_string()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `text` to `path`, readable and writable by the user only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(text.as_bytes())?;
    f.sync_all()
}
