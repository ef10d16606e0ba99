//! The slot layout of a Redis Cluster as `CLUSTER SLOTS` tells it (its ranges, a
//! fingerprint to see it change, one range per primary) and the hash slot of a key.

use redis::Value;

/// Hash slots of a Cluster.
pub(crate) const SLOTS: u16 = 16_384;

/// One range of a `CLUSTER SLOTS` reply: its first and last slot, and its primary's host
/// and port.
pub(crate) type Range = (u16, u16, Vec<u8>, i64);

/// A fingerprint of the layout: every range and its primary, in the reply's order.
pub(crate) fn layout_of(ranges: &[Range]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ranges.hash(&mut hasher);
    hasher.finish()
}

/// The first range of each primary.
pub(crate) fn one_range_per_primary(ranges: &[Range]) -> Vec<(u16, u16)> {
    let mut seen: Vec<(&[u8], i64)> = Vec::new();
    let mut out = Vec::new();
    for (first, last, host, port) in ranges {
        if !seen.iter().any(|(h, p)| *h == host.as_slice() && p == port) {
            seen.push((host, *port));
            out.push((*first, *last));
        }
    }
    out
}

/// The ranges of a `CLUSTER SLOTS` reply (`[first, last, [host, port, ..], replicas..]`
/// each); malformed entries are skipped.
pub(crate) fn slot_ranges(reply: &Value) -> Vec<Range> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    let mut ranges = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(node)) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let Some((host, port)) = node_of(node) else {
            continue;
        };
        let host = host.to_vec();
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            continue;
        };
        if first <= last && last < SLOTS {
            ranges.push((first, last, host, port));
        }
    }
    ranges
}

/// Every node a `CLUSTER SLOTS` reply names, primaries and replicas, as `(host, port)`, sorted
/// and without repeats (an order that stays the same while the layout does); malformed
/// entries are skipped.
pub(crate) fn nodes_of(reply: &Value) -> Vec<(String, u16)> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    let mut nodes = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        for node in fields.iter().skip(2) {
            let Some((host, port)) = node_of(node) else {
                continue;
            };
            // An empty host means "the node this reply came from": not addressable here.
            if let (false, Ok(port)) = (host.is_empty(), u16::try_from(port)) {
                nodes.push((String::from_utf8_lossy(host).into_owned(), port));
            }
        }
    }
    nodes.sort();
    nodes.dedup();
    nodes
}

/// The host and port of one node of a `CLUSTER SLOTS` range (`[host, port, ..]`).
fn node_of(node: &Value) -> Option<(&[u8], i64)> {
    let Value::Array(node) = node else {
        return None;
    };
    let host = match node.first()? {
        Value::BulkString(b) => b.as_slice(),
        Value::SimpleString(s) => s.as_bytes(),
        _ => return None,
    };
    match node.get(1)? {
        Value::Int(port) => Some((host, *port)),
        _ => None,
    }
}

/// The hash slot of a key without a hash tag other than its `{..}`: CRC16 (XMODEM) of the
/// tag, modulo 16384, as Redis computes it.
pub(crate) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| {
            let close = key[open + 1..].find('}')? + open + 1;
            (close > open + 1).then(|| &bytes[open + 1..close])
        })
        .unwrap_or(bytes);
    crc16(tagged) % SLOTS
}

/// CRC16-XMODEM (polynomial 0x1021, initial 0): the checksum of Redis Cluster's key slots.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slots_are_redis_cluster_slots() {
        use redis::cluster_routing::Slot;
        for key in [
            "",
            "a",
            "foo",
            "redkit:probe:{7}",
            "x{}y",
            "{user1000}.following",
            "{a",
        ] {
            assert_eq!(Slot::new(slot_of(key)), Some(Slot::for_key(key)), "{key}");
        }
        // The CRC16 of Redis's cluster spec: "123456789" -> 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn ranges_layouts_and_one_range_per_primary() {
        let node = |port: i64| Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]);
        let range = |a: i64, b: i64, port: i64| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                node(port),
                node(port + 1),
            ])
        };
        let reply = Value::Array(vec![
            range(0, 5460, 7000),
            range(5461, 10922, 7002),
            range(10923, 16000, 7004),
            range(16001, 16383, 7000),
            Value::Array(vec![Value::Int(1), Value::Int(0), node(7006)]),
            Value::Nil,
        ]);
        let ranges = slot_ranges(&reply);
        assert_eq!(ranges.len(), 4);
        assert_eq!(
            one_range_per_primary(&ranges),
            vec![(0, 5460), (5461, 10922), (10923, 16000)]
        );
        assert!(slot_ranges(&Value::Nil).is_empty());
        // Every node named, primaries and replicas, once each, in a stable order.
        let ports: Vec<u16> = nodes_of(&reply).into_iter().map(|(_, p)| p).collect();
        assert_eq!(ports, vec![7000, 7001, 7002, 7003, 7004, 7005, 7006]);
        assert!(nodes_of(&Value::Nil).is_empty());
        // A failover (another port for the same slots) is another layout.
        let moved = Value::Array(vec![
            range(0, 5460, 7001),
            range(5461, 10922, 7002),
            range(10923, 16000, 7004),
            range(16001, 16383, 7000),
        ]);
        assert_ne!(layout_of(&slot_ranges(&moved)), layout_of(&ranges));
        assert_eq!(layout_of(&slot_ranges(&reply)), layout_of(&ranges));
    }
}
