//! The renewal call every kind sends: its renewal script on the lease's keys with the owner
//! token and the lease length in ms ([`renewal`]), and for the kinds that keep a fence key
//! beside the lock key, that key too and its TTL for the lease ([`fenced`]). One place for
//! the argument order the scripts read.

use std::time::Duration;

use crate::lock::lease::schema;
use crate::lock::lease::wait::ms;
use crate::script::{Call, Script};

/// `script` on `keys`, with `token` and `ttl` (whole ms: validated at acquire, at most
/// 30 days) as its arguments.
pub(crate) fn renewal<'a>(
    script: &'a Script,
    keys: &[&str],
    token: &str,
    ttl: Duration,
) -> Call<'a> {
    let mut call = Call::new(script);
    for key in keys {
        call.key(key);
    }
    call.arg(token).arg(ms(ttl));
    call
}

/// `script` on `key` and its fence key, with `token`, `ttl` (ms) and the fence key's TTL for
/// that lease as its arguments (a [`Lock`](crate::lock::Lock)'s and a
/// [`ReentrantLock`](crate::lock::ReentrantLock)'s renewal).
pub(crate) fn fenced<'a>(script: &'a Script, key: &str, token: &str, ttl: Duration) -> Call<'a> {
    let ttl_ms = ms(ttl);
    let mut call = renewal(script, &[key, &schema::fence(key)], token, ttl);
    call.arg(schema::fence_ttl_ms(ttl_ms));
    call
}
