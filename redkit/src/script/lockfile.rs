//! `scripts.lock`: the pins that make "a shipped script never changes" a checked rule
//! (feature `lockfile`).
//!
//! Each shipped script version is pinned by name, version, key count and SHA1. [`check`] says
//! whether a script set and its lock agree (for your tests and deploy gates); [`bless`] only
//! **appends** pins for new versions and refuses to rewrite an existing one: a changed body
//! must ship as `<name>.v<N+1>.lua`. The command that writes the lock is
//! `redkit scripts lock --scripts-dir <dir>` (or [`bless`] from your own tooling).
//!
//! A version no caller uses any more can leave the folder: its pin stays, marked
//! `retired = true` (by [`bless`], once the file is gone). A retired version is never embedded
//! again ([`LockProblem::RetiredEmbedded`]); its SHA1 stays known, so `redkit scripts status`
//! can count the retired scripts a server still caches and `redkit scripts prune` can drop them.
//!
//! ```
//! use redkit::script::lockfile;
//! let registry = redkit::Registry::from_files([("hello.v1.lua", "--! keys: 0\nreturn 'hi'")]);
//! let text = lockfile::bless(&registry, None).expect("nothing pinned yet");
//! let pinned = redkit::Registry::from_files([
//!     ("hello.v1.lua", "--! keys: 0\nreturn 'hi'"),
//!     ("scripts.lock", text.as_str()),
//! ]);
//! assert!(lockfile::check(&pinned).is_empty());
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::registry::{Registry, Script};

/// One pinned script version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    name: String,
    version: u32,
    keys: usize,
    /// `true` for a `--! keys: variadic` script (then `keys` is the minimum, 1).
    #[serde(default, skip_serializing_if = "is_false")]
    variadic: bool,
    sha1: String,
    /// `true` once the version is no longer embedded (its file left the folder).
    #[serde(default, skip_serializing_if = "is_false")]
    retired: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Entry {
    fn of(s: &Script) -> Self {
        Self {
            name: s.name().to_owned(),
            version: s.version(),
            keys: s.key_count(),
            variadic: s.is_variadic(),
            sha1: s.sha1().to_owned(),
            retired: false,
        }
    }

    fn id(&self) -> String {
        format!("{}.v{}", self.name, self.version)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Lock {
    #[serde(default)]
    script: Vec<Entry>,
}

const HEADER: &str =
    "# Written by `redkit scripts lock` (append-only: pins are never rewritten).\n\
                      # A shipped script never changes: a new body is a new version.\n\n";

/// Something that breaks "shipped scripts never change".
///
/// ```
/// use redkit::script::lockfile::{check, LockProblem};
/// let unpinned = redkit::Registry::from_files([("a.v1.lua", "--! keys: 1\nreturn 1")]);
/// assert!(matches!(check(&unpinned)[0], LockProblem::NoLockFile));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockProblem {
    /// The set has no `scripts.lock`.
    NoLockFile,
    /// `scripts.lock` does not parse.
    BadLockFile {
        /// The parser's message.
        detail: String,
    },
    /// A file is not a valid script (name, header).
    BadFile {
        /// The file name.
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// A script version that is not pinned yet (run `redkit scripts lock`).
    NotPinned {
        /// `name.vN`.
        script: String,
    },
    /// A pinned script's body changed: restore it, ship the change as `next`.
    BodyChanged {
        /// `name.vN`.
        script: String,
        /// The pinned SHA1.
        pinned: String,
        /// The SHA1 of the file now.
        now: String,
        /// The file name the change should ship as.
        next: String,
    },
    /// A pinned script's key count or variadic flag changed.
    KeysChanged {
        /// `name.vN`.
        script: String,
    },
    /// A pinned script's file is gone but its pin is not marked `retired = true` (run
    /// `redkit scripts lock` to mark it, once no caller of this build uses it).
    FileMissing {
        /// `name.vN`.
        script: String,
    },
    /// A version pinned `retired = true` is in the folder again: a retired version is never
    /// shipped again (remove the file; a body still needed ships as a new version).
    RetiredEmbedded {
        /// `name.vN`.
        script: String,
    },
}

impl fmt::Display for LockProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLockFile => write!(f, "no scripts.lock: run `redkit scripts lock --scripts-dir <dir>`"),
            Self::BadLockFile { detail } => write!(f, "scripts.lock does not parse: {detail}"),
            Self::BadFile { file, problem } => write!(f, "{file}: {problem}"),
            Self::NotPinned { script } => write!(
                f,
                "{script} is not pinned in scripts.lock: run `redkit scripts lock --scripts-dir <dir>`"
            ),
            Self::BodyChanged { script, pinned, now, next } => write!(
                f,
                "{script} changed after it was pinned (SHA1 {pinned} -> {now}); a shipped script \
                 is immutable: restore it and ship the change as {next}"
            ),
            Self::KeysChanged { script } => {
                write!(f, "{script}: the key count changed after it was pinned")
            }
            Self::FileMissing { script } => write!(
                f,
                "{script} is pinned in scripts.lock but its file is gone: run \
                 `redkit scripts lock --scripts-dir <dir>` to mark it retired"
            ),
            Self::RetiredEmbedded { script } => write!(
                f,
                "{script} is retired in scripts.lock but its file is in the set again: remove it \
                 (a retired version never ships again)"
            ),
        }
    }
}

