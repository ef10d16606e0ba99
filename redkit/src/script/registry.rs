//! The embedded scripts: `lua/<name>.v<N>.lua`, hashed once when the registry is first used.

use std::fmt;
use std::sync::LazyLock;

use include_dir::{include_dir, Dir};

use crate::error::{Error, Result};
use crate::telemetry::script_metrics::ScriptMetrics;

static LUA_DIR: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/lua");

static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::build);

/// One Lua script with its identity: name, version, declared key count and SHA1.
///
/// Embedded scripts come from [`Registry::global`]; [`Script::new`] builds one from your own
/// source. The SHA1 is computed once, here, never per call.
///
/// A script whose header says `--! keys: variadic` (or one built with
/// [`Script::new_variadic`]) takes a number of `KEYS` chosen per call, at least one: the call
/// states it with [`Call::with_key_count`](crate::Call::with_key_count). Every key is still
/// passed as `KEYS`, never built inside the script.
///
/// ```
/// let script = redkit::Script::new("echo", 1, 1, "return KEYS[1]").unwrap();
/// assert_eq!(script.sha1(), "4a2267357833227dd98abdedb8cf24b15a986445");
/// assert_eq!(script.id(), "echo.v1");
/// ```
#[derive(Clone)]
pub struct Script {
    name: String,
    version: u32,
    keys: usize,
    variadic: bool,
    read_only: bool,
    sha1: String,
    source: String,
    id: String,
    /// Its metric keys (feature `metrics`), built on its first recording.
    metrics: ScriptMetrics,
}

impl Script {
    /// Builds a script from its source. `keys` is the number of `KEYS` every call passes.
    ///
    /// Fails when the name is empty or not `[a-z0-9_]`, or the version is 0.
    ///
    /// ```
    /// use redkit::Script;
    /// let script = Script::new("incr_by", 1, 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])")?;
    /// assert_eq!((script.key_count(), script.is_variadic()), (1, false));
    /// assert!(Script::new("Incr-By", 1, 1, "return 1").is_err()); // not [a-z0-9_]
    /// assert!(Script::new("incr_by", 0, 1, "return 1").is_err()); // versions start at 1
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, version: u32, keys: usize, source: &str) -> Result<Self> {
        Self::build(name, version, keys, false, source)
    }

    /// Builds a script that takes a number of `KEYS` chosen per call (at least one), as the
    /// header `--! keys: variadic` does for embedded scripts.
    ///
    /// ```
    /// let script = redkit::Script::new_variadic("mget", 1, "return redis.call('MGET', unpack(KEYS))")?;
    /// assert!(script.is_variadic());
    /// assert_eq!(script.key_count(), 1); // the minimum
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new_variadic(name: &str, version: u32, source: &str) -> Result<Self> {
        Self::build(name, version, 1, true, source)
    }

    fn build(name: &str, version: u32, keys: usize, variadic: bool, source: &str) -> Result<Self> {
        if !is_name(name) {
            return Err(Error::invalid(
                "script name",
                "must be non-empty and made of [a-z0-9_]",
            ));
        }
        if version == 0 {
            return Err(Error::invalid("script version", "must be at least 1"));
        }
        let read_only = header_read_only(source)?;
        Ok(Self {
            name: name.to_owned(),
            version,
            keys,
            variadic,
            read_only,
            sha1: sha1_smol::Sha1::from(source.as_bytes())
                .digest()
                .to_string(),
            source: source.to_owned(),
            id: format!("{name}.v{version}"),
            metrics: ScriptMetrics::default(),
        })
    }

    /// The script's name, e.g. `fixed_window`.
    ///
    /// ```
    /// let script = redkit::Registry::global().require("fixed_window", 9)?;
    /// assert_eq!(script.name(), "fixed_window");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The script's version (the `N` of `name.vN.lua`).
    ///
    /// ```
    /// let script = redkit::Script::new("counter", 3, 1, "return redis.call('INCR', KEYS[1])")?;
    /// assert_eq!(script.version(), 3);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn version(&self) -> u32 {
        self.version
    }

    /// `name.vN`, the identifier used in logs, errors and the CLI.
    ///
    /// ```
    /// let script = redkit::Registry::global().require("gcra", 4)?;
    /// assert_eq!(script.id(), format!("{}.v{}", script.name(), script.version()));
    /// assert_eq!(script.id(), "gcra.v4");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its metric keys.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn metrics(&self) -> &ScriptMetrics {
        &self.metrics
    }

    /// How many `KEYS` every call passes; for a [variadic](Self::is_variadic) script, the
    /// minimum (1).
    ///
    /// ```
    /// use redkit::Script;
    /// let transfer = Script::new("transfer", 1, 2, "return redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')")?;
    /// assert_eq!(transfer.key_count(), 2);
    /// assert_eq!(Script::new_variadic("del_all", 1, "return redis.call('DEL', unpack(KEYS))")?.key_count(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn key_count(&self) -> usize {
        self.keys
    }

    /// `true` when each call chooses its number of `KEYS` (header `--! keys: variadic`).
    ///
    /// ```
    /// let set = redkit::Registry::from_files([
    ///     ("del_all.v1.lua", "--! keys: variadic\nreturn redis.call('DEL', unpack(KEYS))"),
    ///     ("get.v1.lua", "--! keys: 1\nreturn redis.call('GET', KEYS[1])"),
    /// ]);
    /// assert!(set.require("del_all", 1)?.is_variadic());
    /// assert!(!set.require("get", 1)?.is_variadic());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_variadic(&self) -> bool {
        self.variadic
    }

    /// `true` when the script declares that it only reads (header line
    /// `--! flags: no-writes`). Its calls go out as `EVALSHA_RO` (`EVAL_RO` on `NOSCRIPT`) or,
    /// with the [Functions backend](crate::script::Backend::Functions), as `FCALL_RO` of a
    /// function registered with the `no-writes` flag: Redis refuses any write it attempts,
    /// and a Cluster connection reading from replicas may send it to a replica.
    ///
    /// ```
    /// let get = redkit::Script::new("get", 1, 1, "--! flags: no-writes\nreturn redis.call('GET', KEYS[1])")?;
    /// assert!(get.is_read_only());
    /// assert!(!redkit::Script::new("incr", 1, 1, "return redis.call('INCR', KEYS[1])")?.is_read_only());
    /// assert!(redkit::Script::new("bad", 1, 1, "--! flags: sometimes\nreturn 1").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Lower-case hex SHA1 of the source, as Redis computes it.
    ///
    /// ```
    /// let script = redkit::Registry::global().require("fixed_window", 9)?;
    /// // The hash Redis answers to SCRIPT LOAD and looks up on EVALSHA.
    /// assert_eq!(script.sha1(), redis::Script::new(script.source()).get_hash());
    /// assert_eq!(script.sha1().len(), 40);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn sha1(&self) -> &str {
        &self.sha1
    }

    /// The Lua source.
    ///
    /// ```
    /// let script = redkit::Registry::global().require("gcra", 4)?;
    /// assert!(script.source().starts_with("--! keys: 1\n"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("id", &self.id)
            .field("keys", &self.keys)
            .field("variadic", &self.variadic)
            .field("read_only", &self.read_only)
            .field("sha1", &self.sha1)
            .finish_non_exhaustive()
    }
}

