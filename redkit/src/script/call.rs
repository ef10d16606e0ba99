//! [`Call`]: one prepared script invocation (keys and arguments), encoded once.

use std::io::Write;

use redis::{Cmd, RedisWrite, ToRedisArgs};

use super::registry::Script;
use crate::error::{Error, Result};

/// One prepared invocation of a [`Script`]: its `KEYS` then its `ARGV`.
///
/// The `EVALSHA` command is encoded as the call is built, so sending it costs no further
/// allocation; the `EVAL` fallback is derived from it only when Redis answers `NOSCRIPT`.
/// All keys must be added before the first argument, and their number must match the
/// script's declared key count (checked before anything is sent). A
/// [variadic](Script::is_variadic) script's call states its key count up front with
/// [`Call::with_key_count`].
///
/// ```
/// use redkit::{Call, Script};
/// let script = Script::new("incr_by", 1, 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])")?;
/// let mut call = Call::new(&script);
/// call.key("counter").arg(5);
/// assert_eq!(call.script().id(), "incr_by.v1");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Call<'s> {
    script: &'s Script,
    cmd: Cmd,
    declared: usize,
    keys: usize,
    args: usize,
    misordered: bool,
}

/// Arguments before the keys: `EVALSHA <sha> <numkeys>`.
pub(crate) const HEADER_ARGS: usize = 3;

impl<'s> Call<'s> {
    /// The most keys one call may pass (2^16). Redis itself only needs `numkeys` to fit the
    /// arguments; this bound keeps a mistaken count from allocating without limit. A call
    /// declaring more is refused by every invoke with [`Error::KeyCount`].
    ///
    /// ```
    /// use redkit::{Call, Script};
    /// let v = Script::new_variadic("v", 1, "return #KEYS")?;
    /// let call = Call::with_key_count(&v, Call::MAX_KEYS + 1); // no panic, no huge allocation
    /// # let _ = call;
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_KEYS: usize = 1 << 16;

