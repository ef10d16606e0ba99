//! The script manager: embedded, versioned Lua scripts and how they are run.
//!
//! - [`registry`]: the files in `lua/`, their SHA1 and declared key counts.
//! - [`Call`]: one prepared invocation.
//! - [`ScriptManager`]: EVALSHA, the NOSCRIPT fallback, batches, preload.
//! - [`CallOutcome`]: per call of a batch, ran / did not run / may have run.
//! - [`Replication`] / [`Acked`]: `WAIT` for replicas after a script, in the same round trip.
//! - [`admin`]: per-node script-cache administration (status, load, verify, flush, kill).

pub mod admin;
mod batch;
mod call;
mod manager;
mod outcome;
pub mod registry;
mod replication;

pub use call::Call;
#[allow(unused_imports)]
pub(crate) use manager::script_error;
pub use manager::{ScriptManager, Stats};
pub use outcome::CallOutcome;
pub use registry::{Registry, RegistryProblem, Script};
pub use replication::{Acked, Replication};
