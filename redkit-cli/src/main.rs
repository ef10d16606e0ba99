//! `redkit`: script-cache administration on one server or every node of a Redis Cluster.
//!
//! Data goes to stdout (a table, or one JSON document with `--json`); diagnostics go to
//! stderr. Every node is reported, failed or not: an operation goes on past a failed node.
//! Exit codes (see `exit`): 0 success, 1 a node answered an error (or is BUSY, or a script is
//! UNKILLABLE), 2 usage error, 3 a node unreachable, 4 verification failed, 5 authentication
//! or ACL refused, 6 not a Redis server, 141 stdout or stderr is a closed pipe. When nodes
//! fail in several ways, the first of 5, 6, 3, 1 applies. 8: nothing done, the state changed
//! (`locks release`). Under `--json` every outcome,
//! usage errors included, is one JSON document with `error.kind`; `-q` prints nothing on
//! stdout, even with `--json`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redkit::script::admin::{Admin, FlushMode, LibraryState};
use redkit::script::lockfile;
use redkit::script::Library;
use redkit::script::LOCK_FILE;
use redkit::Registry;
use serde::Serialize;
use serde_json::{json, Value};

mod connection;
mod exit;
mod inventory;
mod limits;
mod locks;
mod outcome;
mod output;
mod semaphore;

use exit::{Failure, EXIT_BROKEN_PIPE, EXIT_USAGE};
use outcome::{
    flush_outcome, kill_outcome, load_outcome, prune_outcome, simple_outcome, status_outcome,
    verify_outcome, Outcome,
};
use output::{diag, document, out, print_json, Mode};

#[derive(Parser, Debug)]
#[command(
    name = "redkit",
    version,
    about = "Administer redkit's Lua scripts in Redis (one server, or every node of a Cluster), \
             and inspect or repair its rate limits and locks"
)]
#[command(
    after_help = "Exit codes: 0 ok, 1 a node answered an error (or BUSY / UNKILLABLE), \
                        2 usage error, 3 a node unreachable, 4 verification failed, \
                        5 authentication or ACL refused, 6 not a Redis server, \
                        7 no Lua scripting, 8 nothing done (the state changed), \
                        141 stdout or stderr closed.\n\
                        A URL naming one Cluster node acts on the whole Cluster."
)]
struct Cli {
    /// Redis URL (repeat for several Cluster seeds). Defaults to $REDIS_URL, then
    /// redis://127.0.0.1:6379/. A Cluster node is detected (cluster_enabled:1) and the
    /// whole Cluster is administered.
    #[arg(long, global = true)]
    url: Vec<String>,
    /// Treat the URL(s) as seeds of a Redis Cluster and act on every node.
    #[arg(long, global = true)]
    cluster: bool,
    /// One JSON document on stdout, errors (usage errors too) included: {"command", "ok",
    /// "exit_code", "error": null | {"kind", "message"}, "nodes" | "scripts"}.
    #[arg(long, global = true)]
    json: bool,
    /// Print nothing on stdout, even with --json; the exit code and stderr tell the outcome.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Per-node connect and response timeout, in milliseconds.
    #[arg(long, global = true, default_value_t = 5000)]
    timeout_ms: u64,
    /// Administer the scripts of this folder (<name>.v<N>.lua files and their scripts.lock)
    /// instead of redkit's embedded ones.
    #[arg(long, global = true, value_name = "DIR")]
    scripts_dir: Option<std::path::PathBuf>,
    /// The set's name, which names its Functions library (`<set>_<hash8>`). Default `redkit`
    /// for the embedded scripts; needed with --scripts-dir for `functions`.
    #[arg(long, global = true, value_name = "NAME")]
    set: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug, Clone)]
enum Command {
    /// The embedded Lua scripts.
    #[command(subcommand)]
    Scripts(Scripts),
    /// The script set as a Redis Functions library (`<set>_<hash8>`, Redis 7.0+).
    #[command(subcommand)]
    Functions(Functions),
    /// A rate limiter's state for given clients: show (read-only), reset, block.
    #[command(subcommand)]
    Limits(limits::Limits),
    /// A lock's holder, lease and waiters (show, read-only), and releasing a stuck one.
    #[command(subcommand)]
    Locks(locks::Locks),
    /// A SKU's stock and reservations, read without changing them.
    #[command(subcommand)]
    Inventory(inventory::InventoryCmd),
    /// A semaphore's holders (show, read-only), and evicting a leaked permit.
    #[command(subcommand)]
    Semaphore(semaphore::SemaphoreCmd),
}

