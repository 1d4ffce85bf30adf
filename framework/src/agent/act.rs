//! Carrying out a rule's actions over the REST API: savepoint (and wait for it), stop with a
//! savepoint, fast restart, live settings, rescale. An action that fails for a reason that
//! may pass (unreachable, busy, 5xx) is tried again, up to the rules' `retries` with a
//! doubling pause; one that fails for good stops the actions after it (no restart after a
//! savepoint that failed). It owns the calls and their outcomes, not when to act (`engine`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::rules::Action;
use crate::client::{ClientError, RestClient};

/// How one action went.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outcome {
    /// The action's kind.
    pub kind: &'static str,
    /// Whether it succeeded.
    pub ok: bool,
    /// What it did (the savepoint's path, the restart's report), or why it failed.
    pub detail: Value,
    /// Tries made.
    pub tries: u32,
    /// How long it took, all tries.
    pub duration: Duration,
}

/// Carries out `actions` on job `id` in order, stopping at the first that fails; the
/// outcome of each one tried goes to `report` as soon as it is known (and stops the rest if
/// `report` fails).
pub fn run_actions<E>(
    client: &RestClient,
    id: &str,
    actions: &[Action],
    retries: u32,
    timeout: Duration,
    mut report: impl FnMut(Outcome) -> Result<(), E>,
) -> Result<(), E> {
    for action in actions {
        let started = Instant::now();
        let mut tries = 0;
        let mut pause = Duration::from_millis(200);
        let result = loop {
            tries += 1;
            match run_one(client, id, action, timeout) {
                Err(Failure::Rest(e)) if e.is_transient() && tries <= retries => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
                r => break r,
            }
        };
        let (ok, detail) = match result {
            Ok(v) => (true, v),
            Err(e) => (false, Value::String(e.to_string())),
        };
        report(Outcome {
            kind: action.kind(),
            ok,
            detail,
            tries,
            duration: started.elapsed(),
        })?;
        if !ok {
            break;
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Rest(#[from] ClientError),
    #[error("{0}")]
    Failed(String),
}

fn run_one(
    client: &RestClient,
    id: &str,
    action: &Action,
    timeout: Duration,
) -> Result<Value, Failure> {
    match action {
        Action::Savepoint { dir } => savepoint(
            client,
            id,
            &format!("/jobs/{id}/savepoints"),
            json!({ "target-directory": dir, "cancel-job": false }),
            timeout,
        ),
        Action::Stop { dir } => savepoint(
            client,
            id,
            &format!("/jobs/{id}/stop"),
            json!({ "targetDirectory": dir, "drain": false }),
            timeout,
        ),
        Action::Restart {
            graph,
            allow_dropping_state,
        } => Ok(client.send(
            "POST",
            &format!("/jobs/{id}/replace"),
            Some(json!({ "graph": graph, "allowDroppingState": allow_dropping_state })),
        )?),
        Action::Set { settings } => Ok(client.send(
            "PATCH",
            &format!("/jobs/{id}/config"),
            Some(json!(settings)),
        )?),
        Action::Rescale {
            parallelism,
            vertex,
        } => {
            let path = crate::client::parallelism_path(id, vertex.as_deref());
            Ok(client.send(
                "PATCH",
                &path,
                Some(json!({ "parallelism": parallelism.get() })),
            )?)
        }
    }
}

/// Triggers a savepoint at `path` and waits until it completes; its location.
fn savepoint(
    client: &RestClient,
    id: &str,
    path: &str,
    body: Value,
    timeout: Duration,
) -> Result<Value, Failure> {
    let started = client.send("POST", path, Some(body))?;
    let Some(trigger) = started["request-id"].as_str() else {
        return Err(Failure::Failed(format!(
            "POST {path} answered no request-id: {started}"
        )));
    };
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        let status = client.get(&format!("/jobs/{id}/savepoints/{trigger}"))?;
        match status["status"]["id"].as_str() {
            Some("COMPLETED") => {
                let op = &status["operation"];
                if let Some(cause) = op.get("failure-cause") {
                    return Err(Failure::Failed(format!(
                        "the savepoint failed: {}",
                        cause["stack-trace"].as_str().unwrap_or("no cause given")
                    )));
                }
                return Ok(json!({ "location": op["location"] }));
            }
            Some("IN_PROGRESS") if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Some("IN_PROGRESS") => {
                return Err(Failure::Failed(format!(
                    "the savepoint did not complete in {} s",
                    timeout.as_secs()
                )))
            }
            _ => {
                return Err(Failure::Failed(format!(
                    "unexpected savepoint status: {status}"
                )))
            }
        }
    }
}
