//! The script manager: embedded, versioned Lua scripts and how they are run.
//!
//! - [`registry`]: the files in `lua/`, their SHA1 and declared key counts.
//! - [`Call`]: one prepared invocation.
//! - [`ScriptManager`]: single and replicated calls, batches, preload; every call goes out
//!   through one call path (`EVALSHA` / `FCALL`, `WAIT` behind it or not) with one recovery
//!   (`NOSCRIPT` -> `EVAL` -> one `SCRIPT LOAD`; missing function -> `FUNCTION LOAD`).
//! - [`CallOutcome`]: per call of a batch, ran / did not run / may have run.
//! - [`Replication`] / [`Acked`]: `WAIT` for replicas after a script, in the same round trip.
//! - [`Capabilities`]: the native commands a server offers in place of a script (probed once
//!   per manager).
//! - [`admin`]: per-node script-cache administration (status, load, verify, flush, kill).
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use redkit::{Call, Registry, ScriptManager};
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! let manager = ScriptManager::new();
//! let script = Registry::global().require("fixed_window", 9)?;
//! let mut call = Call::new(script);
//! call.key("rk:rl:demo:{ip:192.0.2.1}").arg(10).arg(60_000).arg(1);
//! // EVALSHA; after a restart or SCRIPT FLUSH, one EVAL that caches the script again.
//! let reply: redis::Value = manager.invoke(&mut conn, &call).await?;
//! # let _ = reply; Ok(()) }
//! ```

pub mod admin;
mod aof_support;
mod batch;
mod call;
mod capabilities;
pub(crate) mod embedded;
mod errors;
pub(crate) mod functions;
#[cfg(feature = "lockfile")]
#[cfg_attr(docsrs, doc(cfg(feature = "lockfile")))]
pub mod lockfile;
mod manager;
mod outcome;
mod path;
mod recheck;
pub mod registry;
mod replication;
mod shared;
mod state;

pub use call::Call;
pub use capabilities::Capabilities;
pub(crate) use capabilities::Native;
#[allow(unused_imports)]
pub(crate) use errors::script_error;
pub use functions::{Backend, Library};
pub use manager::{ScriptManager, Stats};
pub use outcome::CallOutcome;
pub use recheck::RecheckInterval;
pub use registry::{Registry, RegistryProblem, RetiredScript, Script, LOCK_FILE};
pub use replication::{Acked, Replicated, Replication};
