//! The Redis Functions backend: a script set shipped as one versioned Functions library.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use redis::Value;

use super::registry::{is_name, Registry, Script};
use super::shared;
use crate::error::{Error, Result};

/// How a [`ScriptManager`](crate::ScriptManager) runs scripts.
///
/// - [`Scripts`](Self::Scripts) (the default): `EVALSHA`, one `EVAL` fallback on `NOSCRIPT`.
///   Works on every Redis; the script cache is emptied by every restart, failover and
///   `SCRIPT FLUSH`.
/// - [`Functions`](Self::Functions) (Redis 7.0+): each script set is one Functions
///   [`Library`], called with `FCALL` / `FCALL_RO`. Libraries are persisted (RDB/AOF) and
///   replicated, so a restarted server or a promoted replica answers the first call without
///   reloading anything. A missing library (`FUNCTION FLUSH`, a new server) is loaded once
///   with `FUNCTION LOAD REPLACE` and the call retried once, counted in
///   [`Stats::function_reloads`](crate::Stats::function_reloads). A server without Functions
///   gives [`Error::Unsupported`].
///
/// ```no_run
/// # use redkit::rate_limit::Rate;
/// # async fn run() -> redkit::Result<()> {
/// use redkit::script::Backend;
/// let manager = redkit::ScriptManager::new().with_backend(Backend::Functions);
/// let limiter = redkit::rate_limit::FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?
///     .with_manager(manager); // same typed API, calls go out as FCALL
/// # let _ = limiter; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// `EVALSHA`, falling back to `EVAL` on `NOSCRIPT`.
    #[default]
    Scripts,
    /// `FCALL` / `FCALL_RO` of versioned Functions libraries (Redis 7.0+).
    Functions,
}

/// One script set as a Redis Functions library: `#!lua name=<set>_<hash>`, one function per
/// script and version.
///
/// The library's name is the set's name followed by the first 8 hex digits of the SHA1 of the
/// library's code, so every change to the set (a new script version) gives a new library
/// that can be loaded beside the previous one (blue/green). Redis function names are global,
/// so each function is named `<library>_<script>_v<N>` (e.g.
/// `redkit_1f2e3d4c_fixed_window_v3`); it wraps the script's body unchanged, with `KEYS` and
/// `ARGV` bound to the function's keys and arguments, except for shared blocks: code marked
/// `--! shared: <name>` ... `--! end shared: <name>` in several scripts is defined once in
/// the library (once per distinct text), as a function the scripts call (see the README,
/// "Redis Functions"). A script with the header `--! flags: no-writes` is registered with the
/// `no-writes` flag and called with `FCALL_RO`.
///
/// ```
/// let set = redkit::Registry::from_files([
///     ("get.v1.lua", "--! keys: 1\n--! flags: no-writes\nreturn redis.call('GET', KEYS[1])"),
///     ("incr.v1.lua", "--! keys: 1\nreturn redis.call('INCR', KEYS[1])"),
/// ]);
/// let library = redkit::script::Library::new("myapp", &set)?;
/// assert!(library.name().starts_with("myapp_") && library.name().len() == "myapp_".len() + 8);
/// let get = set.require("get", 1)?;
/// assert_eq!(library.function_name(get), Some(format!("{}_get_v1", library.name()).as_str()));
/// assert!(library.code().starts_with(&format!("#!lua name={}\n", library.name())));
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Library {
    inner: Arc<LibraryInner>,
}

#[derive(Debug)]
struct LibraryInner {
    name: String,
    code: String,
    count: usize,
    /// Script SHA1 -> (function name, read-only).
    functions: HashMap<String, (String, bool)>,
}

static REDKIT: LazyLock<Library> = LazyLock::new(|| {
    Library::new("redkit", Registry::global()).expect("embedded scripts form a valid library")
});

