//! Carrying out a rule's actions over the REST API: savepoint (and wait for it), stop with a
//! savepoint, fast restart, live settings, rescale. An action that fails for a reason that
//! may pass (unreachable, busy, 5xx) is tried again, up to the rules' `retries` with a
//! doubling pause; one that fails for good stops the actions after it (no restart after a
//! savepoint that failed). It owns the calls and their outcomes, not when to act (`engine`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use weir::api_types::{OperationStatus, ParallelismRequest, ReplaceRequest};

use super::rules::Action;
use crate::client::{to_json, ClientError, RestClient, SavepointError};

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
    #[error(transparent)]
    Savepoint(SavepointError),
}

impl From<SavepointError> for Failure {
    fn from(e: SavepointError) -> Self {
        match e {
            SavepointError::Rest(e) => Failure::Rest(e),
            e => Failure::Savepoint(e),
        }
    }
}

fn run_one(
    client: &RestClient,
    id: &str,
    action: &Action,
    timeout: Duration,
) -> Result<Value, Failure> {
    match action {
        Action::Savepoint { dir } => Ok(saved(client.savepoint(id, dir, false, timeout)?)),
        Action::Stop { dir } => Ok(saved(client.savepoint(id, dir, true, timeout)?)),
        Action::Restart {
            graph,
            allow_dropping_state,
        } => Ok(client.send(
            "POST",
            &format!("/jobs/{id}/replace"),
            Some(to_json(&ReplaceRequest {
                allow_dropping_state: *allow_dropping_state,
                ..ReplaceRequest::new(graph.as_str())
            })),
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
                Some(to_json(
                    &ParallelismRequest::new(parallelism.get() as usize),
                )),
            )?)
        }
    }
}

/// What a completed savepoint's outcome reports: where it went.
fn saved(status: OperationStatus) -> Value {
    json!({ "location": status.operation.and_then(|o| o.location) })
}
