//! A small blocking client of a job's REST API (Weir's, or a Flink cluster's for the calls
//! both have), shared by `weirctl` (`cli`) and the control agent (`agent`). It owns the HTTP
//! calls, the bearer token and the mapping of answers to [`ClientError`]. The JSON of every
//! route is a type of [`weir::api_types`] (the server serializes the same types): the client
//! reads answers into them ([`RestClient::get_as`], [`RestClient::send_as`]) and the savepoint
//! protocol with them, and indexes no JSON by strings.
//!
//! ```no_run
//! use std::time::Duration;
//! use weir::api_types::JobsOverview;
//! use weirctl::client::RestClient;
//! let client = RestClient::new("http://127.0.0.1:8081", None, Duration::from_secs(5));
//! let overview: JobsOverview = client.get_as("/jobs/overview")?;
//! for job in &overview.jobs {
//!     println!("{} {}", job.jid, job.state);
//! }
//! # Ok::<(), weirctl::client::ClientError>(())
//! ```

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use weir::api_types::{ErrorBody, OperationStatus, SavepointRequest, StopRequest, TriggerId};

/// Why a REST call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server could not be reached (refused, timed out, reset).
    #[error("cannot reach the REST server at {url}: {message}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The server answered with an error status.
    #[error("the server refused {what}: {status} {message}")]
    Refused {
        /// The request (`METHOD /path`).
        what: String,
        /// The HTTP status.
        status: u16,
        /// The server's `errors`, joined, or its body.
        message: String,
    },
    /// A call that changes a job was made without a token.
    #[error("{what} changes the job: give --token or --token-file (the REST server prints the token file's path at start)")]
    NoToken {
        /// The request.
        what: String,
    },
    /// The answer is not what a REST API of Weir or Flink answers.
    #[error("unexpected answer from {what}: {message}")]
    Unexpected {
        /// The request.
        what: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ClientError {
    /// Whether trying the same call again may succeed: the server was unreachable, busy
    /// (409, 429) or failed inside (5xx). A refused request (400, 401, 404) will not.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Refused { status, .. } => {
                *status == 409 || *status == 429 || *status >= 500
            }
            _ => false,
        }
    }

    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Why a savepoint did not complete ([`RestClient::savepoint`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointError {
    /// A call failed.
    #[error(transparent)]
    Rest(#[from] ClientError),
    /// The savepoint failed (its cause), or did not complete in time.
    #[error("{0}")]
    Failed(String),
    /// An answer is not a savepoint trigger or status.
    #[error("unexpected answer from {what}: {message}")]
    Unexpected {
        /// The request.
        what: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The path that changes a job's parallelism: one vertex's, or (`None`) every operator's that
/// follows the job's default (`PATCH` with `{"parallelism": n}`).
pub fn parallelism_path(job: &str, vertex: Option<&str>) -> String {
    match vertex {
        Some(v) => format!("/jobs/{job}/vertices/{v}"),
        None => format!("/jobs/{job}/parallelism"),
    }
}

/// A blocking client of one REST server.
#[derive(Debug, Clone)]
pub struct RestClient {
    base: String,
    token: Option<String>,
    require_token: bool,
    agent: ureq::Agent,
}

impl RestClient {
    /// A client of the server at `url` (e.g. `http://127.0.0.1:8081`), sending `token` with
    /// calls that change a job; every call gives up after `timeout`.
    pub fn new(url: &str, token: Option<String>, timeout: Duration) -> RestClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        RestClient {
            base: url.trim_end_matches('/').to_owned(),
            token,
            require_token: true,
            agent,
        }
    }

    /// Sends calls that change a job without a token when it has none, and lets the server
    /// answer (a Flink cluster without authentication takes them; Weir refuses them, 401),
    /// instead of refusing them before sending ([`ClientError::NoToken`]).
    pub fn allow_anonymous_changes(mut self) -> Self {
        self.require_token = false;
        self
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// POSTs `body` to the client's URL itself, with no token (a webhook); only the status
    /// counts.
    pub fn post_json(&self, body: Value) -> Result<(), ClientError> {
        let what = format!("POST {}", self.base);
        let resp = self
            .agent
            .post(&self.base)
            .header("Content-Type", "application/json")
            .send(body.to_string().as_str())
            .map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                message: e.to_string(),
            })?;
        let status = resp.status().as_u16();
        if status >= 400 {
            return Err(ClientError::Refused {
                what,
                status,
                message: String::new(),
            });
        }
        Ok(())
    }

    /// Triggers a savepoint of job `id` into `dir` (`stop`: and stops the job after it) and
    /// waits up to `timeout` for it; the completed status (its `operation.location` is where
    /// it went).
    pub fn savepoint(
        &self,
        id: &str,
        dir: &str,
        stop: bool,
        timeout: Duration,
    ) -> Result<OperationStatus, SavepointError> {
        let (path, body) = if stop {
            (format!("/jobs/{id}/stop"), to_json(&StopRequest::new(dir)))
        } else {
            (
                format!("/jobs/{id}/savepoints"),
                to_json(&SavepointRequest::new(dir)),
            )
        };
        let started: TriggerId = self.send_as("POST", &path, Some(body))?;
        if started.request_id.is_empty() {
            return Err(SavepointError::Unexpected {
                what: format!("POST {path}"),
                message: "no request-id in the answer".into(),
            });
        }
        let status_path = format!("/jobs/{id}/savepoints/{}", started.request_id);
        let deadline = std::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            let status: OperationStatus = self.get_as(&status_path)?;
            match status.status.id.as_str() {
                "COMPLETED" => {
                    let cause = status
                        .operation
                        .as_ref()
                        .and_then(|o| o.failure_cause.as_ref());
                    return match cause {
                        Some(cause) => Err(SavepointError::Failed(format!(
                            "the savepoint failed: {}",
                            if cause.stack_trace.is_empty() {
                                "no cause given"
                            } else {
                                &cause.stack_trace
                            }
                        ))),
                        None => Ok(status),
                    };
                }
                "IN_PROGRESS" if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                "IN_PROGRESS" => {
                    return Err(SavepointError::Failed(format!(
                        "the savepoint did not complete in {} s",
                        timeout.as_secs()
                    )))
                }
                _ => {
                    return Err(SavepointError::Unexpected {
                        what: format!("GET {status_path}"),
                        message: format!("no completion in {}", to_json(&status)),
                    })
                }
            }
        }
    }

    /// `GET path`, its JSON read as `T` (a type of [`weir::api_types`]).
    pub fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        parse(&format!("GET {path}"), self.get(path)?)
    }

    /// `method path` with an optional JSON body (see [`RestClient::send`]), its answer read as
    /// `T`.
    pub fn send_as<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, ClientError> {
        parse(&format!("{method} {path}"), self.send(method, path, body)?)
    }

    /// `GET path`, its JSON.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send("GET", path, None)
    }

    /// `method path` with an optional JSON body; its JSON (`Null` for an empty answer).
    /// `POST`, `PATCH` and `PUT` carry the bearer token, and fail without one.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let what = format!("{method} {path}");
        let token = || match &self.token {
            Some(t) => Ok(Some(format!("Bearer {t}"))),
            None if !self.require_token => Ok(None),
            None => Err(ClientError::NoToken { what: what.clone() }),
        };
        let result = match method {
            "GET" => self.agent.get(&url).call(),
            "PATCH" | "PUT" | "POST" => {
                let mut r = match method {
                    "PATCH" => self.agent.patch(&url),
                    "PUT" => self.agent.put(&url),
                    _ => self.agent.post(&url),
                };
                if let Some(auth) = token()? {
                    r = r.header("Authorization", auth);
                }
                match body {
                    None if method == "PATCH" => r.send_empty(),
                    b => r.header("Content-Type", "application/json").send(
                        b.unwrap_or(Value::Object(Default::default()))
                            .to_string()
                            .as_str(),
                    ),
                }
            }
            other => {
                return Err(ClientError::Unexpected {
                    what,
                    message: format!("`{other}` is not a method this client sends"),
                })
            }
        };
        let mut resp = result.map_err(|e| ClientError::Unreachable {
            url: self.base.clone(),
            message: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Unreachable {
                url: self.base.clone(),
                message: format!("reading the answer to {what}: {e}"),
            })?;
        let parsed: Result<Value, _> = if text.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&text)
        };
        if status >= 400 {
            let message = parsed
                .ok()
                .and_then(|json| serde_json::from_value::<ErrorBody>(json).ok())
                .filter(|e| !e.errors.is_empty())
                .map(|e| {
                    // The first line of each: Flink's errors carry Java stack traces.
                    e.errors
                        .iter()
                        .map(|m| m.lines().next().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(ClientError::Refused {
                what,
                status,
                message,
            });
        }
        parsed.map_err(|e| ClientError::Unexpected {
            what,
            message: format!(
                "not JSON ({e}): {}",
                text.chars().take(200).collect::<String>()
            ),
        })
    }
}

/// `value` read as `T`, or why it is not one (`what`: the request).
pub fn parse<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Unexpected {
        what: what.to_owned(),
        message: format!("not the answer expected: {e}"),
    })
}

/// A request body as JSON (the wire types always serialize).
pub fn to_json(body: &impl Serialize) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}
