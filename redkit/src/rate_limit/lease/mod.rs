//! Leased quota ([`Leased`]): an instance takes several units of a key's current window from
//! Redis in one call (counted there at once, so the sum over every instance never passes the
//! limit) and answers that key's next checks from them in process, until they are spent or
//! the window they were counted in ends (for GCRA, each unit until its slot stops conforming).
//! For the windows that start at a client's first hit, [`FixedWindow`](super::FixedWindow)
//! and [`SlidingWindow`](super::SlidingWindow), and for [`Gcra`](super::Gcra).
//!
//! - `settings`: [`QuotaLease`], how much one call takes.
//! - `held`: the units held per client key, and the lease call.
//! - `flight`: one lease call in flight per key.
//! - `script`: the lease script of each algorithm, its reply read as one grant.
//! - `leased`: [`Leased`], the limiter answering from them.

mod flight;
mod held;
mod leased;
mod script;
mod settings;

pub(crate) use leased::lease_target;
pub(crate) use leased::sealed::LeaseTarget;
pub use leased::Leased;
pub(crate) use script::LeaseScript;
pub use settings::QuotaLease;