impl Library {
    /// The library of `scripts`, named after `set` (`[a-z0-9_]`, at most 64 bytes).
    ///
    /// Fails when the name is invalid, the set has no script, a script starts with its own
    /// `#!` line (it cannot be wrapped in a function), or a shared block is malformed.
    ///
    /// ```
    /// use redkit::{script::Library, Registry};
    /// let set = Registry::from_files([("hi.v1.lua", "--! keys: 1\nreturn 'hi ' .. KEYS[1]")]);
    /// let library = Library::new("myapp", &set)?;
    /// assert_eq!(library.functions(), 1);
    /// assert!(Library::new("MyApp", &set).is_err()); // not [a-z0-9_]
    /// assert!(Library::new("myapp", &Registry::from_files([("x.txt", "")])).is_err()); // no script
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(set: &str, scripts: &Registry) -> Result<Self> {
        if set.len() > 64 || !is_name(set) {
            return Err(Error::invalid(
                "library name",
                "must be 1..=64 characters of [a-z0-9_]",
            ));
        }
        if scripts.scripts().is_empty() {
            return Err(Error::invalid("library", "the script set is empty"));
        }
        let mut body = String::new();
        for script in scripts.scripts() {
            if script.source().starts_with("#!") {
                return Err(Error::invalid(
                    "library",
                    format!("{} has its own #! line", script.id()),
                ));
            }
            body.push_str(&script.source().len().to_string());
            body.push(':');
            body.push_str(script.sha1());
            body.push_str(script.id());
        }
        let hash = sha1_smol::Sha1::from(body.as_bytes()).digest().to_string();
        let name = format!("{set}_{}", &hash[..8]);
        let mut code = format!("#!lua name={name}\n");
        // Shared blocks: one function each, defined before the functions that call it.
        let mut marked = Vec::with_capacity(scripts.scripts().len());
        let mut defined: Vec<shared::Block<'_>> = Vec::new();
        for script in scripts.scripts() {
            let blocks = shared::blocks(script.id(), script.source())?;
            for block in &blocks {
                // One function per distinct text (an old version keeps its own copy).
                if !defined
                    .iter()
                    .any(|d| d.name == block.name && d.text == block.text)
                {
                    code.push_str(&shared::definition(block));
                    defined.push(block.clone());
                }
            }
            marked.push(blocks);
        }
        let mut functions = HashMap::with_capacity(scripts.scripts().len());
        for (script, blocks) in scripts.scripts().iter().zip(&marked) {
            let function = format!("{name}_{}_v{}", script.name(), script.version());
            let flags = if script.is_read_only() {
                "{'no-writes'}"
            } else {
                "{}"
            };
            code.push_str(&format!(
                "redis.register_function{{function_name='{function}', flags={flags}, \
                 callback=function(KEYS, ARGV)\n{}\nend}}\n",
                shared::with_calls(script.source(), blocks)
            ));
            functions
                .entry(script.sha1().to_owned())
                .or_insert((function, script.is_read_only()));
        }
        Ok(Self {
            inner: Arc::new(LibraryInner {
                name,
                code,
                count: scripts.scripts().len(),
                functions,
            }),
        })
    }

