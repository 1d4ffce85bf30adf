//! A small blocking client of a job's REST API (Weir's, or a Flink cluster's for the calls
//! both have), shared by `weirctl` (`cli`) and the control agent (`agent`). It owns the HTTP
//! calls, the bearer token and the mapping of answers to [`ClientError`]; it knows nothing of
//! any route's JSON beyond Flink's `{"errors": [...]}` error body.
//!
//! ```no_run
//! use std::time::Duration;
//! use weirctl::client::RestClient;
//! let client = RestClient::new("http://127.0.0.1:8081", None, Duration::from_secs(5));
//! let jobs = client.get("/jobs/overview")?;
//! println!("{}", jobs["jobs"]);
//! # Ok::<(), weirctl::client::ClientError>(())
//! ```

use std::time::Duration;

use serde_json::Value;

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
    /// waits up to `timeout` for it; the completed status (`operation.location` is where it
    /// went).
    pub fn savepoint(
        &self,
        id: &str,
        dir: &str,
        stop: bool,
        timeout: Duration,
    ) -> Result<Value, SavepointError> {
        let (path, body) = if stop {
            (
                format!("/jobs/{id}/stop"),
                serde_json::json!({ "targetDirectory": dir, "drain": false }),
            )
        } else {
            (
                format!("/jobs/{id}/savepoints"),
                serde_json::json!({ "target-directory": dir, "cancel-job": false }),
            )
        };
        let started = self.send("POST", &path, Some(body))?;
        let Some(trigger) = started["request-id"].as_str() else {
            return Err(SavepointError::Unexpected {
                what: format!("POST {path}"),
                message: format!("no request-id in {started}"),
            });
        };
        let status_path = format!("/jobs/{id}/savepoints/{trigger}");
        let deadline = std::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            let status = self.get(&status_path)?;
            match status["status"]["id"].as_str() {
                Some("COMPLETED") => {
                    return match status["operation"].get("failure-cause") {
                        Some(cause) => Err(SavepointError::Failed(format!(
                            "the savepoint failed: {}",
                            cause["stack-trace"].as_str().unwrap_or("no cause given")
                        ))),
                        None => Ok(status),
                    };
                }
                Some("IN_PROGRESS") if std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Some("IN_PROGRESS") => {
                    return Err(SavepointError::Failed(format!(
                        "the savepoint did not complete in {} s",
                        timeout.as_secs()
                    )))
                }
                _ => {
                    return Err(SavepointError::Unexpected {
                        what: format!("GET {status_path}"),
                        message: format!("no completion in {status}"),
                    })
                }
            }
        }
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
                .and_then(|json| {
                    // The first line of each: Flink's errors carry Java stack traces.
                    json["errors"].as_array().map(|e| {
                        e.iter()
                            .filter_map(Value::as_str)
                            .map(|m| m.lines().next().unwrap_or(""))
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
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