#[derive(Subcommand, Debug, Clone)]
enum Functions {
    /// The libraries on every node, replicas included.
    List,
    /// FUNCTION LOAD REPLACE of the set's library on every primary (replicated to replicas);
    /// a previous version stays loaded beside it.
    Load,
    /// Exit 0 when every node, replicas included, holds the set's library with its exact
    /// code, 4 otherwise.
    Verify,
    /// FUNCTION DELETE of one library version on every primary (replicated).
    Delete {
        /// The library name, e.g. redkit_1f2e3d4c (see `functions list`).
        library: String,
    },
    /// FUNCTION FLUSH on every primary (ASYNC unless --sync). Requires --yes.
    Flush {
        /// Confirm: delete every library on every node.
        #[arg(long)]
        yes: bool,
        /// Use FUNCTION FLUSH SYNC.
        #[arg(long)]
        sync: bool,
    },
}

impl Functions {
    fn name(&self) -> &'static str {
        match self {
            Self::List => "functions list",
            Self::Load => "functions load",
            Self::Verify => "functions verify",
            Self::Delete { .. } => "functions delete",
            Self::Flush { .. } => "functions flush",
        }
    }
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Self::Scripts(s) => s.name(),
            Self::Functions(f) => f.name(),
            Self::Limits(l) => l.name(),
            Self::Locks(l) => l.name(),
            Self::Inventory(i) => i.name(),
            Self::Semaphore(s) => s.name(),
        }
    }
}

#[derive(Subcommand, Debug, Clone, Copy)]
enum Scripts {
    /// Name, version, SHA1 and key count of every script of the set (no Redis needed).
    List,
    /// Check the set against its scripts.lock: exit 0 when they agree, 4 when a pinned script
    /// changed, is unpinned or is gone (no Redis needed).
    Check,
    /// Pin new script versions in <scripts-dir>/scripts.lock (append-only: refuses, exit 4,
    /// when a pinned script changed). Needs --scripts-dir.
    Lock,
    /// Per node: address, role, server version, which embedded scripts are loaded and how
    /// many retired ones (versions this build no longer calls) it still holds.
    Status,
    /// SCRIPT LOAD every embedded script on every node, replicas included (idempotent).
    Load,
    /// Exit 0 when every primary has every embedded script, 4 otherwise.
    Verify,
    /// SCRIPT FLUSH on every node (ASYNC unless --sync). Requires --yes.
    Flush {
        /// Confirm: drop every cached script on every node.
        #[arg(long)]
        yes: bool,
        /// Use SCRIPT FLUSH SYNC.
        #[arg(long)]
        sync: bool,
    },
    /// Drop the retired scripts a node still caches: SCRIPT FLUSH, then SCRIPT LOAD of the
    /// embedded set, on each node that holds one. Refuses (exit 2) when no node holds a
    /// retired script, unless --force. Calls during the flush recover through NOSCRIPT ->
    /// EVAL and never fail.
    Prune {
        /// Flush and reload every node, even when none holds a retired script.
        #[arg(long)]
        force: bool,
        /// Use SCRIPT FLUSH SYNC.
        #[arg(long)]
        sync: bool,
    },
    /// SCRIPT KILL on every node; reports NOTBUSY / UNKILLABLE, never escalates to SHUTDOWN.
    Kill,
}

impl Scripts {
    fn name(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Check => "check",
            Self::Lock => "lock",
            Self::Status => "status",
            Self::Load => "load",
            Self::Verify => "verify",
            Self::Flush { .. } => "flush",
            Self::Prune { .. } => "prune",
            Self::Kill => "kill",
        }
    }
}

impl Cli {
    fn mode(&self) -> Mode {
        Mode::new(self.json, self.quiet)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(parse_failed(&e)),
    };
    let mode = cli.mode();
    let command = cli.command.clone();
    let result = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => match &command {
            Command::Scripts(c) => runtime.block_on(run(&cli, *c)),
            Command::Functions(f) => runtime.block_on(run_functions(&cli, f)),
            data @ (Command::Limits(_)
            | Command::Locks(_)
            | Command::Inventory(_)
            | Command::Semaphore(_)) => runtime.block_on(run_data(&cli, data)),
        },
        Err(e) => Err(Failure::io(format!("cannot start runtime: {e}"))),
    };
    ExitCode::from(match result {
        Ok(code) => code,
        Err(f) => fail(mode, Some(command.name()), &f),
    })
}

