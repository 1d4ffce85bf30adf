//! How a state hands over to the next: [`TransitionTo`] pairs declare which moves exist, and
//! a [`Transition`] can only be made by [`TransitionTo::to`] — its fields are private to this
//! module, which no state file is inside — so a move that is not declared does not compile.

use super::JobState;

/// A state of the job's controller.
pub(crate) trait State: Into<JobState> {
    /// The state's name in logs.
    const NAME: &'static str;
}

/// The job is in state `Self` and may move to `T`.
pub(crate) trait TransitionTo<T: State>: State {
    /// The transition from `Self` to `next`, because of `cause`.
    fn to(next: T, cause: impl Into<String>) -> Transition {
        Transition {
            from: Self::NAME,
            to: T::NAME,
            next: next.into(),
            cause: cause.into(),
        }
    }
}

/// Where the job goes next, and why.
pub(crate) struct Transition {
    from: &'static str,
    to: &'static str,
    next: JobState,
    cause: String,
}

impl Transition {
    /// The state left.
    pub(crate) fn from(&self) -> &'static str {
        self.from
    }

    /// The state entered.
    pub(crate) fn to(&self) -> &'static str {
        self.to
    }

    /// Why.
    pub(crate) fn cause(&self) -> &str {
        &self.cause
    }

    /// The state entered, to run next.
    pub(crate) fn next(&self) -> &JobState {
        &self.next
    }

    /// The state entered, to run next.
    pub(crate) fn into_next(self) -> JobState {
        self.next
    }
}
