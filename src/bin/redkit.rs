//! `redkit`: script-cache administration on one server or every node of a Redis Cluster.
//!
//! Data goes to stdout (a table, or one JSON document with `--json`); diagnostics go to
//! stderr. Every node is reported, failed or not: an operation goes on past a failed node.
//! Exit codes: 0 success, 1 a node answered an error (or is BUSY, or a script is UNKILLABLE),
//! 2 usage error, 3 a node unreachable, 4 verification failed (a primary lacks a script),
//! 5 authentication or ACL refused. When nodes fail in several ways, the first of 5, 3, 1
//! applies.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redkit::script::admin::{
    Admin, FlushMode, KillOutcome, LibraryState, Node, NodeError, NodeErrorKind, NodeReport,
    NodeStatus, Pruned, Role, Verification,
};
use redkit::script::lockfile;
use redkit::script::Library;
use redkit::script::LOCK_FILE;
use redkit::Registry;
use serde::Serialize;
use serde_json::{json, Value};

/// Exit code: a node answered with an error (or is BUSY; or a script is UNKILLABLE).
const EXIT_REDIS_ERROR: u8 = 1;
/// Exit code: bad command line (clap uses the same).
const EXIT_USAGE: u8 = 2;
/// Exit code: Redis could not be reached.
const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: `scripts verify` found missing scripts.
const EXIT_VERIFY_FAILED: u8 = 4;
/// Exit code: authentication (no or wrong password) or ACL refused.
const EXIT_AUTH: u8 = 5;

#[derive(Parser, Debug)]
#[command(
    name = "redkit",
    version,
    about = "Administer redkit's Lua scripts in Redis (one server, or every node of a Cluster)"
)]
#[command(
    after_help = "Exit codes: 0 ok, 1 a node answered an error (or BUSY / UNKILLABLE), \
                        2 usage error, 3 a node unreachable, 4 verification failed, \
                        5 authentication or ACL refused.\n\
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
    /// One JSON document on stdout (errors too): {"command", "ok", "exit_code", "nodes" |
    /// "scripts", "error"}.
    #[arg(long, global = true)]
    json: bool,
    /// Print nothing on stdout; the exit code and stderr tell the outcome.
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

/// A failure of the whole command, with its exit code and a one-line message (no password).
struct Failure {
    code: u8,
    kind: &'static str,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            kind: "usage",
            message: message.into(),
        }
    }

    fn from_error(context: &str, e: &redkit::Error) -> Self {
        let node = NodeErrorKind::of(e);
        let message = format!("{context}: {e}{}", hint(node));
        Self {
            code: exit_code(node),
            kind: kind_name(node),
            message: message.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

fn exit_code(kind: NodeErrorKind) -> u8 {
    match kind {
        NodeErrorKind::Auth => EXIT_AUTH,
        NodeErrorKind::Unreachable => EXIT_UNREACHABLE,
        _ => EXIT_REDIS_ERROR,
    }
}

fn kind_name(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Auth => "auth",
        NodeErrorKind::Unreachable => "unreachable",
        NodeErrorKind::Busy => "busy",
        _ => "redis",
    }
}

fn hint(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Auth => {
            " (hint: give the user and password in the URL, redis://user:password@host:port/, \
             and check the user's ACL)"
        }
        NodeErrorKind::Busy => {
            " (hint: a script is running; `redkit scripts kill` stops a read-only one)"
        }
        _ => "",
    }
}

