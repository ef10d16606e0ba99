//! What each per-node command produced: one JSON object and one line per node, the nodes that
//! failed, and the verdict when none failed.

use redkit::script::admin::{
    KillOutcome, Node, NodeError, NodeReport, NodeStatus, Pruned, Role, Verification,
};
use serde_json::{json, Value};

use crate::exit::{kind_name, Failure, EXIT_REDIS_ERROR};

/// What one command produced: JSON rows, human lines, and per-node errors.
pub(crate) struct Outcome {
    pub(crate) json: Value,
    pub(crate) lines: Vec<String>,
    pub(crate) errors: Vec<(String, NodeError)>,
    /// The command's failure when no node failed (e.g. `verify` found missing scripts).
    pub(crate) verdict: Option<Failure>,
}

/// How many names a line shows before it counts the rest.
const SHOWN: usize = 3;

/// `a, b, c` or, for a long list, `a, b, c and 30 more (--json lists all)`.
fn short_list(names: &[&str]) -> String {
    match names.split_at_checked(SHOWN) {
        Some((shown, rest)) if !rest.is_empty() => format!(
            "{} and {} more (--json lists all)",
            shown.join(", "),
            rest.len()
        ),
        _ => names.join(", "),
    }
}

/// One line and one JSON object per node report, from what `describe` makes of its value.
pub(crate) fn simple_outcome<T>(
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
        verdict: None,
    }
}

/// The JSON object of one node: `addr`, `role`, `ok`, `error` and the command's fields.
pub(crate) fn node_json(node: &Node, error: Option<&NodeError>, fields: Value) -> Value {
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

/// The native commands a node offers in place of scripts, `None` when none.
fn native_list(native: &redkit::script::Capabilities) -> Option<String> {
    let names: Vec<&str> = [(native.delifeq, "DELIFEQ"), (native.set_ifeq, "SET IFEQ")]
        .into_iter()
        .filter_map(|(offered, name)| offered.then_some(name))
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

pub(crate) fn status_outcome(statuses: &[NodeStatus]) -> Outcome {
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
            json!({"version": s.version, "scripts": s.scripts, "retired": s.retired, "native": s.native}),
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
                    line.push_str(&format!(
                        "  missing {}: {}",
                        missing.len(),
                        short_list(&missing)
                    ));
                }
                if !s.retired.is_empty() {
                    line.push_str(&format!(
                        "  holds {} retired redkit scripts (`redkit scripts prune` removes them)",
                        s.retired.len()
                    ));
                }
                if let Some(native) = s.native.as_ref().and_then(native_list) {
                    line.push_str(&format!("  native: {native}"));
                }
                lines.push(line);
            }
        }
    }
    Outcome {
        json: Value::Array(rows),
        lines,
        errors,
        verdict: None,
    }
}

pub(crate) fn load_outcome(reports: &[NodeReport<usize>]) -> Outcome {
    simple_outcome(reports, |n| {
        let n = n.copied().unwrap_or(0);
        (format!("loaded {n}"), json!({"loaded": n}))
    })
}

pub(crate) fn verify_outcome(report: &Verification, scripts: usize) -> Outcome {
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
    Outcome {
        json: report
            .primaries
            .iter()
            .map(|p| node_json(&p.node, p.error.as_ref(), json!({"missing": p.missing})))
            .collect(),
        lines,
        errors,
        verdict: if missing > 0 {
            Some(Failure::verify_failed(format!(
                "verification failed: {missing} scripts missing"
            )))
        } else if report.primaries.is_empty() {
            Some(Failure::verify_failed(
                "verification failed: no primary found",
            ))
        } else {
            None
        },
    }
}

pub(crate) fn flush_outcome(reports: &[NodeReport<()>]) -> Outcome {
    simple_outcome(reports, |_| ("flushed".to_owned(), json!({})))
}

pub(crate) fn prune_outcome(reports: &[NodeReport<Pruned>]) -> Outcome {
    simple_outcome(reports, |pruned| match pruned {
        Some(p) => {
            let text = if p.flushed {
                format!(
                    "flushed ({} retired dropped), loaded {}",
                    p.retired.len(),
                    p.loaded
                )
            } else {
                "no retired script: left alone".to_owned()
            };
            let fields = json!({"retired": p.retired, "flushed": p.flushed, "loaded": p.loaded});
            (text, fields)
        }
        None => (String::new(), json!({})),
    })
}

pub(crate) fn kill_outcome(reports: &[NodeReport<KillOutcome>]) -> Outcome {
    let mut outcome = simple_outcome(reports, |outcome| {
        let text = match outcome {
            Some(KillOutcome::Killed) => "killed".to_owned(),
            Some(KillOutcome::NotBusy) => "not busy (no script running)".to_owned(),
            Some(KillOutcome::Unkillable) => {
                "UNKILLABLE: the script has written; not escalating to SHUTDOWN".to_owned()
            }
            other => format!("{other:?}"),
        };
        (text, json!({"outcome": outcome}))
    });
    if reports
        .iter()
        .any(|r| r.value == Some(KillOutcome::Unkillable))
    {
        outcome.verdict = Some(Failure::new(
            EXIT_REDIS_ERROR,
            "unkillable",
            "a script is UNKILLABLE (it has written); not escalating to SHUTDOWN",
        ));
    }
    outcome
}

pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Primary => "primary",
        Role::Replica => "replica",
        _ => "other",
    }
}
