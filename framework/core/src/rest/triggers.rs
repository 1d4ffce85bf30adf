//! The operations started over REST that answer later (Flink's asynchronous operations): a
//! savepoint or checkpoint by its trigger id. It owns the record of them and the 202 answer
//! that starts one; the handlers that start and report them are `savepoints` and
//! `checkpoints`.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};

use actix_web::HttpResponse;

use super::request::Answer;
use super::Shared;
use crate::api_types::TriggerId;

/// An operation started over REST, by its trigger id.
pub(crate) enum Trigger {
    /// A savepoint: its answer, then its outcome.
    Savepoint {
        job: String,
        /// The job stops after it.
        stop: bool,
        answer: Option<Receiver<Result<PathBuf, String>>>,
        outcome: Option<Result<PathBuf, String>>,
    },
    /// A checkpoint: its id (its progress is in the job's checkpoint history).
    Checkpoint { job: String, id: u64 },
}

/// Records `trigger` under a new id and answers 202 `{"request-id": id}`, as Flink does for
/// asynchronous operations.
pub(super) fn accepted(state: &Shared, trigger: Trigger) -> Answer {
    let id = crate::job::unique_hex();
    state
        .triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), trigger);
    Ok(HttpResponse::Accepted().json(TriggerId { request_id: id }))
}

impl Trigger {
    /// Takes a savepoint's answer if it has come.
    pub(super) fn refresh(&mut self) {
        let Trigger::Savepoint {
            answer, outcome, ..
        } = self
        else {
            return;
        };
        if let Some(rx) = answer {
            match rx.try_recv() {
                Ok(r) => *outcome = Some(r),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    *outcome = Some(Err("the job ended before the savepoint completed".into()))
                }
            }
            if outcome.is_some() {
                *answer = None;
            }
        }
    }
}