/// `true` for a non-empty `[a-z0-9_]` name (scripts, sets, libraries).
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A file in `lua/` that could not be turned into a [`Script`].
///
/// ```
/// let registry = redkit::Registry::from_files([
///     ("ok.v1.lua", "--! keys: 1\nreturn 1"),
///     ("no_header.v1.lua", "return 1"),
/// ]);
/// assert_eq!(registry.scripts().len(), 1);
/// let problem = &registry.problems()[0];
/// assert_eq!(problem.file, "no_header.v1.lua");
/// assert!(problem.problem.contains("--! keys:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryProblem {
    /// The file's path inside `lua/`.
    pub file: String,
    /// What is wrong with it.
    pub problem: String,
}

/// A set of versioned scripts, hashed once: redkit's own ([`Registry::global`]), your crate's
/// embedded `lua/` folder ([`embed_scripts!`](crate::embed_scripts)), or a folder read at run
/// time ([`Registry::from_dir`], used by `redkit --scripts-dir`).
///
/// Files are `<name>.v<N>.lua` with a `--! keys: K` (or `--! keys: variadic`) header line; a
/// `scripts.lock` beside them pins every shipped version (see the `lockfile` module, feature
/// `lockfile`).
///
/// ```
/// let registry = redkit::Registry::global();
/// let script = registry.require("gcra", 4)?;
/// assert_eq!(script.key_count(), 1);
/// assert!(registry.problems().is_empty());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Registry {
    scripts: Vec<Script>,
    problems: Vec<RegistryProblem>,
    lock: Option<String>,
    retired: Vec<RetiredScript>,
}

