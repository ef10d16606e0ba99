//! The key schema every limiter shares: `<prefix>:<name>:{<client>}`, and the `reset` of a key.

use redis::aio::ConnectionLike;

use super::deny_cache::DenyCache;
use super::key::LimitKey;
use crate::error::Result;
use crate::keys::{tagged, validate_prefix, Prefix};

/// A limiter's prefix and name, and the base of its keys (`<prefix>:<name>`), built once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    prefix: String,
    name: String,
    base: String,
}

impl KeySpace {
    /// `name` (1..=64 bytes of `[A-Za-z0-9_:.-]`) under `prefix` (a default, already valid).
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_prefix("name", name)?;
        Ok(Self {
            base: format!("{prefix}:{name}"),
            prefix: prefix.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The same name under `prefix`.
    pub(crate) fn with_prefix(&self, prefix: &Prefix) -> Self {
        Self {
            base: format!("{prefix}:{}", self.name),
            prefix: prefix.as_str().to_owned(),
            name: self.name.clone(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `<prefix>:<name>:{<client>}`: the client is the hash tag (one slot per client).
    pub(crate) fn key(&self, key: &LimitKey) -> String {
        tagged(&self.base, key.as_str())
    }
}

/// `DEL key`: whether it existed (the `reset` of every limiter); the key's entry in `cache`,
/// if any, is forgotten too.
pub(crate) async fn delete<C: ConnectionLike>(
    conn: &mut C,
    key: String,
    cache: Option<&DenyCache>,
) -> Result<bool> {
    let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(conn).await?;
    if let Some(cache) = cache {
        cache.forget(&key);
    }
    Ok(deleted > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefix_name_and_tagged_client() {
        let k = LimitKey::text("u").unwrap();
        let s = KeySpace::new("redkit:rl", "api").unwrap();
        assert_eq!((s.prefix(), s.name()), ("redkit:rl", "api"));
        assert_eq!(s.key(&k), "redkit:rl:api:{k:u}");
        let moved = s.with_prefix(&Prefix::new("rk:rl").unwrap());
        assert_eq!(moved.key(&k), "rk:rl:api:{k:u}");
        assert_eq!(moved.name(), "api");
        assert!(KeySpace::new("p", "a{b}").is_err());
        assert!(KeySpace::new("p", "").is_err());
    }
}
