//! `scripts.lock`: the pins that make "a shipped script never changes" a checked rule
//! (feature `lockfile`).
//!
//! Each shipped script version is pinned by name, version, key count and SHA1. [`check`] says
//! whether a script set and its lock agree (for your tests and deploy gates); [`bless`] only
//! **appends** pins for new versions and refuses to rewrite an existing one: a changed body
//! must ship as `<name>.v<N+1>.lua`. The command that writes the lock is
//! `redkit scripts lock --scripts-dir <dir>` (or [`bless`] from your own tooling).
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
    /// A pinned script's file is gone (callers still running it would get NOSCRIPT forever).
    FileMissing {
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
            Self::FileMissing { script } => {
                write!(f, "{script} is pinned in scripts.lock but its file is gone")
            }
        }
    }
}

fn parse(text: &str) -> Result<Lock, LockProblem> {
    toml::from_str(text).map_err(|e| LockProblem::BadLockFile {
        detail: e.message().to_owned(),
    })
}

/// Compares the pins with the files; `Ok(new entries)` when only new versions are unpinned.
fn compare(registry: &Registry, lock: &Lock) -> (Vec<LockProblem>, Vec<Entry>) {
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
            Some(pin) if **pin != entry => {
                problems.push(LockProblem::KeysChanged { script: entry.id() })
            }
            Some(_) => {}
        }
    }
    for entry in &lock.script {
        if registry.get(&entry.name, entry.version).is_none() {
            problems.push(LockProblem::FileMissing { script: entry.id() });
        }
    }
    (problems, new)
}

/// Everything wrong with a script set and its `scripts.lock` (empty when they agree):
/// bad files, unpinned versions, pinned bodies or key counts that changed, pinned files gone.
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
    let (mut problems, new) = compare(registry, &lock);
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
/// with pins **appended** for every script version not pinned yet. Refuses (returns the
/// problems) when a pinned body or key count changed, a pinned file is gone, a file is bad, or
/// the existing lock does not parse: a bless never rewrites history.
///
/// ```
/// use redkit::script::lockfile::{bless, LockProblem};
/// let v1 = redkit::Registry::from_files([("a.v1.lua", "--! keys: 1\nreturn 1")]);
/// let lock = bless(&v1, None).unwrap();
/// let edited = redkit::Registry::from_files([("a.v1.lua", "--! keys: 1\nreturn 2")]);
/// let refused = bless(&edited, Some(&lock)).unwrap_err();
/// assert!(matches!(&refused[0], LockProblem::BodyChanged { next, .. } if next == "a.v2.lua"));
/// ```
pub fn bless(registry: &Registry, existing: Option<&str>) -> Result<String, Vec<LockProblem>> {
    let lock = match existing {
        Some(text) => parse(text).map_err(|p| vec![p])?,
        None => Lock::default(),
    };
    let (problems, new) = compare(registry, &lock);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut text = match existing {
        Some(text) if !text.trim().is_empty() => text.to_owned(),
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