/// Reports a failure of the whole command (one JSON document under `--json`, one line on
/// stderr) and returns its exit code; a closed stdout or stderr ends quietly.
fn fail(mode: Mode, command: Option<&str>, f: &Failure) -> u8 {
    if f.is_broken_pipe() {
        return f.code;
    }
    let printed = match mode {
        Mode::Json => print_json(&document(command, Some(f), json!({}))),
        Mode::Text | Mode::Quiet => Ok(()),
    };
    if printed.is_err_and(|e| e.is_broken_pipe()) {
        return EXIT_BROKEN_PIPE;
    }
    // Said on stderr even when stdout failed otherwise (e.g. a full disk).
    match diag(&f.message) {
        Err(e) if e.is_broken_pipe() => EXIT_BROKEN_PIPE,
        _ => f.code,
    }
}

/// The command line could not be parsed, or asked for help or the version: clap prints its
/// text (help and version on stdout, an error on stderr); under `--json` an error is a JSON
/// document on stdout too.
fn parse_failed(e: &clap::Error) -> u8 {
    if e.use_stderr() && written_mode(std::env::args_os()) == Mode::Json {
        let rendered = e.render().to_string();
        let message = match e.kind() {
            // clap prints the help of the command that lacks its subcommand.
            clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                "a subcommand is required (--help lists them)"
            }
            _ => rendered.lines().next().unwrap_or_default(),
        };
        let failure = Failure::usage(message.strip_prefix("error: ").unwrap_or(message));
        let printed = print_json(&document(None, Some(&failure), json!({})));
        if printed.is_err_and(|f| f.is_broken_pipe()) {
            return EXIT_BROKEN_PIPE;
        }
    }
    match e.print() {
        Err(io) if io.kind() == std::io::ErrorKind::BrokenPipe => EXIT_BROKEN_PIPE,
        _ => u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE),
    }
}

/// The mode `--json` and `-q` ask for on a command line clap could not parse (they are global:
/// anywhere before `--`).
fn written_mode(args: impl Iterator<Item = std::ffi::OsString>) -> Mode {
    let (mut json, mut quiet) = (false, false);
    for arg in args.skip(1) {
        match arg.to_str() {
            Some("--") => break,
            Some("--json") => json = true,
            Some("--quiet") => quiet = true,
            // A cluster of short flags: -q, -qh, ...
            Some(a) if !a.starts_with("--") && a.starts_with('-') && a.contains('q') => {
                quiet = true;
            }
            _ => {}
        }
    }
    Mode::new(json, quiet)
}

async fn run(cli: &Cli, command: Scripts) -> Result<u8, Failure> {
    let registry = registry(cli)?;
    match command {
        Scripts::List => {
            match cli.mode() {
                Mode::Json => print_json(&document(
                    Some("list"),
                    None,
                    json!({"scripts": list_rows(&registry)}),
                ))?,
                Mode::Text => print_list(&registry)?,
                Mode::Quiet => {}
            }
            return Ok(0);
        }
        Scripts::Check => return check(cli, &registry),
        Scripts::Lock => return lock(cli, &registry),
        _ => {}
    }
    if !registry.problems().is_empty() {
        let problems: Vec<String> = registry
            .problems()
            .iter()
            .map(|p| format!("{}: {}", p.file, p.problem))
            .collect();
        return Err(Failure::usage(format!(
            "the script folder has invalid files: {}",
            problems.join("; ")
        )));
    }
    if let Scripts::Flush { yes: false, .. } = command {
        return Err(Failure::usage(format!(
            "refusing to flush the script cache of {} without --yes",
            target_description(cli)
        )));
    }
    let admin = admin(cli)?.with_scripts(registry);
    let target = target_description(cli);
    let fail = |e: redkit::Error| Failure::from_error(&target, &e);
    let outcome = match command {
        Scripts::List | Scripts::Check | Scripts::Lock => unreachable!("handled above"),
        Scripts::Status => status_outcome(&admin.status().await.map_err(fail)?),
        Scripts::Load => load_outcome(&admin.load().await.map_err(fail)?),
        Scripts::Verify => verify_outcome(
            &admin.verify().await.map_err(fail)?,
            admin.scripts().scripts().len(),
        ),
        Scripts::Flush { sync, .. } => {
            let mode = if sync {
                FlushMode::Sync
            } else {
                FlushMode::Async
            };
            flush_outcome(&admin.flush(mode).await.map_err(fail)?)
        }
        Scripts::Prune { force, sync } => {
            let mode = if sync {
                FlushMode::Sync
            } else {
                FlushMode::Async
            };
            let reports = admin.prune(mode, force).await.map_err(fail)?;
            let nothing_held = reports
                .iter()
                .all(|r| r.is_ok() && r.value.as_ref().is_some_and(|p| p.retired.is_empty()));
            if nothing_held && !force {
                return Err(Failure::usage(format!(
                    "refusing to prune: no node of {target} holds a retired script (of {} \
                     retired); nothing was flushed. --force flushes and reloads anyway",
                    admin.scripts().retired().len()
                )));
            }
            prune_outcome(&reports)
        }
        Scripts::Kill => kill_outcome(&admin.kill().await.map_err(fail)?),
    };
    report(cli, command.name(), &target, outcome)
}

