//! `Finished`: the job has ended, with its result or its error. Terminal.

use crate::controller::JobResult;
use crate::error::JobError;

/// The job has ended.
pub(crate) struct Finished {
    outcome: Result<JobResult, JobError>,
}

impl Finished {
    /// Ended with `result`.
    pub(super) fn ok(result: JobResult) -> Self {
        Finished {
            outcome: Ok(result),
        }
    }

    /// Ended with `error`.
    pub(super) fn failed(error: JobError) -> Self {
        Finished {
            outcome: Err(error),
        }
    }

    /// The job's final status.
    pub(super) fn status(&self) -> crate::controller::JobStatus {
        use crate::controller::JobStatus;
        match &self.outcome {
            Ok(_) => JobStatus::Finished,
            Err(JobError::Cancelled { .. }) => JobStatus::Canceled,
            Err(_) => JobStatus::Failed,
        }
    }

    /// What the job's `wait` returns.
    pub(crate) fn outcome(self) -> Result<JobResult, JobError> {
        self.outcome
    }
}
