//! The test harness of the files whose tests need a capability this machine may lack (a Valkey
//! server): libtest-mimic, so that such a test is reported **ignored**, with the reason, in the
//! runner's own summary (`test result: ok. 9 passed; 0 failed; 4 ignored`), never counted as a
//! pass. Under CI (`CI` set) a missing capability fails the test instead, with what to install.
//!
//! A file using it is a `[[test]]` with `harness = false` and includes it beside the support
//! module:
//!
//! ```ignore
//! mod support;
//! #[path = "support/harness.rs"]
//! mod harness;
//!
//! fn main() -> std::process::ExitCode {
//!     let mut tests = harness::Tests::new();
//!     harness::add!(tests, plain_test, other_test);            // async fn()
//!     harness::add!(tests, multi_thread: busy_test);           // async fn(), 2 worker threads
//!     harness::add!(tests, valkey: native_test);               // async fn(Valkey)
//!     harness::add!(tests, both: same_outcomes, body);         // async fn(RedisServer), twice
//!     tests.run()
//! }
//! ```
//!
//! Each test runs on a fresh Tokio runtime of its own: current-thread like `#[tokio::test]`,
//! or multi-thread with 2 workers. Tests run in parallel threads like libtest's; output is not
//! captured.

#![allow(dead_code)]

use std::future::Future;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

use crate::support::{in_ci, RedisServer, Valkey, VALKEY_HINT};

/// The tests of one file, then [`run`](Self::run).
pub struct Tests {
    trials: Vec<Trial>,
    valkey: Option<Valkey>,
    missing: Vec<String>,
}

/// Which Tokio runtime a test runs on.
#[derive(Clone, Copy, Debug)]
pub enum Flavor {
    /// `#[tokio::test]`'s: one thread.
    CurrentThread,
    /// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`'s.
    MultiThread,
}

fn block_on<F: Future<Output = ()>>(flavor: Flavor, fut: F) {
    let runtime = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    };
    runtime.expect("a Tokio runtime").block_on(fut);
}

/// Runs `test` and turns a panic into the trial's failure (its message).
fn outcome(test: impl FnOnce()) -> Result<(), Failed> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(test)).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("panicked");
        Failed::from(message)
    })
}

impl Default for Tests {
    fn default() -> Self {
        Self::new()
    }
}

impl Tests {
    /// No tests yet; looks for Valkey once.
    pub fn new() -> Self {
        Self {
            trials: Vec::new(),
            valkey: Valkey::find(),
            missing: Vec::new(),
        }
    }

    /// An async test.
    pub fn add<F, Fut>(&mut self, name: &str, flavor: Flavor, test: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        self.trials.push(Trial::test(name, move || {
            outcome(|| block_on(flavor, test()))
        }));
    }

    /// A plain (sync) test.
    pub fn add_sync(&mut self, name: &str, test: fn()) {
        self.trials.push(Trial::test(name, move || outcome(test)));
    }

    /// An async test that needs Valkey: given it, or reported ignored when this machine has
    /// none (failed under CI, with what to install).
    pub fn add_valkey<F, Fut>(&mut self, name: &str, flavor: Flavor, test: F)
    where
        F: FnOnce(Valkey) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        match self.valkey.clone() {
            Some(valkey) => self.add(name, flavor, move || test(valkey)),
            None if in_ci() => {
                let message =
                    format!("needs a Valkey / Redis 7.2+ server and CI is set: {VALKEY_HINT}");
                self.trials
                    .push(Trial::test(name, move || Err(Failed::from(message))));
            }
            None => {
                self.missing.push(name.to_owned());
                self.trials
                    .push(Trial::test(name, || Ok(())).with_ignored_flag(true));
            }
        }
    }

    /// `body` twice, on a fresh default server (Redis 7.0: no native conditional commands)
    /// as `<name>::redis7`, and on a fresh Valkey 9 (`DELIFEQ`, `SET ... IFEQ`) as
    /// `<name>::valkey` (needs Valkey, like [`add_valkey`](Self::add_valkey)); multi-thread.
    pub fn add_both<F, Fut>(&mut self, name: &str, body: F)
    where
        F: Fn(RedisServer) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let redis = body.clone();
        self.add(
            &format!("{name}::redis7"),
            Flavor::MultiThread,
            move || async move { redis(RedisServer::spawn().await).await },
        );
        self.add_valkey(
            &format!("{name}::valkey"),
            Flavor::MultiThread,
            move |valkey| async move { body(RedisServer::spawn_valkey(&valkey, &[]).await).await },
        );
    }

    /// Runs the tests the command line selects (libtest's arguments: filters, `--exact`,
    /// `--ignored`, `--include-ignored`, `--list`, `--test-threads`, ...) and exits as libtest
    /// does; first says which tests are ignored for want of Valkey.
    pub fn run(self) -> ExitCode {
        let args = Arguments::from_args();
        if !self.missing.is_empty() && !args.list {
            eprintln!(
                "tests needing a Valkey / Redis 7.2+ server, which this machine lacks, reported \
                 ignored: {} ({VALKEY_HINT})",
                self.missing.len()
            );
        }
        libtest_mimic::run(&args, self.trials).exit_code()
    }
}

/// Registers test functions by name: `add!(tests, a, b)` (async, current thread),
/// `add!(tests, multi_thread: a, b)`, `add!(tests, sync: a)`, `add!(tests, valkey: a)`,
/// `add!(tests, valkey_multi_thread: a)`, `add!(tests, both: name, body)`.
macro_rules! add {
    ($tests:ident, sync: $($f:ident),+ $(,)?) => {
        $($tests.add_sync(stringify!($f), $f);)+
    };
    ($tests:ident, multi_thread: $($f:ident),+ $(,)?) => {
        $($tests.add(stringify!($f), $crate::harness::Flavor::MultiThread, $f);)+
    };
    ($tests:ident, valkey: $($f:ident),+ $(,)?) => {
        $($tests.add_valkey(stringify!($f), $crate::harness::Flavor::CurrentThread, $f);)+
    };
    ($tests:ident, valkey_multi_thread: $($f:ident),+ $(,)?) => {
        $($tests.add_valkey(stringify!($f), $crate::harness::Flavor::MultiThread, $f);)+
    };
    ($tests:ident, both: $name:ident, $body:ident) => {
        $tests.add_both(stringify!($name), $body);
    };
    ($tests:ident, $($f:ident),+ $(,)?) => {
        $($tests.add(stringify!($f), $crate::harness::Flavor::CurrentThread, $f);)+
    };
}
pub(crate) use add;
