//! Writing to stdout and stderr. A closed pipe ends the command quietly (exit 141); `-q`
//! prints nothing on stdout, even with `--json`.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::exit::{Failure, EXIT_STATE_CHANGED};

/// What goes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Lines for people.
    Text,
    /// One JSON document.
    Json,
    /// Nothing (`-q`, which wins over `--json`).
    Quiet,
}

impl Mode {
    pub(crate) fn new(json: bool, quiet: bool) -> Self {
        match (json, quiet) {
            (_, true) => Self::Quiet,
            (true, false) => Self::Json,
            (false, false) => Self::Text,
        }
    }
}

fn write_line(mut stream: impl Write, name: &str, text: &str) -> Result<(), Failure> {
    // One write per line: stderr is unbuffered.
    stream
        .write_all(format!("{text}\n").as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| Failure::write(name, &e))
}

/// One line of data on stdout (the caller decides by [`Mode`] whether to print).
pub(crate) fn out(text: &str) -> Result<(), Failure> {
    write_line(io::stdout().lock(), "stdout", text)
}

/// One diagnostic line on stderr, after `redkit: `.
pub(crate) fn diag(text: &str) -> Result<(), Failure> {
    write_line(io::stderr().lock(), "stderr", &format!("redkit: {text}"))
}

/// The JSON document of a command: `command` (`null` when the command line could not be
/// parsed), `ok`, `exit_code`, `error` (`null` or `{kind, message}`) and the command's fields.
pub(crate) fn document(command: Option<&str>, error: Option<&Failure>, fields: Value) -> Value {
    let mut doc = json!({
        "command": command,
        "ok": error.is_none(),
        "exit_code": error.map_or(0, |f| f.code),
        "error": error.map(|f| json!({"kind": f.kind, "message": f.message})),
    });
    if let (Some(doc), Value::Object(fields)) = (doc.as_object_mut(), fields) {
        doc.extend(fields);
    }
    doc
}

/// Prints a JSON document on stdout.
pub(crate) fn print_json(value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::io(format!("cannot encode JSON: {e}")))?;
    out(&text)
}

/// Prints a data command's outcome: its JSON document, or its lines; with `unchanged` (why
/// nothing was done: the state changed), exit 8 with that reason on stderr, else 0.
pub(crate) fn finish(
    command: &str,
    mode: Mode,
    fields: Value,
    lines: &[String],
    unchanged: Option<&str>,
) -> Result<u8, Failure> {
    finish_streamed(command, mode, fields, lines, unchanged, None)
}

/// [`finish`], with `stream`: the field whose array is printed as NDJSON (one compact JSON
/// object per line, nothing else on stdout) unless `-q`.
pub(crate) fn finish_streamed(
    command: &str,
    mode: Mode,
    fields: Value,
    lines: &[String],
    unchanged: Option<&str>,
    stream: Option<&str>,
) -> Result<u8, Failure> {
    if let (Some(key), false) = (stream, mode == Mode::Quiet) {
        for row in fields[key].as_array().into_iter().flatten() {
            out(&row.to_string())?;
        }
        return Ok(0);
    }
    let failure = unchanged.map(|why| {
        Failure::new(
            EXIT_STATE_CHANGED,
            "state_changed",
            format!("nothing done: {why}"),
        )
    });
    match mode {
        Mode::Json => print_json(&document(Some(command), failure.as_ref(), fields))?,
        Mode::Text => {
            for line in lines {
                out(line)?;
            }
        }
        Mode::Quiet => {}
    }
    if let Some(f) = &failure {
        diag(&f.message)?;
    }
    Ok(failure.map_or(0, |f| f.code))
}
