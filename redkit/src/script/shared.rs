//! Shared blocks: code several scripts of a set carry, marked `--! shared: <name>` ...
//! `--! end shared: <name>`. Scripts cannot share code (each `EVAL` body stands alone), so
//! under `EVALSHA` every script runs its own copy; in a Functions [`Library`](super::Library)
//! the block is one function, `redkit_shared_<name>_<hash8>` (the hash of the block's text),
//! that returns the block's top-level locals, and each script's copy is replaced by a call to
//! it:
//!
//! ```lua
//! local function redkit_shared_reclaim_1a2b3c4d()
//!   <the block>
//!   return int, hold, write, ...
//! end
//! -- in each function:  local int, hold, write, ... = redkit_shared_reclaim_1a2b3c4d()
//! ```
//!
//! Copies that differ are different functions: shipped script versions never change, so an
//! old version keeps the block as it shipped while the newest versions share the new one
//! (keeping the newest copies identical is a test's job: `tests/manifest.rs` does it for
//! redkit's reclaim block). The block runs at the same point of each call as in the script
//! (its locals are fresh per call, as before), so the function behaves as the script. What
//! would break that is refused when the library is built: a block using `KEYS`/`ARGV` (the
//! function's parameters, not visible to the shared function), a script assigning one of the
//! block's locals after it (the assignment would no longer reach the block's closures), a
//! block without its end marker, or one without top-level locals.

use crate::error::{Error, Result};

/// One marked block of one script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block<'a> {
    /// The name after `--! shared:`.
    pub(crate) name: &'a str,
    /// The lines between the markers, each with its newline.
    pub(crate) text: &'a str,
    /// The top-level locals the block declares, in order.
    pub(crate) exports: Vec<&'a str>,
    /// Byte range of the whole block in the script, markers included.
    pub(crate) range: std::ops::Range<usize>,
}

const START: &str = "--! shared:";
const END: &str = "--! end shared:";

/// The marked blocks of `source`, in order; `script` names it in errors.
pub(crate) fn blocks<'a>(script: &str, source: &'a str) -> Result<Vec<Block<'a>>> {
    let refuse = |why: String| Error::invalid("shared block", format!("{script}: {why}"));
    let mut out: Vec<Block<'a>> = Vec::new();
    let mut open: Option<(&'a str, usize, usize)> = None; // name, block start, text start
    let mut at = 0;
    for line in source.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix(END) {
            let name = name.trim();
            match open.take() {
                Some((open_name, from, text_from)) if open_name == name => {
                    let text = &source[text_from..start];
                    let exports = exports(text);
                    if exports.is_empty() {
                        return Err(refuse(format!("`{name}` declares no top-level local")));
                    }
                    if mentions(text, "KEYS") || mentions(text, "ARGV") {
                        return Err(refuse(format!(
                            "`{name}` uses KEYS or ARGV (pass them as arguments instead)"
                        )));
                    }
                    if out.iter().any(|b| b.name == name) {
                        return Err(refuse(format!("`{name}` is marked twice")));
                    }
                    out.push(Block {
                        name,
                        text,
                        exports,
                        range: from..at,
                    });
                }
                _ => return Err(refuse(format!("`{trimmed}` closes no open block"))),
            }
        } else if let Some(name) = trimmed.strip_prefix(START) {
            let name = name.trim();
            if open.is_some() {
                return Err(refuse("shared blocks do not nest".to_owned()));
            }
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(refuse(format!("`{name}`: a block name is [a-z0-9_]+")));
            }
            open = Some((name, start, at));
        }
    }
    if let Some((name, _, _)) = open {
        return Err(refuse(format!("`{name}` has no `{END} {name}` line")));
    }
    for block in &out {
        let rest = [&source[..block.range.start], &source[block.range.end..]];
        for name in &block.exports {
            if rest.iter().any(|part| assigns(part, name)) {
                return Err(refuse(format!(
                    "assigns `{name}`, a local of shared block `{}`, outside the block",
                    block.name
                )));
            }
        }
    }
    Ok(out)
}

/// The names a block declares at its top level (lines starting with `local`).
fn exports(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for line in text.lines() {
        let Some(decl) = line.strip_prefix("local ") else {
            continue;
        };
        let decl = decl.strip_prefix("function ").unwrap_or(decl);
        let list = decl.split(['=', '(']).next().unwrap_or("");
        for name in list.split(',') {
            let name = name.trim();
            if is_identifier(name) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `true` when `word` occurs in `text` as a whole identifier.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].bytes().next_back();
        let after = text[i + word.len()..].bytes().next();
        let part = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        !part(before) && !part(after)
    })
}

