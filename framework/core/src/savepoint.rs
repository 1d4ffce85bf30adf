//! Savepoint requests: which checkpoint each pending savepoint waits for, where it goes, whether
//! the job stops after it, and who waits for the answer. A savepoint is a checkpoint forced by
//! a command and copied to a place of the caller's choosing once it completes; this module
//! keeps the bookkeeping and answers the callers. Triggering the checkpoint and copying its
//! files are the controller's (`controller`, with `checkpoint::store`); the handle's side is
//! `job`.
//!
//! Every request is answered exactly once: completed (the path), failed (why), or dropped with
//! the controller (the waiting handle then learns that the job ended first).

use std::collections::HashMap;
use std::path::PathBuf;

/// Where a savepoint's answer goes: its path, or why there is none.
pub(crate) type SavepointReply = std::sync::mpsc::Sender<Result<PathBuf, String>>;

/// One pending savepoint.
#[derive(Debug)]
pub(crate) struct SavepointRequest {
    /// The directory the savepoint is copied into.
    pub(crate) dir: PathBuf,
    /// Stop the job once the savepoint is complete.
    pub(crate) stop: bool,
    pub(crate) reply: SavepointReply,
}

/// The pending savepoints of a deployment, by the checkpoint they wait for.
#[derive(Debug, Default)]
pub(crate) struct SavepointRequests {
    pending: HashMap<u64, SavepointRequest>,
}

/// What copying a savepoint came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Completion {
    /// The savepoint is in place and its caller answered.
    Done {
        /// The caller asked to stop the job after it.
        stop: bool,
    },
    /// Copying failed; the caller was told why.
    Failed,
}

/// Answers the caller of `sp`: its savepoint was copied (`Ok`) or not (why).
pub(crate) fn answer(sp: SavepointRequest, copied: Result<(), String>) -> Completion {
    match copied {
        Ok(()) => {
            tracing::info!(savepoint = %sp.dir.display(), "savepoint complete");
            let _ = sp.reply.send(Ok(sp.dir.clone()));
            Completion::Done { stop: sp.stop }
        }
        Err(e) => {
            tracing::warn!(savepoint = %sp.dir.display(), error = %e, "savepoint failed");
            let _ = sp.reply.send(Err(e));
            Completion::Failed
        }
    }
}

impl SavepointRequests {
    /// A savepoint now waits for checkpoint `id`.
    pub(crate) fn add(&mut self, id: u64, request: SavepointRequest) {
        self.pending.insert(id, request);
    }

    /// Whether no savepoint is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Checkpoint `id` will not complete: its savepoint (if any) fails with `why`.
    pub(crate) fn fail(&mut self, id: u64, why: impl FnOnce() -> String) {
        if let Some(sp) = self.pending.remove(&id) {
            let _ = sp.reply.send(Err(why()));
        }
    }

    /// Every pending savepoint fails with `why`.
    pub(crate) fn fail_all(&mut self, why: &str) {
        for (_, sp) in self.pending.drain() {
            let _ = sp.reply.send(Err(why.to_owned()));
        }
    }

    /// The savepoint waiting for checkpoint `id`, taken out to be copied (then
    /// [`answer`]ed).
    pub(crate) fn take(&mut self, id: u64) -> Option<SavepointRequest> {
        self.pending.remove(&id)
    }

    /// Number of pending savepoints.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::Receiver;

    fn request(dir: &str, stop: bool) -> (SavepointRequest, Receiver<Result<PathBuf, String>>) {
        let (reply, answer) = std::sync::mpsc::channel();
        (
            SavepointRequest {
                dir: PathBuf::from(dir),
                stop,
                reply,
            },
            answer,
        )
    }

    fn answer(rx: Receiver<Result<PathBuf, String>>) -> Option<Result<PathBuf, String>> {
        rx.recv().ok()
    }

    #[test]
    fn a_completed_checkpoint_answers_its_savepoint_with_the_path() {
        let mut reqs = SavepointRequests::default();
        let (r, rx) = request("/sp/a", true);
        reqs.add(7, r);
        assert_eq!(reqs.len(), 1);
        assert!(reqs.take(6).is_none(), "no savepoint waits for 6");
        let sp = reqs.take(7).expect("the savepoint of 7");
        assert_eq!(sp.dir, PathBuf::from("/sp/a"));
        assert_eq!(super::answer(sp, Ok(())), Completion::Done { stop: true });
        assert_eq!(answer(rx), Some(Ok(PathBuf::from("/sp/a"))));
        assert_eq!(reqs.len(), 0);
    }

    #[test]
    fn a_failed_copy_or_checkpoint_answers_why() {
        let mut reqs = SavepointRequests::default();
        let (a, rx_a) = request("/sp/a", false);
        let (b, rx_b) = request("/sp/b", false);
        let (c, rx_c) = request("/sp/c", false);
        reqs.add(1, a);
        reqs.add(2, b);
        reqs.add(3, c);
        let sp = reqs.take(1).expect("the savepoint of 1");
        assert_eq!(
            super::answer(sp, Err("disk full".into())),
            Completion::Failed
        );
        reqs.fail(2, || "savepoint 2 timed out".into());
        reqs.fail(9, || unreachable!("no savepoint waits for 9"));
        reqs.fail_all("the job finished before the savepoint completed");
        assert_eq!(answer(rx_a), Some(Err("disk full".into())));
        assert_eq!(answer(rx_b), Some(Err("savepoint 2 timed out".into())));
        assert_eq!(
            answer(rx_c),
            Some(Err("the job finished before the savepoint completed".into()))
        );
    }

    #[test]
    fn dropped_requests_tell_the_caller_that_no_answer_comes() {
        let mut reqs = SavepointRequests::default();
        let (a, rx) = request("/sp/a", false);
        reqs.add(1, a);
        drop(reqs);
        assert_eq!(answer(rx), None);
    }
}
