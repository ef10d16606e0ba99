//! [`CallOutcome`]: what became of one call of a batch.

use crate::error::{Error, Result};

/// What became of one call of a batch: it ran, it did not run, or it may have run.
///
/// - [`Ran`](Self::Ran): Redis ran the script exactly once; its reply (or the script's own
///   error, e.g. [`Error::CorruptData`]) is inside. Do not retry a mutating call.
/// - [`NotRun`](Self::NotRun): Redis refused the call before running anything (a slot being
///   migrated answered `ASK`/`TRYAGAIN`, a stale slot map got `MOVED`, a script stayed
///   missing after the reload, ...). Nothing was applied: retrying is safe.
/// - [`MaybeRan`](Self::MaybeRan): the batch was sent and the reply was lost (connection
///   dropped, response timeout). The call ran once or not at all; only reading the state back
///   (or an idempotent call, e.g. one with a request id) tells which. Retrying a
///   non-idempotent call may apply it twice.
///
/// ```
/// use redkit::{CallOutcome, Error};
/// let outcomes: Vec<CallOutcome<i64>> = vec![
///     CallOutcome::Ran(Ok(3)),
///     CallOutcome::NotRun(Error::Timeout(std::time::Duration::from_secs(1))),
/// ];
/// let retry: Vec<usize> = outcomes
///     .iter()
///     .enumerate()
///     .filter(|(_, o)| o.is_not_run())
///     .map(|(i, _)| i)
///     .collect();
/// assert_eq!(retry, [1]);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CallOutcome<T> {
    /// The call ran exactly once; this is its result.
    Ran(Result<T>),
    /// The call did not run; nothing was applied.
    NotRun(Error),
    /// The call may have run (once) or not: the reply was lost.
    MaybeRan(Error),
}

impl<T> CallOutcome<T> {
    /// `true` for [`Ran`](Self::Ran) (whether the script succeeded or refused).
    ///
    /// ```
    /// assert!(redkit::CallOutcome::Ran(Ok(1)).ran());
    /// ```
    pub fn ran(&self) -> bool {
        matches!(self, Self::Ran(_))
    }

    /// `true` for [`NotRun`](Self::NotRun): safe to retry.
    ///
    /// ```
    /// use redkit::{CallOutcome, Error};
    /// let o: CallOutcome<()> = CallOutcome::NotRun(Error::Timeout(Default::default()));
    /// assert!(o.is_not_run());
    /// ```
    pub fn is_not_run(&self) -> bool {
        matches!(self, Self::NotRun(_))
    }

    /// `true` for [`MaybeRan`](Self::MaybeRan).
    ///
    /// ```
    /// use redkit::{CallOutcome, Error};
    /// let o: CallOutcome<()> = CallOutcome::MaybeRan(Error::Timeout(Default::default()));
    /// assert!(o.may_have_run());
    /// ```
    pub fn may_have_run(&self) -> bool {
        matches!(self, Self::MaybeRan(_))
    }

    /// The call's value if it ran and succeeded.
    ///
    /// ```
    /// assert_eq!(redkit::CallOutcome::Ran(Ok(7)).ok(), Some(7));
    /// ```
    pub fn ok(self) -> Option<T> {
        match self {
            Self::Ran(Ok(v)) => Some(v),
            _ => None,
        }
    }

    /// Collapses the outcome into a `Result`: the value of a call that ran and succeeded,
    /// else its error (losing the ran / not run / may have run distinction).
    ///
    /// ```
    /// use redkit::{CallOutcome, Error};
    /// let o: CallOutcome<i64> = CallOutcome::MaybeRan(Error::Timeout(Default::default()));
    /// assert!(o.into_result().is_err());
    /// ```
    pub fn into_result(self) -> Result<T> {
        match self {
            Self::Ran(r) => r,
            Self::NotRun(e) | Self::MaybeRan(e) => Err(e),
        }
    }

    /// Decodes the value of a call that ran; other outcomes are kept as they are.
    ///
    /// ```
    /// use redkit::CallOutcome;
    /// let o = CallOutcome::Ran(Ok(2)).and_then(|n: i64| Ok(n * 10));
    /// assert_eq!(o.ok(), Some(20));
    /// ```
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Result<U>) -> CallOutcome<U> {
        match self {
            Self::Ran(r) => CallOutcome::Ran(r.and_then(f)),
            Self::NotRun(e) => CallOutcome::NotRun(e),
            Self::MaybeRan(e) => CallOutcome::MaybeRan(e),
        }
    }

    /// A reference to the value of a call that ran and succeeded.
    ///
    /// ```
    /// assert_eq!(redkit::CallOutcome::Ran(Ok(7)).value(), Some(&7));
    /// ```
    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Ran(Ok(v)) => Some(v),
            _ => None,
        }
    }
}