/// `true` when a statement in `code` assigns `name` (`name = ..`, `name, x = ..`), not
/// counting `local` declarations (a new variable) or comparisons (`==`).
fn assigns(code: &str, name: &str) -> bool {
    code.lines().any(|line| {
        let line = line.trim_start();
        if line.starts_with("local ") || line.starts_with("--") {
            return false;
        }
        let Some(eq) = line.find('=') else {
            return false;
        };
        if line[eq..].starts_with("==") || (eq > 0 && matches!(&line[eq - 1..eq], "~" | "<" | ">"))
        {
            return false;
        }
        // The statement before `=`: after the last `then`, `do`, `else` or `;` of the line.
        let mut targets = &line[..eq];
        for sep in [" then ", " do ", " else ", ";"] {
            if let Some(i) = targets.rfind(sep) {
                targets = &targets[i + sep.len()..];
            }
        }
        targets.split(',').any(|target| target.trim() == name)
    })
}

/// `source` with each block replaced by `local <exports> = redkit_shared_<name>()`.
pub(crate) fn with_calls(source: &str, blocks: &[Block<'_>]) -> String {
    let mut out = String::with_capacity(source.len());
    let mut at = 0;
    for block in blocks {
        out.push_str(&source[at..block.range.start]);
        out.push_str(&format!(
            "local {} = {}()\n",
            block.exports.join(", "),
            function_name(block)
        ));
        at = block.range.end;
    }
    out.push_str(&source[at..]);
    out
}

/// The shared function of `block`, as library code.
pub(crate) fn definition(block: &Block<'_>) -> String {
    format!(
        "local function {}()\n{}return {}\nend\n",
        function_name(block),
        block.text,
        block.exports.join(", ")
    )
}

/// `redkit_shared_<name>_<first 8 hex digits of the SHA1 of the block's text>`: copies that
/// differ (an old script version keeps the block as it was shipped) are different functions.
fn function_name(block: &Block<'_>) -> String {
    let hash = sha1_smol::Sha1::from(block.text.as_bytes())
        .digest()
        .to_string();
    format!("redkit_shared_{}_{}", block.name, &hash[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "--! keys: 1\n--! shared: util\nlocal MAX = 9\nlocal function twice(x)\n  local y = x\n  return y * 2\nend\nlocal a, b = 1, 2\n--! end shared: util\nreturn twice(MAX) + a + b\n";

    #[test]
    fn a_block_is_found_with_its_top_level_locals() {
        let found = blocks("s.v1", SCRIPT).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "util");
        assert_eq!(found[0].exports, ["MAX", "twice", "a", "b"]);
        assert!(found[0].text.starts_with("local MAX") && found[0].text.ends_with("1, 2\n"));
        let called = with_calls(SCRIPT, &found);
        let function = function_name(&found[0]);
        assert!(function.starts_with("redkit_shared_util_") && function.len() == 27);
        assert_eq!(
            called,
            format!(
                "--! keys: 1\nlocal MAX, twice, a, b = {function}()\nreturn twice(MAX) + a + b\n"
            )
        );
        let definition = definition(&found[0]);
        assert!(definition.starts_with(&format!("local function {function}()\n")));
        assert!(definition.ends_with("return MAX, twice, a, b\nend\n"));
        // Another text under the same name: another function.
        let other = SCRIPT.replace("local MAX = 9", "local MAX = 8");
        assert_ne!(function_name(&blocks("s.v2", &other).unwrap()[0]), function);
    }

    #[test]
    fn what_would_change_behaviour_is_refused() {
        for bad in [
            "--! shared: u\nlocal x = KEYS[1]\n--! end shared: u\n",
            "--! shared: u\nlocal x = 1\n--! end shared: u\nx = 2\n",
            "--! shared: u\nlocal x = 1\n--! end shared: u\nx, y = 2, 3\n",
            "--! shared: u\nlocal x = 1\n--! end shared: u\nif y then x = 2 end\n",
            "--! shared: u\nlocal x = 1\n",
            "--! end shared: u\n",
            "--! shared: u\n--! shared: v\nlocal x = 1\n--! end shared: v\n--! end shared: u\n",
            "--! shared: u\nreturn 1\n--! end shared: u\n",
            "--! shared: U-1\nlocal x = 1\n--! end shared: U-1\n",
        ] {
            assert!(blocks("s.v1", bad).is_err(), "{bad:?}");
        }
        // Comparisons and new locals of the same name are not assignments.
        let fine = "--! shared: u\nlocal x = 1\n--! end shared: u\nif x == 1 or x ~= 2 or x <= 3 then local x = 4 end\n";
        assert!(blocks("s.v1", fine).is_ok());
    }
}