fn parse(text: &str) -> Result<Lock, LockProblem> {
    toml::from_str(text).map_err(|e| LockProblem::BadLockFile {
        detail: e.message().to_owned(),
    })
}

/// What the pins and the files disagree on.
struct Comparison {
    problems: Vec<LockProblem>,
    /// Versions in the folder with no pin yet.
    new: Vec<Entry>,
    /// `name.vN` of pins whose file is gone and that are not marked retired yet.
    gone: Vec<String>,
}

/// Compares the pins with the files.
fn compare(registry: &Registry, lock: &Lock) -> Comparison {
    let mut problems: Vec<LockProblem> = registry
        .problems()
        .iter()
        .map(|p| LockProblem::BadFile {
            file: p.file.clone(),
            problem: p.problem.clone(),
        })
        .collect();
    let pinned: BTreeMap<(&str, u32), &Entry> = lock
        .script
        .iter()
        .map(|e| ((e.name.as_str(), e.version), e))
        .collect();
    let mut new = Vec::new();
    for script in registry.scripts() {
        let entry = Entry::of(script);
        match pinned.get(&(script.name(), script.version())) {
            None => new.push(entry),
            Some(pin) if pin.retired => {
                problems.push(LockProblem::RetiredEmbedded { script: entry.id() })
            }
            Some(pin) if pin.sha1 != entry.sha1 => problems.push(LockProblem::BodyChanged {
                script: entry.id(),
                pinned: pin.sha1.clone(),
                now: entry.sha1.clone(),
                next: format!(
                    "{}.v{}.lua",
                    entry.name,
                    registry
                        .scripts()
                        .iter()
                        .filter(|s| s.name() == script.name())
                        .map(Script::version)
                        .max()
                        .unwrap_or(script.version())
                        .saturating_add(1)
                ),
            }),
            Some(pin) if (pin.keys, pin.variadic) != (entry.keys, entry.variadic) => {
                problems.push(LockProblem::KeysChanged { script: entry.id() })
            }
            Some(_) => {}
        }
    }
    let gone = lock
        .script
        .iter()
        .filter(|e| !e.retired && registry.require(&e.name, e.version).is_err())
        .map(Entry::id)
        .collect();
    Comparison {
        problems,
        new,
        gone,
    }
}

/// Everything wrong with a script set and its `scripts.lock` (empty when they agree):
/// bad files, unpinned versions, pinned bodies or key counts that changed, pinned files gone
/// without their pin marked `retired = true`, retired versions embedded again.
///
/// Put it in a test of your crate so CI fails before a changed script ships:
///
/// ```ignore
/// #[test]
/// fn shipped_scripts_never_change() {
///     let problems = redkit::script::lockfile::check(redkit::embed_scripts!("$CARGO_MANIFEST_DIR/lua"));
///     assert!(problems.is_empty(), "{}", redkit::script::lockfile::report(&problems));
/// }
/// ```
///
/// ```
/// let problems = redkit::script::lockfile::check(redkit::Registry::global());
/// assert!(problems.is_empty(), "{problems:?}");
/// ```
pub fn check(registry: &Registry) -> Vec<LockProblem> {
    let Some(text) = registry.lock_text() else {
        return vec![LockProblem::NoLockFile];
    };
    let lock = match parse(text) {
        Ok(lock) => lock,
        Err(problem) => return vec![problem],
    };
    let Comparison {
        mut problems,
        new,
        gone,
    } = compare(registry, &lock);
    problems.extend(
        gone.into_iter()
            .map(|script| LockProblem::FileMissing { script }),
    );
    problems.extend(
        new.into_iter()
            .map(|e| LockProblem::NotPinned { script: e.id() }),
    );
    problems
}