/// A script version the set shipped once and no longer embeds: its pin in `scripts.lock` is
/// marked `retired = true`. Older builds still run it (they embed their own copy and recover
/// through `EVAL`); a server may still hold it cached, which `redkit scripts status` counts and
/// `redkit scripts prune` clears.
///
/// ```
/// let registry = redkit::Registry::from_files([
///     ("a.v2.lua", "--! keys: 1\nreturn 2"),
///     ("scripts.lock", "[[script]]\nname = \"a\"\nversion = 1\nkeys = 1\n\
///                       sha1 = \"e0e1f9fabfc9d4800c877a703b823ac0578ff8db\"\nretired = true\n"),
/// ]);
/// assert_eq!(registry.retired()[0].id, "a.v1");
/// assert!(registry.require("a", 1).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetiredScript {
    /// `name.vN`.
    pub id: String,
    /// The SHA1 it was pinned with (lower-case hex), as servers cache it.
    pub sha1: String,
}

impl Registry {
    /// The process-wide registry of embedded scripts (built on first use).
    ///
    /// ```
    /// use redkit::Registry;
    /// assert!(std::ptr::eq(Registry::global(), Registry::global())); // built once
    /// assert!(Registry::global().problems().is_empty());
    /// assert_eq!(Registry::global().require("gcra", 4)?.key_count(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn global() -> &'static Registry {
        &REGISTRY
    }

    /// A registry of the given files: `(file name, contents)`. Files named `*.lua` become
    /// scripts (or [`problems`](Self::problems)); `scripts.lock` is kept as the set's
    /// [`lock_text`](Self::lock_text); other files are ignored.
    ///
    /// ```
    /// let registry = redkit::Registry::from_files([
    ///     ("greet.v1.lua", "--! keys: 1\nreturn 'hi ' .. KEYS[1]"),
    ///     ("README.md", "ignored"),
    /// ]);
    /// assert_eq!(registry.scripts()[0].id(), "greet.v1");
    /// assert!(registry.problems().is_empty() && registry.lock_text().is_none());
    /// ```
    pub fn from_files<N, C>(files: impl IntoIterator<Item = (N, C)>) -> Self
    where
        N: AsRef<str>,
        C: AsRef<[u8]>,
    {
        let mut scripts = Vec::new();
        let mut problems = Vec::new();
        let mut lock = None;
        for (name, contents) in files {
            let path = name.as_ref();
            if path == LOCK_FILE {
                lock = Some(String::from_utf8_lossy(contents.as_ref()).into_owned());
                continue;
            }
            let Some(stem) = path.strip_suffix(".lua") else {
                continue;
            };
            match parse_file(stem, contents.as_ref()) {
                Ok(script) => scripts.push(script),
                Err(problem) => problems.push(RegistryProblem {
                    file: path.to_owned(),
                    problem,
                }),
            }
        }
        scripts.sort_by(|a, b| (&a.name, a.version).cmp(&(&b.name, b.version)));
        for pair in scripts.windows(2) {
            if pair[0].name == pair[1].name && pair[0].version == pair[1].version {
                problems.push(RegistryProblem {
                    file: format!("{}.lua", pair[1].id),
                    problem: "the same name and version twice".to_owned(),
                });
            }
        }
        let retired = lock.as_deref().map(retired_pins).unwrap_or_default();
        Self {
            scripts,
            problems,
            lock,
            retired,
        }
    }

    /// Reads the scripts (and `scripts.lock`) of a folder at run time, not recursively.
    /// Errors only when the folder or a file cannot be read; bad files are
    /// [`problems`](Self::problems).
    ///
    /// ```no_run
    /// let registry = redkit::Registry::from_dir("lua")?;
    /// for p in registry.problems() { eprintln!("{}: {}", p.file, p.problem); }
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let unreadable = |e: std::io::Error| {
            Error::invalid("scripts dir", format!("cannot read {}: {e}", dir.display()))
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            if !entry.file_type().map_err(unreadable)?.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".lua") || name == LOCK_FILE {
                files.push((name, std::fs::read(entry.path()).map_err(unreadable)?));
            }
        }
        Ok(Self::from_files(files))
    }

    /// The text of the set's `scripts.lock`, when the folder has one.
    ///
    /// ```
    /// assert!(redkit::Registry::global().lock_text().is_some());
    /// ```
    pub fn lock_text(&self) -> Option<&str> {
        self.lock.as_deref()
    }

    /// All scripts, sorted by name then version.
    ///
    /// ```
    /// let registry = redkit::Registry::from_files([
    ///     ("b.v1.lua", "--! keys: 1\nreturn 'b1'"),
    ///     ("a.v2.lua", "--! keys: 1\nreturn 'a2'"),
    ///     ("a.v1.lua", "--! keys: 1\nreturn 'a1'"),
    /// ]);
    /// let ids: Vec<&str> = registry.scripts().iter().map(|s| s.id()).collect();
    /// assert_eq!(ids, ["a.v1", "a.v2", "b.v1"]);
    /// ```
    pub fn scripts(&self) -> &[Script] {
        &self.scripts
    }

    /// The versions `scripts.lock` pins as retired (shipped once, no longer embedded), in the
    /// lock's order; empty without a lock. A malformed lock yields what could be read of it
    /// (`lockfile::check` reports the rest).
    ///
    /// ```
    /// let registry = redkit::Registry::global();
    /// for retired in registry.retired() {
    ///     assert!(!registry.scripts().iter().any(|s| s.sha1() == retired.sha1));
    /// }
    /// ```
    pub fn retired(&self) -> &[RetiredScript] {
        &self.retired
    }

    /// The script `name` at `version`: the one way to look a script up.
    ///
    /// Errors: [`Error::InvalidInput`] naming the script and saying the set does not hold
    /// it (the set may be redkit's own, your crate's embedded folder or one read at run time,
    /// so the error names no folder).
    ///
    /// ```
    /// let registry = redkit::Registry::global();
    /// assert_eq!(registry.require("fixed_window", 9)?.id(), "fixed_window.v9");
    /// let missing = registry.require("fixed_window", 999).unwrap_err();
    /// assert!(missing.to_string().contains("fixed_window.v999 is not in this registry's scripts"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn require(&self, name: &str, version: u32) -> Result<&Script> {
        self.find(name, version).ok_or_else(|| {
            Error::invalid(
                "script",
                format!("{name}.v{version} is not in this registry's scripts"),
            )
        })
    }

    /// Files in `lua/` that are not valid scripts (bad name, missing `--! keys:` header).
    /// Empty for every released build; a test keeps it so.
    ///
    /// ```
    /// let registry = redkit::Registry::from_files([
    ///     ("counter.lua", "--! keys: 1\nreturn 1"),    // no .v<N>
    ///     ("counter.v1.lua", "return 1"),              // no --! keys: header
    /// ]);
    /// assert!(registry.scripts().is_empty());
    /// let files: Vec<&str> = registry.problems().iter().map(|p| p.file.as_str()).collect();
    /// assert_eq!(files, ["counter.lua", "counter.v1.lua"]);
    /// assert!(redkit::Registry::global().problems().is_empty());
    /// ```
    pub fn problems(&self) -> &[RegistryProblem] {
        &self.problems
    }

    fn find(&self, name: &str, version: u32) -> Option<&Script> {
        self.scripts
            .iter()
            .find(|s| s.version == version && s.name == name)
    }

    fn build() -> Self {
        Self::from_files(
            LUA_DIR
                .files()
                .map(|f| (f.path().to_string_lossy(), f.contents())),
        )
    }
}