    /// The library of redkit's own embedded scripts ([`Registry::global`]), named
    /// `redkit_<hash>`.
    ///
    /// ```
    /// assert!(redkit::script::Library::redkit().name().starts_with("redkit_"));
    /// ```
    pub fn redkit() -> &'static Library {
        &REDKIT
    }

    /// `<set>_<hash8>`, the name Redis knows the library by.
    ///
    /// ```
    /// use redkit::{script::Library, Registry};
    /// let v1 = Registry::from_files([("hi.v1.lua", "--! keys: 1\nreturn 1")]);
    /// let v2 = Registry::from_files([
    ///     ("hi.v1.lua", "--! keys: 1\nreturn 1"),
    ///     ("hi.v2.lua", "--! keys: 1\nreturn 2"),
    /// ]);
    /// let (old, new) = (Library::new("myapp", &v1)?, Library::new("myapp", &v2)?);
    /// assert!(old.name().starts_with("myapp_") && new.name().starts_with("myapp_"));
    /// assert_ne!(old.name(), new.name()); // a changed set is a new library, loaded beside the old
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The code sent with `FUNCTION LOAD`.
    ///
    /// ```
    /// use redkit::{script::Library, Registry};
    /// let set = Registry::from_files([("hi.v1.lua", "--! keys: 1\nreturn 'hi'")]);
    /// let library = Library::new("myapp", &set)?;
    /// let function = library.function_name(set.require("hi", 1)?).unwrap();
    /// assert!(library.code().starts_with(&format!("#!lua name={}\n", library.name())));
    /// assert!(library.code().contains(&format!("function_name='{function}'")));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn code(&self) -> &str {
        &self.inner.code
    }

    /// The function that runs `script`, when this library holds a script with the same body.
    ///
    /// ```
    /// use redkit::{script::Library, Registry, Script};
    /// let set = Registry::from_files([("hi.v1.lua", "--! keys: 1\nreturn 'hi'")]);
    /// let library = Library::new("myapp", &set)?;
    /// let hi = set.require("hi", 1)?;
    /// assert_eq!(library.function_name(hi), Some(format!("{}_hi_v1", library.name()).as_str()));
    /// // Not in the library: a ScriptManager runs it with EVALSHA instead.
    /// let other = Script::new("other", 1, 1, "return 0")?;
    /// assert_eq!(library.function_name(&other), None);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn function_name(&self, script: &Script) -> Option<&str> {
        self.function_of(script).map(|(f, _)| f)
    }

    pub(crate) fn function_of(&self, script: &Script) -> Option<(&str, bool)> {
        self.inner
            .functions
            .get(script.sha1())
            .map(|(f, ro)| (f.as_str(), *ro))
    }

    /// How many functions the library registers (one per script and version).
    ///
    /// ```
    /// let all = redkit::Registry::global().scripts().len();
    /// assert_eq!(redkit::script::Library::redkit().functions(), all);
    /// ```
    pub fn functions(&self) -> usize {
        self.inner.count
    }

    /// `FUNCTION LOAD REPLACE <code>`.
    pub(crate) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(self.code());
        cmd
    }
}

/// The (key, value) pairs of a RESP2 flat array or a RESP3 map.
pub(crate) fn fields(value: &Value) -> Box<dyn Iterator<Item = (&str, &Value)> + '_> {
    fn key(k: &Value) -> Option<&str> {
        match k {
            Value::BulkString(b) => std::str::from_utf8(b).ok(),
            Value::SimpleString(s) => Some(s.as_str()),
            _ => None,
        }
    }
    match value {
        Value::Array(items) => Box::new(
            items
                .chunks_exact(2)
                .filter_map(|kv| Some((key(&kv[0])?, &kv[1]))),
        ),
        Value::Map(pairs) => Box::new(pairs.iter().filter_map(|(k, v)| Some((key(k)?, v)))),
        _ => Box::new(std::iter::empty()),
    }
}

/// Whether a `FUNCTION LIST` reply holds `library` with a function named `function`.
pub(crate) fn lists(listing: &Value, library: &str, function: &str) -> bool {
    let text = |v: &Value, want: &str| match v {
        Value::BulkString(b) => b.as_slice() == want.as_bytes(),
        Value::SimpleString(s) => s == want,
        _ => false,
    };
    let (Value::Array(libraries) | Value::Set(libraries)) = listing else {
        return false;
    };
    libraries.iter().any(|lib| {
        let field = |want: &str| fields(lib).find(|(k, _)| *k == want).map(|(_, v)| v);
        field("library_name").is_some_and(|n| text(n, library))
            && matches!(field("functions"), Some(Value::Array(fs) | Value::Set(fs))
            if fs.iter().any(|f| {
                fields(f).any(|(k, v)| k == "name" && text(v, function))
            }))
    })
}
