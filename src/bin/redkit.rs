//! `redkit`: script-cache administration on one server or every node of a Redis Cluster.
//!
//! Data goes to stdout (a table, or JSON with `--json`); diagnostics go to stderr.
//! Exit codes: 0 success, 1 Redis answered with an error, 2 usage error, 3 Redis unreachable,
//! 4 verification failed (a primary lacks a script).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redkit::script::admin::{Admin, FlushMode, KillOutcome, NodeStatus, Role, Verification};
use redkit::Registry;
use serde::Serialize;

/// Exit code: Redis answered with an error.
const EXIT_REDIS_ERROR: u8 = 1;
/// Exit code: bad command line (clap uses the same).
const EXIT_USAGE: u8 = 2;
/// Exit code: Redis could not be reached.
const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: `scripts verify` found missing scripts.
const EXIT_VERIFY_FAILED: u8 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "redkit",
    version,
    about = "Administer redkit's Lua scripts in Redis"
)]
#[command(
    after_help = "Exit codes: 0 ok, 1 Redis error, 2 usage error, 3 Redis unreachable, \
                        4 verification failed."
)]
struct Cli {
    /// Redis URL (repeat for several Cluster seeds). Defaults to $REDIS_URL, then
    /// redis://127.0.0.1:6379/.
    #[arg(long, global = true)]
    url: Vec<String>,
    /// Treat the URL(s) as seeds of a Redis Cluster and act on every node.
    #[arg(long, global = true)]
    cluster: bool,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// Per-node connect and response timeout, in milliseconds.
    #[arg(long, global = true, default_value_t = 5000)]
    timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The embedded Lua scripts.
    #[command(subcommand)]
    Scripts(Scripts),
}

#[derive(Subcommand, Debug)]
enum Scripts {
    /// Name, version, SHA1 and key count of every embedded script (no Redis needed).
    List,
    /// Per node: address, role, server version and which embedded scripts are loaded.
    Status,
    /// SCRIPT LOAD every embedded script on every node (idempotent).
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
    /// SCRIPT KILL on every node; reports NOTBUSY / UNKILLABLE, never escalates to SHUTDOWN.
    /// Exits 1 when a node reports UNKILLABLE or could not be asked.
    Kill,
}

