//! The replies of `inventory_apply`: an array (`{'ok', s1, ..}`, `{'short', i, a, ..}`,
//! `{'dup', text}`, `{'conflict'}`, `{'unknown', i}`), or (v6) the bare integer `s1` for an
//! applied take of one line, where the text of a duplicate is the
//! original reply as stored in the idempotency record (`ok s1 ..` / `short i a ..`).
//! Decoded strictly: a malformed reply is an [`Error::UnexpectedReply`], never a panic.

use redis::Value;

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
pub(super) fn decode(script: &Script, value: Value, lines: usize) -> Result<Reply> {
    let bad = |what: &str| Error::unexpected(script.id(), format!("{what} in reply {value:?}"));
    if let Value::Int(stock) = value {
        // v6: an applied one-line take answers the stock afterwards, without a tag.
        return match u64::try_from(stock) {
            Ok(stock) if lines == 1 => Ok(Reply::Applied(vec![stock])),
            _ => Err(bad("a bare integer")),
        };
    }
    let (tag, rest) = tagged(&value).ok_or_else(|| bad("no tag"))?;
    if tag == "dup" {
        let original = match rest {
            [original] => text(original),
            _ => None,
        }
        .ok_or_else(|| bad("a bad original"))?;
        let (tag, numbers) = original
            .split_once(' ')
            .ok_or_else(|| bad("a bad original"))?;
        let numbers: Option<Vec<u64>> = numbers.split(' ').map(|t| t.parse().ok()).collect();
        return match numbers.and_then(|n| outcome(tag, n, lines)) {
            Some(r @ (Reply::Applied(_) | Reply::Short(_))) => Ok(Reply::Duplicate(Box::new(r))),
            _ => Err(bad("a bad original")),
        };
    }
    numbers(rest)
        .and_then(|n| outcome(tag, n, lines))
        .ok_or_else(|| bad("a malformed outcome"))
}

/// The tag (a bulk or status string) of an array reply and the items after it; `None` for
/// any other shape.
pub(super) fn tagged(value: &Value) -> Option<(&str, &[Value])> {
    let Value::Array(items) = value else {
        return None;
    };
    let (tag, rest) = items.split_first()?;
    Some((text(tag)?, rest))
}

/// Items that are all non-negative integers, as numbers; `None` when one is not.
pub(super) fn numbers(items: &[Value]) -> Option<Vec<u64>> {
    items
        .iter()
        .map(|v| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        })
        .collect()
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// One outcome from its tag and numbers; `None` when they do not fit a request of `lines`.
fn outcome(tag: &str, numbers: Vec<u64>, lines: usize) -> Option<Reply> {
    let line = |n: u64| {
        usize::try_from(n)
            .ok()?
            .checked_sub(1)
            .filter(|&i| i < lines)
    };
    match tag {
        "ok" if numbers.len() == lines => Some(Reply::Applied(numbers)),
        "short" if !numbers.is_empty() && numbers.len().is_multiple_of(2) => numbers
            .chunks_exact(2)
            .map(|pair| Some((line(pair[0])?, pair[1])))
            .collect::<Option<Vec<_>>>()
            .map(Reply::Short),
        "unknown" => match numbers.as_slice() {
            [i] => line(*i).map(Reply::Unknown),
            _ => None,
        },
        "conflict" if numbers.is_empty() => Some(Reply::Conflict),
        _ => None,
    }
}

/// The replies of the members of an `inventory_group` call, replayed from its answer
/// (`{'group', stock, f1, ..}` or `{'unknown', f1, ..}`, `fk` the text found under the k-th
/// request record or 0) exactly as the script settled them: in order, on the running stock; a
/// member whose record was found, or written for a member before it, takes nothing.
pub(super) fn settle_group(
    script: &Script,
    value: Value,
    members: &[super::group::Member],
) -> Result<Vec<Reply>> {
    let bad = |what: &str| Error::unexpected(script.id(), format!("{what} in reply {value:?}"));
    let (mut stock, found) = match tagged(&value) {
        Some(("unknown", rest)) => (None, rest),
        Some(("group", [Value::Int(s), rest @ ..])) => (
            Some(u64::try_from(*s).map_err(|_| bad("a bad stock"))?),
            rest,
        ),
        _ => return Err(bad("a bad tag")),
    };
    if found.len() != members.iter().filter(|m| m.record.is_some()).count() {
        return Err(bad("not one record per request id"));
    }
    let mut found = found.iter();
    let mut written: Vec<(&str, &str, Reply)> = Vec::new();
    let mut replies = Vec::with_capacity(members.len());
    for member in members {
        if let Some((key, fingerprint)) = &member.record {
            let earlier = written.iter().find(|(k, _, _)| k == key);
            let reply = match (earlier, found.next()) {
                (Some((_, f, first)), _) if f == fingerprint => {
                    Some(Reply::Duplicate(Box::new(first.clone())))
                }
                (Some(_), _) => Some(Reply::Conflict),
                (None, Some(Value::Int(0))) => None,
                (None, Some(record)) => {
                    let record = text(record).ok_or_else(|| bad("a bad record"))?;
                    let original = record
                        .strip_prefix(fingerprint.as_str())
                        .and_then(|r| r.strip_prefix(' '));
                    Some(match original {
                        Some(original) => {
                            let dup = Value::Array(vec![
                                Value::BulkString(b"dup".to_vec()),
                                Value::BulkString(original.as_bytes().to_vec()),
                            ]);
                            decode(script, dup, 1)?
                        }
                        _ => Reply::Conflict,
                    })
                }
                (None, None) => return Err(bad("a missing record")),
            };
            if let Some(reply) = reply {
                replies.push(reply);
                continue;
            }
        }
        let reply = match stock.as_mut() {
            None => Reply::Unknown(0),
            Some(s) if *s < member.quantity => Reply::Short(vec![(0, *s)]),
            Some(s) => {
                *s -= member.quantity;
                Reply::Applied(vec![*s])
            }
        };
        if let (Some((key, fingerprint)), Some(_)) = (&member.record, stock) {
            written.push((key, fingerprint, reply.clone()));
        }
        replies.push(reply);
    }
    Ok(replies)
}