/// The exit code for a set of per-node errors: auth first, then unreachable, then the rest.
fn worst<'a>(errors: impl IntoIterator<Item = &'a NodeError>) -> Option<u8> {
    errors
        .into_iter()
        .map(|e| exit_code(e.kind))
        .min_by_key(|code| match *code {
            EXIT_AUTH => 0,
            EXIT_UNREACHABLE => 1,
            _ => 2,
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.clone();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redkit: cannot start runtime: {e}");
            return ExitCode::from(EXIT_REDIS_ERROR);
        }
    };
    let result = match &command {
        Command::Scripts(c) => runtime.block_on(run(&cli, *c)),
        Command::Functions(f) => runtime.block_on(run_functions(&cli, f)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if cli.json {
                print_json(&json!({
                    "command": command.name(),
                    "ok": false,
                    "exit_code": f.code,
                    "error": {"kind": f.kind, "message": f.message},
                }));
            }
            eprintln!("redkit: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// What one command produced: JSON rows, human lines, and per-node errors.
struct Outcome {
    json: Value,
    lines: Vec<String>,
    errors: Vec<(String, NodeError)>,
    /// Exit code when no node failed (e.g. 4 for missing scripts).
    code_without_errors: u8,
}

async fn run(cli: &Cli, command: Scripts) -> Result<u8, Failure> {
    let registry = registry(cli)?;
    match command {
        Scripts::List => {
            if cli.json {
                print_json(&json!({"command": "list", "ok": true, "exit_code": 0,
                    "scripts": list_rows(&registry)}));
            } else if !cli.quiet {
                print_list(&registry);
            }
            return Ok(0);
        }
        Scripts::Check => return Ok(check(cli, &registry)),
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
    Ok(report(cli, command.name(), &target, outcome))
}

/// Prints an outcome (JSON document or lines, and a stderr summary of failed nodes) and
/// returns the exit code.
fn report(cli: &Cli, command: &str, target: &str, outcome: Outcome) -> u8 {
    let nodes = outcome.json.as_array().map_or(0, Vec::len);
    if !cli.cluster && nodes > 1 && !cli.quiet && !cli.json {
        eprintln!("redkit: {target} is a Cluster node: acting on all {nodes} nodes of its Cluster");
    }
    let code = worst(outcome.errors.iter().map(|(_, e)| e)).unwrap_or(outcome.code_without_errors);
    if cli.json {
        print_json(&json!({
            "command": command,
            "ok": code == 0,
            "exit_code": code,
            "nodes": outcome.json,
        }));
    } else if !cli.quiet {
        for line in &outcome.lines {
            println!("{line}");
        }
    }
    if !outcome.errors.is_empty() {
        let failed: Vec<String> = outcome
            .errors
            .iter()
            .map(|(addr, e)| {
                format!(
                    "{addr} ({}: {}{})",
                    kind_name(e.kind),
                    e.message,
                    hint(e.kind)
                )
            })
            .collect();
        eprintln!(
            "redkit: {command} failed on {} of {nodes} nodes: {}",
            failed.len(),
            failed.join("; ")
        );
    }
    code
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
                eprintln!(
                    "redkit: verification failed: {} is not loaded on every node",
                    library.name()
                );
                outcome.code_without_errors = EXIT_VERIFY_FAILED;
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
    Ok(report(cli, command.name(), &target, outcome))
}

/// One line and one JSON object per node report, from what `describe` makes of its value.
fn simple_outcome<T>(
    reports: &[NodeReport<T>],
    describe: impl Fn(Option<&T>) -> (String, Value),
) -> Outcome {
    let mut json = Vec::new();
    let mut lines = Vec::new();
    for r in reports {
        let (text, fields) = describe(r.value.as_ref());
        match &r.error {
            Some(e) => {
                json.push(node_json(&r.node, Some(e), json!({})));
                lines.push(error_line(&r.node, e));
            }
            None => {
                json.push(node_json(&r.node, None, fields));
                lines.push(format!(
                    "{}\t{}\t{text}",
                    r.node.addr,
                    role_name(r.node.role)
                ));
            }
        }
    }
    Outcome {
        json: Value::Array(json),
        lines,
        errors: errors_of(reports),
        code_without_errors: 0,
    }
}

/// The JSON object of one node: `addr`, `role`, `ok`, `error` and the command's fields.
fn node_json(node: &Node, error: Option<&NodeError>, fields: Value) -> Value {
    let mut row = json!({
        "addr": node.addr,
        "role": role_name(node.role),
        "ok": error.is_none(),
        "error": error.map(|e| json!({"kind": kind_name(e.kind), "message": e.message})),
    });
    if let (Some(row), Value::Object(fields)) = (row.as_object_mut(), fields) {
        row.extend(fields);
    }
    row
}

fn errors_of<'a, T: 'a>(
    reports: impl IntoIterator<Item = &'a NodeReport<T>>,
) -> Vec<(String, NodeError)> {
    reports
        .into_iter()
        .filter_map(|r| Some((r.node.addr.clone(), r.error.clone()?)))
        .collect()
}

fn error_line(node: &Node, e: &NodeError) -> String {
    format!(
        "{}\t{}\tFAILED ({}): {}",
        node.addr,
        role_name(node.role),
        kind_name(e.kind),
        e.message
    )
}

fn status_outcome(statuses: &[NodeStatus]) -> Outcome {
    let mut lines = vec![format!(
        "{:<22} {:<8} {:<9} LOADED",
        "NODE", "ROLE", "VERSION"
    )];
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for s in statuses {
        let role = role_name(s.node.role);
        rows.push(node_json(
            &s.node,
            s.error.as_ref(),
            json!({"version": s.version, "scripts": s.scripts, "retired": s.retired}),
        ));
        match &s.error {
            Some(e) => {
                errors.push((s.node.addr.clone(), e.clone()));
                lines.push(format!(
                    "{:<22} {:<8} {:<9} FAILED ({}): {}",
                    s.node.addr,
                    role,
                    "-",
                    kind_name(e.kind),
                    e.message
                ));
            }
            None => {
                let loaded = s.scripts.iter().filter(|p| p.loaded).count();
                let missing: Vec<&str> = s
                    .scripts
                    .iter()
                    .filter(|p| !p.loaded)
                    .map(|p| p.script.as_str())
                    .collect();
                let mut line = format!(
                    "{:<22} {:<8} {:<9} {loaded}/{}",
                    s.node.addr,
                    role,
                    s.version.as_deref().unwrap_or("?"),
                    s.scripts.len()
                );
                if !missing.is_empty() {
                    line.push_str(&format!("  missing: {}", missing.join(", ")));
                }
                if !s.retired.is_empty() {
                    line.push_str(&format!(
                        "  holds {} retired redkit scripts (`redkit scripts prune` removes them)",
                        s.retired.len()
                    ));
                }
                lines.push(line);
            }
        }
    }
    Outcome {
        json: Value::Array(rows),
        lines,
        errors,
        code_without_errors: 0,
    }
}

fn load_outcome(reports: &[NodeReport<usize>]) -> Outcome {
    Outcome {
        json: reports
            .iter()
            .map(|r| node_json(&r.node, r.error.as_ref(), json!({"loaded": r.value})))
            .collect(),
        lines: reports
            .iter()
            .map(|r| match (&r.value, &r.error) {
                (_, Some(e)) => error_line(&r.node, e),
                (n, None) => format!(
                    "{}\t{}\tloaded {}",
                    r.node.addr,
                    role_name(r.node.role),
                    n.unwrap_or(0)
                ),
            })
            .collect(),
        errors: errors_of(reports),
        code_without_errors: 0,
    }
}

fn verify_outcome(report: &Verification, scripts: usize) -> Outcome {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    for p in &report.primaries {
        if let Some(e) = &p.error {
            errors.push((p.node.addr.clone(), e.clone()));
            lines.push(error_line(&p.node, e));
        }
        for script in &p.missing {
            lines.push(format!("missing\t{}\t{script}", p.node.addr));
        }
    }
    if report.is_ok() {
        lines.push(format!(
            "ok: all {scripts} scripts loaded on {} primaries",
            report.primaries.len()
        ));
    }
    let missing: usize = report.primaries.iter().map(|p| p.missing.len()).sum();
    if missing > 0 {
        eprintln!("redkit: verification failed: {missing} scripts missing");
    }
    Outcome {
        json: report
            .primaries
            .iter()
            .map(|p| node_json(&p.node, p.error.as_ref(), json!({"missing": p.missing})))
            .collect(),
        lines,
        errors,
        code_without_errors: if report.is_ok() {
            0
        } else {
            EXIT_VERIFY_FAILED
        },
    }
}

fn flush_outcome(reports: &[NodeReport<()>]) -> Outcome {
    Outcome {
        json: reports
            .iter()
            .map(|r| node_json(&r.node, r.error.as_ref(), json!({})))
            .collect(),
        lines: reports
            .iter()
            .map(|r| match &r.error {
                Some(e) => error_line(&r.node, e),
                None => format!("{}\t{}\tflushed", r.node.addr, role_name(r.node.role)),
            })
            .collect(),
        errors: errors_of(reports),
        code_without_errors: 0,
    }
}

fn prune_outcome(reports: &[NodeReport<Pruned>]) -> Outcome {
    Outcome {
        json: reports
            .iter()
            .map(|r| {
                let fields = r.value.as_ref().map_or(
                    json!({}),
                    |p| json!({"retired": p.retired, "flushed": p.flushed, "loaded": p.loaded}),
                );
                node_json(&r.node, r.error.as_ref(), fields)
            })
            .collect(),
        lines: reports
            .iter()
            .map(|r| {
                let text = match (&r.value, &r.error) {
                    (_, Some(e)) => return error_line(&r.node, e),
                    (Some(p), None) if p.flushed => format!(
                        "flushed ({} retired dropped), loaded {}",
                        p.retired.len(),
                        p.loaded
                    ),
                    (_, None) => "no retired script: left alone".to_owned(),
                };
                format!("{}\t{}\t{text}", r.node.addr, role_name(r.node.role))
            })
            .collect(),
        errors: errors_of(reports),
        code_without_errors: 0,
    }
}

fn kill_outcome(reports: &[NodeReport<KillOutcome>]) -> Outcome {
    let stuck = reports
        .iter()
        .any(|r| r.value == Some(KillOutcome::Unkillable));
    Outcome {
        json: reports
            .iter()
            .map(|r| node_json(&r.node, r.error.as_ref(), json!({"outcome": r.value})))
            .collect(),
        lines: reports
            .iter()
            .map(|r| {
                let text = match (&r.value, &r.error) {
                    (_, Some(e)) => return error_line(&r.node, e),
                    (Some(KillOutcome::Killed), _) => "killed".to_owned(),
                    (Some(KillOutcome::NotBusy), _) => "not busy (no script running)".to_owned(),
                    (Some(KillOutcome::Unkillable), _) => {
                        "UNKILLABLE: the script has written; not escalating to SHUTDOWN".to_owned()
                    }
                    (other, None) => format!("{other:?}"),
                };
                format!("{}\t{}\t{text}", r.node.addr, role_name(r.node.role))
            })
            .collect(),
        errors: errors_of(reports),
        code_without_errors: if stuck { EXIT_REDIS_ERROR } else { 0 },
    }
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

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Primary => "primary",
        Role::Replica => "replica",
        _ => "other",
    }
}

fn print_json<T: Serialize + ?Sized>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("redkit: cannot encode JSON: {e}"),
    }
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

fn print_list(registry: &Registry) {
    println!("{:<24} {:>7} {:>4}  SHA1", "NAME", "VERSION", "KEYS");
    for r in list_rows(registry) {
        let keys = if r.variadic {
            format!("{}+", r.keys)
        } else {
            r.keys.to_string()
        };
        println!("{:<24} {:>7} {:>4}  {}", r.name, r.version, keys, r.sha1);
    }
}

/// The script set: `--scripts-dir`, or redkit's embedded scripts.
fn registry(cli: &Cli) -> Result<Registry, Failure> {
    match &cli.scripts_dir {
        Some(dir) => Registry::from_dir(dir).map_err(|e| Failure::usage(e.to_string())),
        None => Ok(Registry::global().clone()),
    }
}

/// `scripts check`: the set against its lock.
fn check(cli: &Cli, registry: &Registry) -> u8 {
    let problems = lockfile::check(registry);
    let code = if problems.is_empty() {
        0
    } else {
        EXIT_VERIFY_FAILED
    };
    if cli.json {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        print_json(
            &json!({"command": "check", "ok": code == 0, "exit_code": code,
            "scripts": registry.scripts().len(), "problems": list}),
        );
    } else if problems.is_empty() {
        if !cli.quiet {
            println!(
                "ok: {} scripts, all pinned and unchanged",
                registry.scripts().len()
            );
        }
    } else {
        eprintln!(
            "redkit: {}",
            lockfile::report(&problems).replace('\n', "\nredkit: ")
        );
    }
    code
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
            if cli.json {
                let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
                print_json(
                    &json!({"command": "lock", "ok": false, "exit_code": EXIT_VERIFY_FAILED, "problems": list}),
                );
            }
            eprintln!(
                "redkit: refusing to rewrite pins: {}",
                lockfile::report(&problems).replace('\n', "; ")
            );
            return Ok(EXIT_VERIFY_FAILED);
        }
    };
    let added = before
        .as_deref()
        .map_or(text.len(), |b| text.len().saturating_sub(b.len()));
    if before.as_deref() != Some(text.as_str()) {
        std::fs::write(&path, &text).map_err(|e| Failure {
            code: EXIT_REDIS_ERROR,
            kind: "io",
            message: format!("cannot write {}: {e}", path.display()),
        })?;
    }
    if cli.json {
        print_json(&json!({"command": "lock", "ok": true, "exit_code": 0, "changed": added > 0}));
    } else if !cli.quiet {
        println!(
            "{}: {}",
            path.display(),
            if added > 0 {
                "new versions pinned"
            } else {
                "already up to date"
            }
        );
    }
    Ok(0)
}