/// A failure with its exit code and a one-line message (never a password).
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn from_error(context: &str, e: redkit::Error) -> Self {
        let code = if e.is_unavailable() {
            EXIT_UNREACHABLE
        } else {
            EXIT_REDIS_ERROR
        };
        let message = format!("{context}: {e}");
        Self {
            code,
            message: message.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("redkit: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    if let Command::Scripts(Scripts::List) = cli.command {
        list(cli.json);
        return Ok(0);
    }
    let admin = admin(&cli)?;
    let target = target_description(&cli);
    let fail = |e| Failure::from_error(&target, e);
    match cli.command {
        Command::Scripts(Scripts::List) => unreachable!("handled above"),
        Command::Scripts(Scripts::Status) => {
            let statuses = admin.status().await.map_err(fail)?;
            print_status(&statuses, cli.json);
            Ok(0)
        }
        Command::Scripts(Scripts::Load) => {
            let loaded = admin.load().await.map_err(fail)?;
            if cli.json {
                let rows: Vec<_> = loaded
                    .iter()
                    .map(|(n, count)| serde_json::json!({"addr": n.addr, "role": n.role, "loaded": count}))
                    .collect();
                print_json(&rows);
            } else {
                for (node, count) in &loaded {
                    println!("{}\t{}\tloaded {count}", node.addr, role_name(node.role));
                }
            }
            Ok(0)
        }
        Command::Scripts(Scripts::Verify) => {
            let report = admin.verify().await.map_err(fail)?;
            print_verification(&report, cli.json);
            Ok(if report.is_ok() {
                0
            } else {
                EXIT_VERIFY_FAILED
            })
        }
        Command::Scripts(Scripts::Flush { yes, sync }) => {
            if !yes {
                eprintln!("redkit: refusing to flush the script cache of {target} without --yes");
                return Ok(EXIT_USAGE);
            }
            let mode = if sync {
                FlushMode::Sync
            } else {
                FlushMode::Async
            };
            let nodes = admin.flush(mode).await.map_err(fail)?;
            if cli.json {
                print_json(&nodes);
            } else {
                for n in &nodes {
                    println!("{}\tflushed", n.addr);
                }
            }
            Ok(0)
        }
        Command::Scripts(Scripts::Kill) => {
            let outcomes = admin.kill().await.map_err(fail)?;
            let stuck = outcomes
                .iter()
                .any(|(_, o)| matches!(o, KillOutcome::Unkillable | KillOutcome::Failed(_)));
            if cli.json {
                let rows: Vec<_> = outcomes
                    .iter()
                    .map(|(n, o)| serde_json::json!({"addr": n.addr, "role": n.role, "outcome": o}))
                    .collect();
                print_json(&rows);
            } else {
                for (n, o) in &outcomes {
                    let text = match o {
                        KillOutcome::Killed => "killed".to_owned(),
                        KillOutcome::NotBusy => "not busy (no script running)".to_owned(),
                        KillOutcome::Unkillable => {
                            "UNKILLABLE: the script has written; not escalating to SHUTDOWN"
                                .to_owned()
                        }
                        KillOutcome::Failed(e) => format!("failed: {e}"),
                        _ => format!("{o:?}"),
                    };
                    println!("{}\t{text}", n.addr);
                }
            }
            Ok(if stuck { EXIT_REDIS_ERROR } else { 0 })
        }
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
    let usage = |e: redkit::Error| Failure {
        code: EXIT_USAGE,
        // The URL itself may hold a password: describe the problem, not the URL.
        message: format!("invalid Redis URL: {}", redact(&e.to_string(), &urls)),
    };
    let admin = if cli.cluster {
        Admin::cluster(urls.iter().map(String::as_str)).map_err(usage)?
    } else {
        if urls.len() > 1 {
            return Err(Failure {
                code: EXIT_USAGE,
                message: "several --url given: add --cluster to treat them as Cluster seeds"
                    .to_owned(),
            });
        }
        Admin::single(urls[0].as_str()).map_err(usage)?
    };
    Ok(admin.with_timeout(Duration::from_millis(cli.timeout_ms.max(1))))
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

fn list(json: bool) {
    let rows: Vec<ListRow> = Registry::global()
        .scripts()
        .iter()
        .map(|s| ListRow {
            name: s.name(),
            version: s.version(),
            sha1: s.sha1(),
            keys: s.key_count(),
            variadic: s.is_variadic(),
        })
        .collect();
    if json {
        print_json(&rows);
        return;
    }
    println!("{:<24} {:>7} {:>4}  SHA1", "NAME", "VERSION", "KEYS");
    for r in rows {
        let keys = if r.variadic {
            format!("{}+", r.keys)
        } else {
            r.keys.to_string()
        };
        println!("{:<24} {:>7} {:>4}  {}", r.name, r.version, keys, r.sha1);
    }
}

fn print_status(statuses: &[NodeStatus], json: bool) {
    if json {
        print_json(statuses);
        return;
    }
    println!("{:<22} {:<8} {:<9} LOADED", "NODE", "ROLE", "VERSION");
    for s in statuses {
        let role = role_name(s.node.role);
        match &s.error {
            Some(e) => println!(
                "{:<22} {:<8} {:<9} unreachable: {e}",
                s.node.addr, role, "-"
            ),
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
                println!("{line}");
            }
        }
    }
}

fn print_verification(report: &Verification, json: bool) {
    if json {
        print_json(report);
    } else if report.is_ok() {
        println!(
            "ok: all {} embedded scripts loaded on {} primaries",
            Registry::global().scripts().len(),
            report.primaries
        );
    } else {
        for (addr, script) in &report.missing {
            println!("missing\t{addr}\t{script}");
        }
        for (addr, error) in &report.unreachable {
            println!("unreachable\t{addr}\t{error}");
        }
    }
    if !report.is_ok() {
        eprintln!(
            "redkit: verification failed: {} missing, {} unreachable",
            report.missing.len(),
            report.unreachable.len()
        );
    }
}
