//! Key building shared by every area: all keys of one call share one hash tag (`{...}`), so a
//! Cluster never answers CROSSSLOT; user-supplied parts are escaped (no `{`/`}` injection)
//! and bounded in length.

use crate::error::{Error, Result};

/// Longest user-supplied key part accepted, in bytes (before escaping).
///
/// ```
/// use redkit::{keys::MAX_PART_LEN, rate_limit::LimitKey};
///
/// let inventory = redkit::inventory::Inventory::new("inv")?;
/// let longest = "s".repeat(MAX_PART_LEN);
/// assert!(inventory.store(&longest).is_ok());
/// assert!(inventory.store(&format!("{longest}s")).is_err());
/// // Counted before escaping: each `{` counts 1 byte, though stored as `%7B`.
/// assert!(LimitKey::text(&"{".repeat(MAX_PART_LEN)).is_ok());
/// # Ok::<(), redkit::Error>(())
/// ```
pub const MAX_PART_LEN: usize = 256;

/// Longest prefix accepted, in bytes.
///
/// ```
/// use redkit::{inventory::Inventory, keys::{Prefix, MAX_PREFIX_LEN}};
///
/// let longest = "p".repeat(MAX_PREFIX_LEN);
/// assert!(Inventory::new(&longest).is_ok());
/// assert!(Inventory::new(&format!("{longest}p")).is_err());
/// assert!(Prefix::new(&longest).is_ok());
/// assert!(Prefix::new(&format!("{longest}p")).is_err());
/// ```
pub const MAX_PREFIX_LEN: usize = 64;

/// Checks a namespace prefix chosen by the application (e.g. `"rk"`, `"myapp:rl"`):
/// 1..=64 bytes of `[A-Za-z0-9_:.-]`.
pub(crate) fn validate_prefix(what: &'static str, prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(
            what,
            format!("must be 1 to {MAX_PREFIX_LEN} bytes long"),
        ));
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'))
    {
        return Err(Error::invalid(what, "may only contain [A-Za-z0-9_:.-]"));
    }
    Ok(())
}

/// A validated key prefix: 1..=[`MAX_PREFIX_LEN`] bytes of `[A-Za-z0-9_:.-]`, checked once
/// where it is made, so the setters that take one (`with_prefix` of the rate limiters)
/// cannot fail.
///
/// ```
/// use redkit::keys::Prefix;
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
/// let prefix = Prefix::new("app:rl")?;
/// assert_eq!(prefix.as_str(), "app:rl");
/// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.with_prefix(prefix);
/// assert_eq!(l.redis_key(&LimitKey::text("u")?), "app:rl:api:{k:u}");
/// assert!(Prefix::new("bad prefix").is_err());
/// assert!(Prefix::new("").is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prefix(String);

impl Prefix {
    /// `prefix` if it is 1..=[`MAX_PREFIX_LEN`] bytes of `[A-Za-z0-9_:.-]`, else
    /// [`Error::InvalidInput`].
    ///
    /// ```
    /// assert!(redkit::keys::Prefix::new("rk:rl").is_ok());
    /// assert!(redkit::keys::Prefix::new("a{b}").is_err());
    /// ```
    pub fn new(prefix: &str) -> Result<Self> {
        validate_prefix("prefix", prefix)?;
        Ok(Self(prefix.to_owned()))
    }

    /// The prefix.
    ///
    /// ```
    /// assert_eq!(redkit::keys::Prefix::new("rk:rl")?.as_str(), "rk:rl");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix, owned.
    pub(crate) fn into_string(self) -> String {
        self.0
    }

    /// `self:part`, where `part` passed [`validate_prefix`]: made of the same characters,
    /// at most 129 bytes (a namespace under a prefix, e.g. a policy's own keys).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn join(&self, part: &str) -> Self {
        Self(format!("{}:{part}", self.0))
    }
}

impl std::str::FromStr for Prefix {
    type Err = Error;