    /// Starts a call of `script` with the script's declared key count.
    ///
    /// ```
    /// use redkit::{Call, Registry};
    /// let script = Registry::global().require("fixed_window", 9)?;
    /// let mut call = Call::new(script);
    /// assert!(call.validate().is_err()); // the script declares 1 key: none passed yet
    /// call.key("rk:rl:api:{ip:192.0.2.1}").arg(10).arg(60_000).arg(1);
    /// assert!(call.validate().is_ok());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(script: &'s Script) -> Self {
        Self::with_key_count(script, script.key_count())
    }

    /// Starts a call that will pass exactly `keys` keys: any number from 1 for a
    /// [variadic](Script::is_variadic) script; for a fixed script, only its declared count.
    /// A mismatch, or more than [`MAX_KEYS`](Self::MAX_KEYS), is reported as
    /// [`Error::KeyCount`] before anything is sent (never a panic).
    ///
    /// ```
    /// use redkit::{Call, Script};
    /// let script = Script::new_variadic("mget", 1, "return redis.call('MGET', unpack(KEYS))")?;
    /// let mut call = Call::with_key_count(&script, 3);
    /// call.key("{s}:a").key("{s}:b").key("{s}:c");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_key_count(script: &'s Script, keys: usize) -> Self {
        // Capacity is a hint: bounded, so a huge count cannot overflow or exhaust memory.
        let hint = HEADER_ARGS + keys.min(Self::MAX_KEYS) + 4;
        // Room for the header (up to 51 bytes) and a few keys and arguments without growing.
        let mut cmd = Cmd::with_capacity(hint, 256);
        let evalsha = if script.is_read_only() {
            "EVALSHA_RO"
        } else {
            "EVALSHA"
        };
        cmd.arg(evalsha).arg(script.sha1()).arg(keys);
        Self {
            script,
            cmd,
            declared: keys,
            keys: 0,
            args: 0,
            misordered: false,
        }
    }

    /// Adds one key (`KEYS[i]`). Keys must come before arguments.
    ///
    /// ```
    /// use redkit::{Call, Script};
    /// let script = Script::new("move", 1, 2, "return redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')")?;
    /// let mut call = Call::new(&script);
    /// call.key("{q}:todo").key(b"{q}:done".to_vec()); // &str, String, bytes
    /// assert!(call.validate().is_ok());
    ///
    /// let mut late = Call::new(&script);
    /// late.key("{q}:todo").arg(1).key("{q}:done"); // a key after an argument
    /// assert!(late.validate().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn key<K: AsRef<[u8]>>(&mut self, key: K) -> &mut Self {
        self.cmd.arg(key.as_ref());
        self.count_key()
    }

    /// Adds the key `<base><suffix>` (e.g. a lock key's `:waiting` flag), written straight
    /// into the command: no string is built for it.
    pub(crate) fn key_suffixed(&mut self, base: &str, suffix: &str) -> &mut Self {
        let mut arg = self.cmd.writer_for_next_arg();
        // Writing to the command's own buffer cannot fail.
        let _ = arg.write_all(base.as_bytes());
        let _ = arg.write_all(suffix.as_bytes());
        drop(arg);
        self.count_key()
    }

    /// Counts the key just written (a key after an argument makes the call invalid).
    fn count_key(&mut self) -> &mut Self {
        if self.args > 0 {
            self.misordered = true;
        }
        self.keys += 1;
        self
    }

    /// Adds an argument (`ARGV[i]`); a value that encodes as several arguments adds them all.
    ///
    /// ```
    /// use redkit::{Call, Script};
    /// let script = Script::new("push", 1, 1, "return redis.call('RPUSH', KEYS[1], unpack(ARGV))")?;
    /// let mut call = Call::new(&script);
    /// call.key("jobs").arg("a").arg(&["b", "c"][..]).arg(42); // ARGV = a, b, c, 42
    /// assert!(format!("{call:?}").contains("args: 4"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn arg<A: ToRedisArgs>(&mut self, arg: A) -> &mut Self {
        let before = self.cmd.args_iter().len();
        self.cmd.arg(arg);
        self.args += self.cmd.args_iter().len() - before;
        self
    }

    /// The script this call runs.
    ///
    /// ```
    /// use redkit::{Call, Registry};
    /// let script = Registry::global().require("gcra", 4)?;
    /// let call = Call::new(script);
    /// assert_eq!(call.script().sha1(), script.sha1());
    /// assert_eq!(call.script().id(), "gcra.v4");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn script(&self) -> &'s Script {
        self.script
    }

    /// The first key, used for Cluster routing and grouping.
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        if self.keys == 0 {
            return None;
        }
        match self.cmd.args_iter().nth(HEADER_ARGS) {
            Some(redis::Arg::Simple(k)) => Some(k),
            _ => None,
        }
    }

    /// Checks the call against the script's declaration (key count, at most
    /// [`MAX_KEYS`](Self::MAX_KEYS), keys before arguments), as every invoke does before
    /// sending anything.
    ///
    /// ```
    /// use redkit::{Call, Error, Script};
    /// let s = Script::new("t", 1, 2, "return 1")?;
    /// let mut call = Call::new(&s);
    /// call.key("{a}:1").arg(5);
    /// assert!(matches!(call.validate(), Err(Error::KeyCount { expected: 2, got: 1, .. })));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn validate(&self) -> Result<()> {
        if self.misordered {
            return Err(Error::invalid(
                "call",
                format!(
                    "{}: all keys must be added before the first argument",
                    self.script.id()
                ),
            ));
        }
        let script = self.script;
        let count_error = |expected, got| Error::KeyCount {
            script: script.id().to_owned(),
            expected,
            got,
        };
        if self.declared > Self::MAX_KEYS {
            return Err(count_error(Self::MAX_KEYS, self.declared));
        }
        if script.is_variadic() {
            if self.declared < 1 {
                return Err(count_error(1, self.declared));
            }
        } else if self.declared != script.key_count() {
            return Err(count_error(script.key_count(), self.declared));
        }
        if self.keys != self.declared {
            return Err(count_error(self.declared, self.keys));
        }
        Ok(())
    }

    /// The encoded `EVALSHA` command.
    pub(crate) fn evalsha(&self) -> &Cmd {
        &self.cmd
    }

    /// `EVAL <source> <numkeys> keys.. args..` (`EVAL_RO` for a read-only script) built
    /// from an `EVALSHA` command of `script`.
    pub(crate) fn eval_from(script: &Script, evalsha: &Cmd) -> Cmd {
        let eval = if script.is_read_only() {
            "EVAL_RO"
        } else {
            "EVAL"
        };
        Self::resend_as(evalsha, eval, script.source())
    }

    /// `<command> <target> <numkeys> keys.. args..` with the keys and arguments of an
    /// `EVALSHA` command: `EVAL <source>`, `FCALL <function>`.
    pub(crate) fn resend_as(evalsha: &Cmd, command: &str, target: &str) -> Cmd {
        let mut cmd = Cmd::with_capacity(evalsha.args_iter().len(), target.len() + 64);
        cmd.arg(command).arg(target);
        for arg in evalsha.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

impl std::fmt::Debug for Call<'_> {
    /// Keys and arguments may hold client IPs or secrets: only their counts are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("script", &self.script.id())
            .field("keys", &self.keys)
            .field("args", &self.args)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> Script {
        Script::new("t", 1, 2, "return 1").unwrap()
    }

    #[test]
    fn validates_key_count_and_order() {
        let s = script();
        let mut c = Call::new(&s);
        c.key("a").arg(1);
        assert!(matches!(c.validate(), Err(Error::KeyCount { got: 1, .. })));
        c.key("b");
        assert!(matches!(c.validate(), Err(Error::InvalidInput { .. })));
        let mut ok = Call::new(&s);
        ok.key("a").key("b").arg(1).arg(&["x", "y"][..]);
        assert!(ok.validate().is_ok());
        assert_eq!(ok.args, 3);
        assert_eq!(ok.first_key(), Some(&b"a"[..]));
    }

    #[test]
    fn debug_shows_the_script_and_the_counts_never_the_values() {
        let s = script();
        let mut c = Call::new(&s);
        c.key("rk:{ip:192.0.2.7}").key("b").arg("s3cret-token");
        let shown = format!("{c:?}");
        assert!(shown.contains("Call"), "{shown}");
        assert!(
            shown.contains("keys: 2") && shown.contains("args: 1"),
            "{shown}"
        );
        assert!(shown.contains(s.id()), "{shown}");
        assert!(
            !shown.contains("192.0.2.7") && !shown.contains("s3cret"),
            "{shown}"
        );
    }

    #[test]
    fn variadic_calls_state_their_key_count() {
        let v = Script::new_variadic("v", 1, "return #KEYS").unwrap();
        let mut three = Call::with_key_count(&v, 3);
        three.key("a").key("b").arg(1);
        assert!(matches!(
            three.validate(),
            Err(Error::KeyCount {
                expected: 3,
                got: 2,
                ..
            })
        ));
        let mut ok = Call::with_key_count(&v, 2);
        ok.key("a").key("b").arg(1);
        assert!(ok.validate().is_ok());
        // One key is a variadic script's minimum, and enough.
        let mut one = Call::with_key_count(&v, 1);
        one.key("a");
        assert!(one.validate().is_ok());
        let numkeys = ok.evalsha().args_iter().nth(2);
        assert!(matches!(numkeys, Some(redis::Arg::Simple(b"2"))));
        assert!(matches!(
            Call::with_key_count(&v, 0).validate(),
            Err(Error::KeyCount {
                expected: 1,
                got: 0,
                ..
            })
        ));
        // A fixed script cannot be called with another count.
        let s = script();
        let mut wrong = Call::with_key_count(&s, 1);
        wrong.key("a");
        assert!(matches!(
            wrong.validate(),
            Err(Error::KeyCount {
                expected: 2,
                got: 1,
                ..
            })
        ));
    }

    #[test]
    fn huge_key_counts_are_refused_without_panicking() {
        let v = Script::new_variadic("v", 1, "return #KEYS").unwrap();
        for n in [Call::MAX_KEYS + 1, usize::MAX / 4, 1 << 32, usize::MAX] {
            let mut c = Call::with_key_count(&v, n);
            c.key("a").arg(1);
            assert!(
                matches!(c.validate(), Err(Error::KeyCount { expected, got, .. }) if expected == Call::MAX_KEYS && got == n),
                "{n}"
            );
        }
        let mut max = Call::with_key_count(&v, Call::MAX_KEYS);
        for i in 0..Call::MAX_KEYS {
            max.key(i.to_string());
        }
        assert!(max.validate().is_ok());
    }

    #[test]
    fn eval_fallback_keeps_keys_and_args() {
        let s = script();
        let mut c = Call::new(&s);
        c.key("a").key("b").arg(7);
        let eval = Call::eval_from(&s, c.evalsha());
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => vec![],
            })
            .collect();
        let expected: Vec<&[u8]> = vec![b"EVAL", b"return 1", b"2", b"a", b"b", b"7"];
        assert_eq!(args, expected);
    }
}