/// Prints an outcome (JSON document or lines, and on stderr what failed) and returns the
/// exit code: the worst node failure's, else the verdict's, else 0.
fn report(cli: &Cli, command: &str, target: &str, outcome: Outcome) -> Result<u8, Failure> {
    let nodes = outcome.json.as_array().map_or(0, Vec::len);
    let mode = cli.mode();
    if !cli.cluster && nodes > 1 && mode == Mode::Text {
        diag(&format!(
            "{target} is a Cluster node: acting on all {nodes} nodes of its Cluster"
        ))?;
    }
    let node_failure = Failure::of_nodes(command, nodes, &outcome.errors);
    let failure = node_failure.as_ref().or(outcome.verdict.as_ref());
    match mode {
        Mode::Json => print_json(&document(
            Some(command),
            failure,
            json!({"nodes": outcome.json}),
        ))?,
        Mode::Text => {
            for line in &outcome.lines {
                out(line)?;
            }
        }
        Mode::Quiet => {}
    }
    for f in node_failure.iter().chain(&outcome.verdict) {
        diag(&f.message)?;
    }
    Ok(failure.map_or(0, |f| f.code))
}

/// `redkit functions ...`: the set's Functions library on every node.
async fn run_functions(cli: &Cli, command: &Functions) -> Result<u8, Failure> {
    let registry = registry(cli)?;
    if !registry.problems().is_empty() {
        return Err(Failure::usage(
            "the script folder has invalid files (see `redkit scripts check`)",
        ));
    }
    let set = match (&cli.set, &cli.scripts_dir) {
        (Some(set), _) => set.clone(),
        (None, None) => "redkit".to_owned(),
        (None, Some(_)) => {
            return Err(Failure::usage(
                "--set <name> is needed with --scripts-dir: it names the library",
            ))
        }
    };
    let library = Library::new(&set, &registry).map_err(|e| Failure::usage(e.to_string()))?;
    if let Functions::Flush { yes: false, .. } = command {
        return Err(Failure::usage(format!(
            "refusing to delete every Functions library of {} without --yes",
            target_description(cli)
        )));
    }
    let admin = admin(cli)?;
    let target = target_description(cli);
    let fail = |e: redkit::Error| Failure::from_error(&target, &e);
    let outcome = match command {
        Functions::List => {
            let reports = admin.libraries().await.map_err(fail)?;
            simple_outcome(&reports, |libs| {
                let libs = libs.cloned().unwrap_or_default();
                (libs.join(" "), json!({"libraries": libs}))
            })
        }
        Functions::Load => {
            simple_outcome(&admin.load_library(&library).await.map_err(fail)?, |_| {
                (
                    format!("loaded {}", library.name()),
                    json!({"library": library.name()}),
                )
            })
        }
        Functions::Verify => {
            let reports = admin.verify_library(&library).await.map_err(fail)?;
            let mut outcome = simple_outcome(&reports, |state| {
                let state = match state {
                    Some(LibraryState::Loaded) => "loaded",
                    Some(LibraryState::Missing) => "missing",
                    _ => "different",
                };
                (
                    format!("{state} {}", library.name()),
                    json!({"library": library.name(), "state": state}),
                )
            });
            if reports
                .iter()
                .any(|r| r.is_ok() && r.value != Some(LibraryState::Loaded))
            {
                outcome.verdict = Some(Failure::verify_failed(format!(
                    "verification failed: {} is not loaded on every node",
                    library.name()
                )));
            }
            outcome
        }
        Functions::Delete { library: name } => simple_outcome(
            &admin.delete_library(name).await.map_err(fail)?,
            |deleted| {
                let deleted = deleted.copied().unwrap_or(false);
                let text = if deleted { "deleted" } else { "not there" };
                (
                    format!("{text} {name}"),
                    json!({"library": name, "deleted": deleted}),
                )
            },
        ),
        Functions::Flush { sync, .. } => {
            let mode = if *sync {
                FlushMode::Sync
            } else {
                FlushMode::Async
            };
            simple_outcome(&admin.flush_functions(mode).await.map_err(fail)?, |_| {
                ("flushed".to_owned(), json!({}))
            })
        }
    };
    report(cli, command.name(), &target, outcome)
}

