//! The seed-style lock every bench compares redkit's with: `SET key <random token> NX PX`,
//! then the compare-and-delete script. One definition for benches `lock` and `lean`.

use redis::aio::MultiplexedConnection;

/// The compare-and-delete script a user writes from the articles.
pub const SEED_UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// The seed lock's cycle on `key`: `SET key <random token> NX PX ttl_ms`, then the
/// compare-and-delete script `unlock` (built from [`SEED_UNLOCK`]).
pub async fn seed_lock_cycle(
    unlock: &redis::Script,
    conn: &mut MultiplexedConnection,
    key: &str,
    ttl_ms: u64,
) {
    let token = format!("{:032x}", rand::random::<u128>());
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await
        .unwrap();
    assert!(set.is_some());
    let deleted: i64 = unlock
        .key(key)
        .arg(&token)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
}