/// The name of a script set's lock file, beside its `.lua` files.
///
/// ```
/// use redkit::{script::LOCK_FILE, Registry};
/// assert_eq!(LOCK_FILE, "scripts.lock");
/// let registry = Registry::from_files([
///     ("a.v1.lua", "--! keys: 1\nreturn 1"),
///     (LOCK_FILE, "# the pins\n"),
/// ]);
/// assert_eq!(registry.lock_text(), Some("# the pins\n"));
/// ```
pub const LOCK_FILE: &str = "scripts.lock";

/// Embeds a folder of versioned Lua scripts into your crate and returns its
/// `&'static` [`Registry`], built (and every SHA1 computed) once, on first use.
///
/// The path is resolved at compile time by `include_dir`; start it with `$CARGO_MANIFEST_DIR`.
/// Files follow redkit's own rules (`<name>.v<N>.lua`, a `--! keys:` header) and a
/// `scripts.lock` beside them is embedded too, so a test can check the set
/// (`redkit::script::lockfile::check`, feature `lockfile`).
///
/// ```ignore
/// fn scripts() -> &'static redkit::Registry {
///     redkit::embed_scripts!("$CARGO_MANIFEST_DIR/lua")
/// }
/// let script = scripts().require("my_counter", 1)?;
/// ```
#[macro_export]
macro_rules! embed_scripts {
    ($path:tt) => {{
        static DIR: $crate::__private::include_dir::Dir<'static> = {
            use $crate::__private::include_dir;
            include_dir::include_dir!($path)
        };
        static REGISTRY: ::std::sync::LazyLock<$crate::Registry> =
            ::std::sync::LazyLock::new(|| {
                $crate::Registry::from_files(
                    DIR.files()
                        .map(|f| (f.path().to_string_lossy(), f.contents())),
                )
            });
        &*REGISTRY
    }};
}