fn urls(cli: &Cli) -> Vec<String> {
    if !cli.url.is_empty() {
        return cli.url.clone();
    }
    vec![std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())]
}

fn admin(cli: &Cli) -> Result<Admin, Failure> {
    let urls = urls(cli);
    for url in &urls {
        check_url(url).map_err(|why| Failure::usage(format!("invalid Redis URL: {why}")))?;
    }
    let usage = |e: redkit::Error| {
        // The URL itself may hold a password: describe the problem, not the URL.
        Failure::usage(format!(
            "invalid Redis URL: {}",
            redact(&e.to_string(), &urls)
        ))
    };
    let admin = if cli.cluster {
        Admin::cluster(urls.iter().map(String::as_str)).map_err(usage)?
    } else {
        if urls.len() > 1 {
            return Err(Failure::usage(
                "several --url given: add --cluster to treat them as Cluster seeds",
            ));
        }
        Admin::single(urls[0].as_str()).map_err(usage)?
    };
    Ok(admin.with_timeout(Duration::from_millis(cli.timeout_ms.max(1))))
}

/// A data command (`limits`, `locks`, `inventory`, `semaphore`) on the connection the options
/// say.
async fn run_data(cli: &Cli, command: &Command) -> Result<u8, Failure> {
    let (mut conn, target) = data_connection(cli).await?;
    let (conn, mode) = (&mut conn, cli.mode());
    match command {
        Command::Limits(c) => limits::run(c, conn, mode, &target).await,
        Command::Locks(c) => locks::run(c, conn, mode, &target).await,
        Command::Inventory(c) => inventory::run(c, conn, mode, &target).await,
        Command::Semaphore(c) => semaphore::run(c, conn, mode, &target).await,
        Command::Scripts(_) | Command::Functions(_) => Err(Failure::usage("not a command on data")),
    }
}

/// The connection of a data command, as the options say, and how the target is described.
async fn data_connection(cli: &Cli) -> Result<(connection::Conn, String), Failure> {
    let urls = urls(cli);
    for url in &urls {
        check_url(url).map_err(|why| Failure::usage(format!("invalid Redis URL: {why}")))?;
    }
    if !cli.cluster && urls.len() > 1 {
        return Err(Failure::usage(
            "several --url given: add --cluster to treat them as Cluster seeds",
        ));
    }
    let target = target_description(cli);
    let timeout = Duration::from_millis(cli.timeout_ms.max(1));
    let conn = connection::connect(&urls, cli.cluster, timeout, &target).await?;
    Ok((conn, target))
}

/// Says what is wrong with a URL, without repeating it (it may hold a password).
fn check_url(text: &str) -> Result<(), String> {
    const SCHEMES: &str = "redis://, rediss://, unix:// or redis+unix://";
    let parsed = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => {
            format!("no scheme: it must start with {SCHEMES} (e.g. redis://127.0.0.1:6379/)")
        }
        url::ParseError::InvalidPort => "the port is not a number from 1 to 65535".to_owned(),
        url::ParseError::EmptyHost => "the host is empty".to_owned(),
        other => other.to_string(),
    })?;
    match parsed.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" => {
            if parsed.host_str().is_none_or(str::is_empty) {
                return Err("the host is empty".to_owned());
            }
            let db = parsed.path().trim_matches('/');
            if !db.is_empty() && db.parse::<i64>().is_err() {
                return Err("the path must be a database number (e.g. /0)".to_owned());
            }
            Ok(())
        }
        "unix" | "redis+unix" => Ok(()),
        other => Err(format!("unknown scheme {other:?}: use {SCHEMES}")),
    }
}

/// `host:port` of every URL, for messages (no user, no password).
fn target_description(cli: &Cli) -> String {
    let addrs: Vec<String> = urls(cli)
        .iter()
        .map(|u| {
            redis::IntoConnectionInfo::into_connection_info(u.as_str())
                .map(|i| redkit::script::admin::describe_addr(i.addr()))
                .unwrap_or_else(|_| "<invalid url>".to_owned())
        })
        .collect();
    format!("Redis at {}", addrs.join(", "))
}