/// A fingerprint of one request: the same request id may only be reused for the very same
/// operation, keys and quantities. SHA1 over length-prefixed fields, so it is unambiguous.
pub(super) fn fingerprint(mode: &str, keys: &[&str], quantities: &[u64]) -> String {
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
    // Lowercase hex, as earlier versions wrote it (their records still match), without the
    // formatting machinery: this runs on every call with a request id.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(40);
    for b in h.digest().bytes() {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::super::group::{Member, Take};
    use super::*;

    fn script() -> Script {
        Script::new_variadic("inventory_apply", 1, "").unwrap()
    }

    /// A group member taking `quantity`, with the record key and fingerprint when given.
    fn take(quantity: u64, record: Option<(&str, &str)>) -> Member {
        let record = record.map(|(key, fp)| (key.to_owned(), fp.to_owned()));
        Member::new(Take { quantity, record })
    }

    fn reply(tag: &str, rest: &[Value]) -> Value {
        let mut items = vec![Value::BulkString(tag.as_bytes().to_vec())];
        items.extend_from_slice(rest);
        Value::Array(items)
    }

    fn ints(tag: &str, numbers: &[i64]) -> Value {
        reply(
            tag,
            &numbers.iter().map(|&n| Value::Int(n)).collect::<Vec<_>>(),
        )
    }

    fn dup(original: &str) -> Value {
        reply("dup", &[Value::BulkString(original.as_bytes().to_vec())])
    }

    #[test]
    fn decodes_every_reply() {
        let s = script();
        assert_eq!(
            decode(&s, ints("ok", &[3, 0]), 2).unwrap(),
            Reply::Applied(vec![3, 0])
        );
        assert_eq!(
            decode(&s, ints("short", &[2, 1]), 2).unwrap(),
            Reply::Short(vec![(1, 1)])
        );
        assert_eq!(
            decode(&s, dup("short 1 0 2 5"), 2).unwrap(),
            Reply::Duplicate(Box::new(Reply::Short(vec![(0, 0), (1, 5)])))
        );
        assert_eq!(
            decode(&s, dup("ok 7"), 1).unwrap(),
            Reply::Duplicate(Box::new(Reply::Applied(vec![7])))
        );
        assert_eq!(
            decode(&s, ints("conflict", &[]), 1).unwrap(),
            Reply::Conflict
        );
        assert_eq!(
            decode(&s, ints("unknown", &[1]), 1).unwrap(),
            Reply::Unknown(0)
        );
        assert_eq!(
            decode(&s, Value::Int(41), 1).unwrap(),
            Reply::Applied(vec![41])
        );
    }

    #[test]
    fn refuses_malformed_replies() {
        let s = script();
        let mut malformed = vec![
            Value::Nil,
            Value::Int(1),
            Value::Int(-1),
            Value::Array(vec![]),
            reply("ok", &[Value::Int(1), Value::Nil]),
            reply("ok", &[Value::Int(1), Value::BulkString(b"2".to_vec())]),
            reply("dup", &[]),
            reply("dup", &[Value::Int(1)]),
        ];
        for (tag, numbers) in [
            ("ok", &[][..]),
            ("ok", &[1]),
            ("ok", &[-1, 2]),
            ("short", &[]),
            ("short", &[1]),
            ("short", &[3, 1]),
            ("short", &[0, 1]),
            ("unknown", &[0]),
            ("unknown", &[3]),
            ("unknown", &[1, 1]),
            ("conflict", &[1]),
            ("nope", &[1, 1]),
        ] {
            malformed.push(ints(tag, numbers));
        }
        for original in [
            "",
            "ok",
            "ok 1",
            "conflict",
            "dup ok 1 1",
            "unknown 1",
            "ok 1 x",
        ] {
            malformed.push(dup(original));
        }
        assert!(decode(&s, Value::Int(-1), 1).is_err());
        for value in malformed {
            assert!(
                matches!(
                    decode(&s, value.clone(), 2),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{value:?}"
            );
        }
    }

    #[test]
    fn settles_a_group_as_the_script_did_and_refuses_malformed_answers() {
        let s = script();
        let members = [
            take(3, Some(("r1", "f1"))),
            take(2, None),
            take(3, Some(("r1", "f1"))),
            take(9, Some(("r2", "f2"))),
            take(1, Some(("r3", "f3"))),
        ];
        let answer = |found: Vec<Value>| {
            let mut items = vec![Value::BulkString(b"group".to_vec()), Value::Int(6)];
            items.extend(found);
            Value::Array(items)
        };
        let fresh = answer(vec![
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert_eq!(
            settle_group(&s, fresh, &members).unwrap(),
            [
                Reply::Applied(vec![3]),
                Reply::Applied(vec![1]),
                Reply::Duplicate(Box::new(Reply::Applied(vec![3]))),
                Reply::Short(vec![(0, 1)]),
                Reply::Applied(vec![0]),
            ]
        );
        let seen = answer(vec![
            Value::BulkString(b"f1 ok 7".to_vec()),
            Value::BulkString(b"f1 ok 7".to_vec()),
            Value::BulkString(b"other ok 1".to_vec()),
            Value::Int(0),
        ]);
        assert_eq!(
            settle_group(&s, seen, &members).unwrap(),
            [
                Reply::Duplicate(Box::new(Reply::Applied(vec![7]))),
                Reply::Applied(vec![4]),
                Reply::Duplicate(Box::new(Reply::Applied(vec![7]))),
                Reply::Conflict,
                Reply::Applied(vec![3]),
            ]
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            answer(vec![Value::Int(0)]),
            answer(vec![
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
                Value::Nil,
            ]),
            answer(vec![
                Value::BulkString(b"f1 nope".to_vec()),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
            ]),
            Value::Array(vec![Value::BulkString(b"group".to_vec()), Value::Int(-1)]),
        ] {
            assert!(
                matches!(
                    settle_group(&s, bad.clone(), &members),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_status_reply_tag_decodes_like_a_bulk_one() {
        let s = script();
        let status = Value::Array(vec![Value::SimpleString("ok".to_owned()), Value::Int(3)]);
        assert_eq!(decode(&s, status, 1).unwrap(), Reply::Applied(vec![3]));
    }

    #[test]
    fn settles_an_unknown_sku_a_reused_id_and_refuses_other_tags() {
        let s = script();
        let members = [
            take(1, Some(("r1", "f1"))),
            take(1, None),
            take(1, Some(("r1", "other"))),
        ];
        // No stock recorded: every member not answered by its record is Unknown; nothing is
        // written for them, so a later member with the same id is not a duplicate.
        let unknown = Value::Array(vec![
            Value::BulkString(b"unknown".to_vec()),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert_eq!(
            settle_group(&s, unknown, &members).unwrap(),
            [Reply::Unknown(0), Reply::Unknown(0), Reply::Unknown(0)]
        );
        // The same request id with another fingerprint, within one group: a conflict.
        let group = Value::Array(vec![
            Value::BulkString(b"group".to_vec()),
            Value::Int(5),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert_eq!(
            settle_group(&s, group, &members).unwrap(),
            [
                Reply::Applied(vec![4]),
                Reply::Applied(vec![3]),
                Reply::Conflict
            ]
        );
        let other_tag = Value::Array(vec![
            Value::BulkString(b"ok".to_vec()),
            Value::Int(5),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert!(matches!(
            settle_group(&s, other_tag, &members),
            Err(Error::UnexpectedReply { .. })
        ));
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let a = fingerprint("take", &["x", "y"], &[1, 2]);
        assert_eq!(a, fingerprint("take", &["x", "y"], &[1, 2]));
        assert_ne!(a, fingerprint("put", &["x", "y"], &[1, 2]));
        assert_ne!(a, fingerprint("take", &["x", "y"], &[2, 1]));
        assert_ne!(a, fingerprint("take", &["xy"], &[1]));
        assert_eq!(a.len(), 40);
    }

    #[test]
    fn fingerprints_are_the_digest_as_earlier_versions_wrote_it() {
        let mut h = sha1_smol::Sha1::new();
        for bytes in [&b"take"[..], b"inv:{s}:sku:x", &7u64.to_be_bytes()] {
            h.update(&(bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        let digest = fingerprint("take", &["inv:{s}:sku:x"], &[7]);
        assert_eq!(digest, h.digest().to_string());
        // Pinned: records written by earlier versions must keep matching.
        assert_eq!(digest, "346d84de7f0f0d2d83c9c921b0448f33364da99a");
    }
}