    fn from_str(prefix: &str) -> Result<Self> {
        Self::new(prefix)
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Escapes a user-supplied part: `%` -> `%25`, `{` -> `%7B`, `}` -> `%7D`. Injective, so two
/// different parts never map to one key, and the result never contains a brace.
/// Rejects empty parts and parts longer than [`MAX_PART_LEN`] bytes.
pub(crate) fn escape_part(what: &'static str, part: &str) -> Result<String> {
    check_part(what, part)?;
    let mut out = String::with_capacity(escaped_len_hint(part));
    push_escaped(&mut out, part);
    Ok(out)
}

/// `<prefix>:{<tag>}`: the base of every key of one call. `tag` must already be escaped.
pub(crate) fn tagged(prefix: &str, tag: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + tag.len() + 3);
    key.push_str(prefix);
    key.push_str(":{");
    key.push_str(tag);
    key.push('}');
    key
}

/// [`tagged`] of [`escape_part`]`(what, part)`, built in one allocation (the key of every
/// lock, store and versioned-value call).
pub(crate) fn tagged_part(prefix: &str, what: &'static str, part: &str) -> Result<String> {
    check_part(what, part)?;
    let mut key = String::with_capacity(prefix.len() + escaped_len_hint(part) + 3);
    key.push_str(prefix);
    key.push_str(":{");
    push_escaped(&mut key, part);
    key.push('}');
    Ok(key)
}

/// Refuses an empty part or one longer than [`MAX_PART_LEN`] bytes.
fn check_part(what: &'static str, part: &str) -> Result<()> {
    if part.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if part.len() > MAX_PART_LEN {
        return Err(Error::invalid(
            what,
            format!("must be at most {MAX_PART_LEN} bytes long"),
        ));
    }
    Ok(())
}

/// Room for an escaped part: its length, plus a little for a few escapes.
fn escaped_len_hint(part: &str) -> usize {
    part.len() + 8
}

/// Appends `part` escaped: `%` -> `%25`, `{` -> `%7B`, `}` -> `%7D`.
fn push_escaped(out: &mut String, part: &str) {
    if !part.bytes().any(|b| matches!(b, b'%' | b'{' | b'}')) {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// The part [`escape_part`] escaped, as given: `%25` -> `%`, `%7B` -> `{`, `%7D` -> `}`;
/// `None` for text no escape produces (a `%` not starting one of the three).
pub(crate) fn unescape_part(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = match rest.get(i..i + 3)? {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    if rest.contains(['{', '}']) {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescaping_inverts_escaping_and_refuses_what_it_cannot_produce() {
        for part in ["plain", "a{b}", "100%", "%7B", "{}%{", "é{ü}"] {
            let escaped = escape_part("part", part).unwrap();
            assert_eq!(unescape_part(&escaped).as_deref(), Some(part), "{escaped}");
        }
        for bad in ["%", "%7", "%41", "a{b", "b}", "%7b"] {
            assert_eq!(unescape_part(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_prefix_may_be_exactly_the_longest_length() {
        assert!(validate_prefix("prefix", &"p".repeat(MAX_PREFIX_LEN)).is_ok());
        assert!(validate_prefix("prefix", &"p".repeat(MAX_PREFIX_LEN + 1)).is_err());
        assert!(validate_prefix("prefix", "p").is_ok());
        assert!(validate_prefix("prefix", "").is_err());
    }

    #[test]
    fn escapes_braces_injectively() {
        assert_eq!(escape_part("k", "a{b}c%").unwrap(), "a%7Bb%7Dc%25");
        assert_eq!(escape_part("k", "plain").unwrap(), "plain");
        assert_ne!(
            escape_part("k", "%7B").unwrap(),
            escape_part("k", "{").unwrap()
        );
        assert!(escape_part("k", "").is_err());
        assert!(escape_part("k", &"x".repeat(MAX_PART_LEN + 1)).is_err());
    }

    #[test]
    fn tagged_part_is_tagged_of_the_escaped_part() {
        for part in [
            "plain",
            "a{b}c%",
            "%7B",
            "{",
            "x".repeat(MAX_PART_LEN).as_str(),
        ] {
            assert_eq!(
                tagged_part("p:q", "k", part).unwrap(),
                tagged("p:q", &escape_part("k", part).unwrap())
            );
        }
        assert!(tagged_part("p", "k", "").is_err());
        assert!(tagged_part("p", "k", &"x".repeat(MAX_PART_LEN + 1)).is_err());
    }

    #[test]
    fn prefixes_are_restricted() {
        assert!(validate_prefix("p", "rk:rl-1.a_b").is_ok());
        assert!(validate_prefix("p", "a{b}").is_err());
        assert!(validate_prefix("p", "").is_err());
        assert!(validate_prefix("p", "with space").is_err());
    }

    #[test]
    fn tags_share_a_slot() {
        use redis::cluster_routing::Slot;
        let base = tagged("rk:inv", "store-1");
        assert_eq!(base, "rk:inv:{store-1}");
        assert_eq!(
            Slot::for_key(format!("{base}:sku:a")),
            Slot::for_key(format!("{base}:req:x"))
        );
    }

    #[test]
    fn a_prefix_reads_back_parses_and_displays_as_given() {
        let prefix = Prefix::new("app:rl-1").unwrap();
        assert_eq!(prefix.as_str(), "app:rl-1");
        assert_eq!(prefix.to_string(), "app:rl-1");
        assert_eq!("app:rl-1".parse::<Prefix>().unwrap(), prefix);
        assert!("a{b}".parse::<Prefix>().is_err());
    }
}