/// The problems, one per line, for a test failure or a CLI message.
///
/// ```
/// use redkit::script::lockfile::{report, LockProblem};
/// assert_eq!(report(&[LockProblem::NoLockFile]).lines().count(), 1);
/// ```
pub fn report(problems: &[LockProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The new text of `scripts.lock`: `existing` (the current text, `None` when there is none)
/// with pins **appended** for every script version not pinned yet, and `retired = true`
/// added to the pin of every version whose file is gone (nothing else of a pin changes, and a
/// retired pin is never removed). Refuses (returns the problems) when a pinned body or key
/// count changed, a retired version is back in the set, a file is bad, or the existing lock
/// does not parse: a bless never rewrites history.
///
/// ```
/// use redkit::script::lockfile::{bless, LockProblem};
/// let v1 = redkit::Registry::from_files([("a.v1.lua", "--! keys: 1\nreturn 1")]);
/// let lock = bless(&v1, None).unwrap();
/// let edited = redkit::Registry::from_files([("a.v1.lua", "--! keys: 1\nreturn 2")]);
/// let refused = bless(&edited, Some(&lock)).unwrap_err();
/// assert!(matches!(&refused[0], LockProblem::BodyChanged { next, .. } if next == "a.v2.lua"));
///
/// // a.v1 leaves the folder, a.v2 replaces it: the pin of v1 stays, marked retired.
/// let v2 = redkit::Registry::from_files([("a.v2.lua", "--! keys: 1\nreturn 2")]);
/// let lock = bless(&v2, Some(&lock)).unwrap();
/// assert!(lock.contains("version = 1\nkeys = 1\nsha1 = \"") && lock.contains("retired = true"));
/// assert!(redkit::script::lockfile::check(&redkit::Registry::from_files([
///     ("a.v2.lua", "--! keys: 1\nreturn 2"),
///     ("scripts.lock", lock.as_str()),
/// ])).is_empty());
/// ```
pub fn bless(registry: &Registry, existing: Option<&str>) -> Result<String, Vec<LockProblem>> {
    let lock = match existing {
        Some(text) => parse(text).map_err(|p| vec![p])?,
        None => Lock::default(),
    };
    let Comparison {
        problems,
        new,
        gone,
    } = compare(registry, &lock);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut text = match existing {
        Some(text) if !text.trim().is_empty() => mark_retired(text, &gone),
        _ => HEADER.to_owned(),
    };
    for entry in new {
        let block = toml::to_string(&Lock {
            script: vec![entry],
        })
        .map_err(|e| {
            vec![LockProblem::BadLockFile {
                detail: e.to_string(),
            }]
        })?;
        if !text.ends_with("\n\n") {
            text.push('\n');
        }
        text.push_str(&block);
    }
    Ok(text)
}

/// `text` with a `retired = true` line added at the end of the pin of each of `ids`
/// (`name.vN`); every other byte kept.
fn mark_retired(text: &str, ids: &[String]) -> String {
    if ids.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + ids.len() * 16);
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut String| {
        let field = |key: &str| {
            block.iter().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        let id = match (field("name"), field("version")) {
            (Some(name), Some(version)) => Some(format!("{name}.v{version}")),
            _ => None,
        };
        let retire = id.is_some_and(|id| ids.contains(&id));
        // The pin's last field line: the new line goes right after it.
        let last = block.iter().rposition(|l| l.contains('='));
        for (i, line) in block.iter().enumerate() {
            out.push_str(line);
            if retire && Some(i) == last {
                out.push_str("retired = true\n");
            }
        }
        block.clear();
    };
    // Whole lines only, so a line can be added after the last one.
    let mut whole = text.to_owned();
    if !whole.ends_with('\n') {
        whole.push('\n');
    }
    for line in whole.split_inclusive('\n') {
        if line.trim() == "[[script]]" {
            flush(&mut block, &mut out);
        }
        block.push(line);
    }
    flush(&mut block, &mut out);
    out
}