/// The pins marked `retired = true` in the text of a `scripts.lock`: `[[script]]` tables of
/// `key = value` lines, as `lockfile` writes them (read here without a TOML parser, so the
/// admin needs no optional feature).
fn retired_pins(text: &str) -> Vec<RetiredScript> {
    let mut out = Vec::new();
    for table in text.split("[[script]]").skip(1) {
        let field = |key: &str| {
            table.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"'))
            })
        };
        if field("retired") != Some("true") {
            continue;
        }
        if let (Some(name), Some(version), Some(sha1)) =
            (field("name"), field("version"), field("sha1"))
        {
            out.push(RetiredScript {
                id: format!("{name}.v{version}"),
                sha1: sha1.to_ascii_lowercase(),
            });
        }
    }
    out
}

/// Parses `name.vN` and the `--! keys: K` header of one file.
fn parse_file(stem: &str, contents: &[u8]) -> std::result::Result<Script, String> {
    let (name, version) = stem
        .rsplit_once(".v")
        .ok_or("file name must be <name>.v<N>.lua")?;
    let version: u32 = version
        .parse()
        .map_err(|_| "version after .v must be a positive integer".to_owned())?;
    let source = std::str::from_utf8(contents).map_err(|_| "not UTF-8".to_owned())?;
    let script = match header_keys(source)
        .ok_or("missing `--! keys: <count>` (or `--! keys: variadic`) header line")?
    {
        HeaderKeys::Fixed(keys) => Script::new(name, version, keys, source),
        HeaderKeys::Variadic => Script::new_variadic(name, version, source),
    };
    script.map_err(|e| e.to_string())
}

/// The value of the `--! keys:` header.
enum HeaderKeys {
    Fixed(usize),
    Variadic,
}

/// Reads the `--! flags:` header line (comma or space separated); `no-writes` (alias
/// `readonly`) is the only flag. No line: a script that may write.
fn header_read_only(source: &str) -> Result<bool> {
    let Some(value) = source
        .lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("--! flags:"))
    else {
        return Ok(false);
    };
    let mut read_only = false;
    for flag in value.split([',', ' ']).filter(|f| !f.is_empty()) {
        match flag {
            "no-writes" | "readonly" => read_only = true,
            other => {
                return Err(Error::invalid(
                    "script flags",
                    format!("unknown flag {other:?} (known: no-writes)"),
                ))
            }
        }
    }
    Ok(read_only)
}

/// Reads `--! keys: K` or `--! keys: variadic` from the header comment block.
fn header_keys(source: &str) -> Option<HeaderKeys> {
    let value = source
        .lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("--! keys:"))?
        .trim();
    if value == "variadic" {
        return Some(HeaderKeys::Variadic);
    }
    value.parse().ok().map(HeaderKeys::Fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_headers() {
        let s = parse_file("fixed_window.v2", b"--! keys: 3\nreturn 1").unwrap();
        assert_eq!(
            (s.name(), s.version(), s.key_count()),
            ("fixed_window", 2, 3)
        );
        assert!(parse_file("noversion", b"--! keys: 1\n").is_err());
        assert!(parse_file("x.v0", b"--! keys: 1\n").is_err());
        assert!(parse_file("x.v1", b"return 1").is_err());
        assert!(parse_file("Bad-Name.v1", b"--! keys: 1\n").is_err());
        assert!(parse_file("x.v1", b"--! keys: many\n").is_err());
        let v = parse_file("multi.v1", b"--! keys: variadic\nreturn 1").unwrap();
        assert!(v.is_variadic());
        assert_eq!(v.key_count(), 1);
        assert!(!s.is_variadic());
    }

    #[test]
    fn sha1_matches_redis_rs() {
        let s = Script::new("t", 1, 0, "return 1").unwrap();
        assert_eq!(s.sha1(), redis::Script::new("return 1").get_hash());
    }
}
