//! The wire format of `inventory_apply`: one string reply, also stored as the idempotency
//! record (after the request fingerprint). Decoded strictly: a malformed reply is an
//! [`Error::UnexpectedReply`], never a panic.

use crate::error::{Error, Result};
use crate::script::Script;

/// What the script answered, with 0-based line indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// Applied; stock of each line afterwards.
    Applied(Vec<u64>),
    /// A take was refused: (line, available) for each short line.
    Short(Vec<(usize, u64)>),
    /// The original reply (`Applied` or `Short`) of an earlier identical request.
    Duplicate(Box<Reply>),
    /// The request id was used for a different request.
    Conflict,
    /// The SKU of this line has no stock recorded.
    Unknown(usize),
}

/// Decodes a reply for a request of `lines` lines.
pub(super) fn decode(script: &Script, raw: &str, lines: usize) -> Result<Reply> {
    let bad = |what: &str| Error::unexpected(script.id(), format!("{what} in reply {raw:?}"));
    let (tag, rest) = raw.split_once(' ').unwrap_or((raw, ""));
    match tag {
        "dup" => match decode(script, rest, lines)? {
            r @ (Reply::Applied(_) | Reply::Short(_)) => Ok(Reply::Duplicate(Box::new(r))),
            _ => Err(bad("a duplicate of an outcome that is never recorded")),
        },
        "conflict" if rest.is_empty() => Ok(Reply::Conflict),
        "unknown" => Ok(Reply::Unknown(
            line(rest, lines).ok_or_else(|| bad("a bad line"))?,
        )),
        "ok" => {
            let stocks = numbers(rest).ok_or_else(|| bad("a bad number"))?;
            if stocks.len() != lines {
                return Err(bad("a wrong number of lines"));
            }
            Ok(Reply::Applied(stocks))
        }
        "short" => {
            let values = numbers(rest).ok_or_else(|| bad("a bad number"))?;
            if values.is_empty() || values.len() % 2 != 0 {
                return Err(bad("an odd shortage list"));
            }
            let mut short = Vec::with_capacity(values.len() / 2);
            for pair in values.chunks_exact(2) {
                let index = usize::try_from(pair[0])
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .filter(|&i| i < lines)
                    .ok_or_else(|| bad("a bad line"))?;
                short.push((index, pair[1]));
            }
            Ok(Reply::Short(short))
        }
        _ => Err(bad("an unknown tag")),
    }
}

/// A 1-based line number within `lines`, as a 0-based index.
fn line(s: &str, lines: usize) -> Option<usize> {
    let n: usize = s.parse().ok()?;
    n.checked_sub(1).filter(|&i| i < lines)
}

fn numbers(s: &str) -> Option<Vec<u64>> {
    s.split(' ').map(|t| t.parse().ok()).collect()
}

/// A fingerprint of one request: the same request id may only be reused for the very same
/// operation, keys and quantities. SHA1 over length-prefixed fields, so it is unambiguous.
pub(super) fn fingerprint(mode: &str, keys: &[String], quantities: &[u64]) -> String {
    let mut h = sha1_smol::Sha1::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    field(mode.as_bytes());
    for (key, quantity) in keys.iter().zip(quantities) {
        field(key.as_bytes());
        field(&quantity.to_be_bytes());
    }
    h.digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> Script {
        Script::new_variadic("inventory_apply", 1, "").unwrap()
    }

    #[test]
    fn decodes_every_reply() {
        let s = script();
        assert_eq!(decode(&s, "ok 3 0", 2).unwrap(), Reply::Applied(vec![3, 0]));
        assert_eq!(
            decode(&s, "short 2 1", 2).unwrap(),
            Reply::Short(vec![(1, 1)])
        );
        assert_eq!(
            decode(&s, "dup short 1 0 2 5", 2).unwrap(),
            Reply::Duplicate(Box::new(Reply::Short(vec![(0, 0), (1, 5)])))
        );
        assert_eq!(decode(&s, "conflict", 1).unwrap(), Reply::Conflict);
        assert_eq!(decode(&s, "unknown 1", 1).unwrap(), Reply::Unknown(0));
    }

    #[test]
    fn refuses_malformed_replies() {
        let s = script();
        for raw in [
            "",
            "ok",
            "ok 1",
            "ok -1 2",
            "ok 1 x",
            "short",
            "short 1",
            "short 3 1",
            "short 0 1",
            "unknown 0",
            "unknown 3",
            "dup conflict",
            "dup dup ok 1 1",
            "dup unknown 1",
            "conflict 1",
            "nope",
        ] {
            assert!(
                matches!(decode(&s, raw, 2), Err(Error::UnexpectedReply { .. })),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let k = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = fingerprint("take", &k(&["x", "y"]), &[1, 2]);
        assert_eq!(a, fingerprint("take", &k(&["x", "y"]), &[1, 2]));
        assert_ne!(a, fingerprint("put", &k(&["x", "y"]), &[1, 2]));
        assert_ne!(a, fingerprint("take", &k(&["x", "y"]), &[2, 1]));
        assert_ne!(a, fingerprint("take", &k(&["xy"]), &[1]));
        assert_eq!(a.len(), 40);
    }
}