/// Removes any URL (which may carry a password) from a message.
fn redact(message: &str, urls: &[String]) -> String {
    urls.iter()
        .fold(message.to_owned(), |m, u| m.replace(u.as_str(), "<url>"))
}

#[derive(Serialize)]
struct ListRow<'a> {
    name: &'a str,
    version: u32,
    sha1: &'a str,
    /// Keys every call passes (the minimum for a variadic script).
    keys: usize,
    /// `true` when calls choose their number of keys (at least `keys`).
    variadic: bool,
}

fn list_rows(registry: &Registry) -> Vec<ListRow<'_>> {
    registry
        .scripts()
        .iter()
        .map(|s| ListRow {
            name: s.name(),
            version: s.version(),
            sha1: s.sha1(),
            keys: s.key_count(),
            variadic: s.is_variadic(),
        })
        .collect()
}

fn print_list(registry: &Registry) -> Result<(), Failure> {
    out(&format!(
        "{:<24} {:>7} {:>4}  SHA1",
        "NAME", "VERSION", "KEYS"
    ))?;
    for r in list_rows(registry) {
        let keys = if r.variadic {
            format!("{}+", r.keys)
        } else {
            r.keys.to_string()
        };
        out(&format!(
            "{:<24} {:>7} {:>4}  {}",
            r.name, r.version, keys, r.sha1
        ))?;
    }
    Ok(())
}

/// The script set: `--scripts-dir`, or redkit's embedded scripts.
fn registry(cli: &Cli) -> Result<Registry, Failure> {
    match &cli.scripts_dir {
        Some(dir) => Registry::from_dir(dir).map_err(|e| Failure::usage(e.to_string())),
        None => Ok(Registry::global().clone()),
    }
}

/// `scripts check`: the set against its lock.
fn check(cli: &Cli, registry: &Registry) -> Result<u8, Failure> {
    let problems = lockfile::check(registry);
    let scripts = registry.scripts().len();
    if !problems.is_empty() {
        let fields = json!({"scripts": scripts});
        return lock_problems(
            cli,
            "check",
            "the set differs from its lock",
            &problems,
            fields,
        );
    }
    match cli.mode() {
        Mode::Json => print_json(&document(
            Some("check"),
            None,
            json!({"scripts": scripts, "problems": []}),
        ))?,
        Mode::Text => out(&format!("ok: {scripts} scripts, all pinned and unchanged"))?,
        Mode::Quiet => {}
    }
    Ok(0)
}

/// Reports what is wrong between the set and its lock (exit 4): under `--json` a document
/// with `problems` (and `fields`); on stderr `message`, then one line per problem.
fn lock_problems(
    cli: &Cli,
    command: &str,
    message: &str,
    problems: &[lockfile::LockProblem],
    mut fields: Value,
) -> Result<u8, Failure> {
    let failure = Failure::verify_failed(format!("{message} ({} problems)", problems.len()));
    let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
    if cli.mode() == Mode::Json {
        fields["problems"] = json!(list);
        print_json(&document(Some(command), Some(&failure), fields))?;
    }
    diag(&failure.message)?;
    for problem in &list {
        diag(problem)?;
    }
    Ok(failure.code)
}

/// `scripts lock`: append pins for new versions to `<dir>/scripts.lock`.
fn lock(cli: &Cli, registry: &Registry) -> Result<u8, Failure> {
    let Some(dir) = &cli.scripts_dir else {
        return Err(Failure::usage(
            "`scripts lock` writes <dir>/scripts.lock: give --scripts-dir <dir>",
        ));
    };
    let path = dir.join(LOCK_FILE);
    let before = registry.lock_text().map(str::to_owned);
    let text = match lockfile::bless(registry, before.as_deref()) {
        Ok(text) => text,
        Err(problems) => {
            let message = "refusing to rewrite pins";
            return lock_problems(cli, "lock", message, &problems, json!({}));
        }
    };
    let added = before
        .as_deref()
        .map_or(text.len(), |b| text.len().saturating_sub(b.len()));
    if before.as_deref() != Some(text.as_str()) {
        std::fs::write(&path, &text)
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", path.display())))?;
    }
    match cli.mode() {
        Mode::Json => print_json(&document(Some("lock"), None, json!({"changed": added > 0})))?,
        Mode::Text => out(&format!(
            "{}: {}",
            path.display(),
            if added > 0 {
                "new versions pinned"
            } else {
                "already up to date"
            }
        ))?,
        Mode::Quiet => {}
    }
    Ok(0)
}
