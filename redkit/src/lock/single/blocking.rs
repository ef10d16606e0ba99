//! [`Lock::acquire_blocking`]: waiting for a lock without polling.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::wait::{block_on, give_up, Pace};
use crate::lock::lease::{native, schema};
use crate::lock::options::LockOptions;
use crate::lock::outcome::Acquire;
use crate::lock::single::acquire::LockAttempts;
use crate::lock::single::Lock;
use crate::script::{embedded, Call};

/// The shortest pause between the attempts of a lock that does not wake waiters (a zero
/// `retry_delay` and `jitter` would otherwise spin on the server until the wait ends).
const MIN_POLL: Duration = Duration::from_millis(1);

impl Lock {
    /// Acquires, waiting up to the options' [`max_wait`](LockOptions::max_wait) without polling
    /// (the database lock's behaviour; none set: one attempt, as [`acquire`](Self::acquire)): after
    /// an attempt finds the lock held, the caller marks the hold (`lock_mark`: one byte 0xFF
    /// after the holder's token, its TTL kept), then blocks on the resource's wake-up list
    /// (`BLPOP`) until the release of the marked hold pushes to it or its lease ends (a crashed
    /// holder), and tries again. Answers [`Acquire::Busy`] when `max_wait` has
    /// passed ([`Duration::MAX`](std::time::Duration::MAX): no deadline). Every attempt uses
    /// one owner token ([`LockOptions::token`], else a fresh random one) and honours
    /// [`LockOptions::require_replicas`]; the options' `retries` are not used (the wait is
    /// paced by releases, not by a count).
    ///
    /// A lock built with [`wake_on_release(false)`](Lock::wake_on_release) marks nothing and
    /// does not block: it polls at the options' `retry_delay` plus `jitter` (at least 1 ms).
    ///
    /// No wake-up is lost: the mark reads and marks the hold in one script, so either the
    /// marked hold's release pushes a wake-up, or the mark finds the lock free and the caller
    /// tries again at once; a woken waiter always tries again. A caller that waited and then
    /// acquires marks its own hold too, so that callers still blocked behind it are woken by
    /// its release. The list keeps one entry for 60 s; a stale one only makes a waiter try
    /// once more.
    ///
    /// `BLPOP` holds the connection for the wait: pass a connection of its own (a multiplexed
    /// connection shared with other work would queue that work behind it) whose response
    /// timeout, if any, is above 400 ms (each `BLPOP` asks for at most 250 ms, and Redis may answer up to `1000 / hz` ms later; a longer wait
    /// is several in a row).
    ///
    /// Fails like [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, client: redis::Client) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let options = LockOptions::new()
    ///     .ttl(Duration::from_secs(10))
    ///     .max_wait(Duration::from_secs(30));
    /// match lock.acquire_blocking(&mut own, "ledger", &options).await? {
    ///     Acquire::Acquired(guard) => { lock.release(&mut own, guard).await?; }
    ///     other => println!("still held after 30 s: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_blocking<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        options: &LockOptions<Lock>,
    ) -> Result<Acquire<LockGuard<Lock>>> {
        let give_up = give_up(options.get_max_wait());
        LockAttempts::new(self, resource, options)?
            .run(conn, Pace::Until(give_up))
            .await
    }
}

impl LockAttempts<'_> {
    /// After `answer`: when the lock is held elsewhere, marks the hold (`lock_mark`: its
    /// release will push a wake-up) and blocks on the wake-up list for at most `left`, or until
    /// the marked holder's lease ends (+1 ms: it must have ended); when the mark finds the lock
    /// free, attempts again at once. A lock that does not wake waiters
    /// ([`Lock::wake_on_release`]) sleeps the options' pause instead (no longer than that
    /// either). `false` for any other answer (e.g. not replicated): it ends the acquire.
    ///
    /// No wake-up is lost: the mark and its read of the holder are one script, so either the
    /// hold it marked is released after the mark (and that release pushes), or the mark finds
    /// the lock free and the next attempt follows at once.
    pub(in crate::lock) async fn wait_for_release<C: ConnectionLike>(
        &mut self,
        conn: &mut C,
        answer: &Acquire<LockGuard<Lock>>,
        left: Duration,
    ) -> Result<bool> {
        let Acquire::Busy(held) = answer else {
            return Ok(false);
        };
        // Until a lease of `ttl` ends (+1 ms: it must have ended), at most `ceiling` and `left`.
        let until = |ttl: Option<Duration>, ceiling: Duration| {
            ttl.map_or(ceiling, |ttl| ttl.saturating_add(Duration::from_millis(1)))
                .min(ceiling)
                .min(left)
        };
        if !self.lock.wakes_on_release() {
            // No mark, no wake-up: poll at the options' pace.
            tokio::time::sleep(until(held.ttl, poll_pause(self.options))).await;
            return Ok(true);
        }
        self.waited = true;
        let Some(ttl) = hold_left(mark(self.lock, conn, &self.key).await?) else {
            // Free now: attempt again at once.
            return Ok(true);
        };
        block_on(conn, schema::wake(&self.key).as_str(), until(ttl, left)).await?;
        Ok(true)
    }
}

/// Marks the hold of lock key `key` as waited for (`lock_mark`, or its native commands where
/// the server has `SET ... IFEQ`), so that its release pushes a wake-up: the hold's PTTL in ms
/// ([`schema::FREE`]: the lock is free, nothing written; -1: no TTL).
pub(in crate::lock) async fn mark<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    key: &str,
) -> Result<i64> {
    let manager = &lock.inner.base.manager;
    if let Some(marked) = native::mark(manager, conn, key).await {
        return marked;
    }
    let mut call = Call::new(embedded::LOCK_MARK.script());
    call.key(key);
    manager.invoke(conn, &call).await
}

/// What a mark's answer (the hold's `PTTL`) leaves to wait for: `None` when the lock is free
/// ([`schema::FREE`], the `PTTL` of a missing key: attempt again at once), else the hold's
/// time left (`None` inside when it has no TTL: wait as long as the caller allows).
fn hold_left(pttl: i64) -> Option<Option<Duration>> {
    match pttl {
        schema::FREE => None,
        ms => Some(u64::try_from(ms).ok().map(Duration::from_millis)),
    }
}

/// The pause before the next attempt of a lock that does not wake waiters: the options'
/// `retry_delay` plus jitter, at least [`MIN_POLL`].
fn poll_pause(options: &LockOptions<Lock>) -> Duration {
    options.settings().pause().max(MIN_POLL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lock_mark` and the native mark answer the hold's `PTTL`: Redis answers -2 for a missing
    /// key (the lock is free), -1 for a key without a TTL.
    #[test]
    fn a_mark_that_finds_the_lock_free_attempts_again_at_once() {
        assert_eq!(hold_left(-2), None, "free: attempt again at once");
        assert_eq!(
            hold_left(-1),
            Some(None),
            "no TTL: wait as the caller allows"
        );
        assert_eq!(hold_left(0), Some(Some(Duration::ZERO)));
        assert_eq!(hold_left(1_500), Some(Some(Duration::from_millis(1_500))));
    }

    #[test]
    fn a_poll_pauses_the_options_delay_and_never_less_than_a_millisecond() {
        let spin = LockOptions::new()
            .retry_delay(Duration::ZERO)
            .jitter(Duration::ZERO);
        assert_eq!(poll_pause(&spin), MIN_POLL);
        let slow = LockOptions::new()
            .retry_delay(Duration::from_millis(20))
            .jitter(Duration::ZERO);
        assert_eq!(poll_pause(&slow), Duration::from_millis(20));
        let jittered = LockOptions::new()
            .retry_delay(Duration::from_millis(20))
            .jitter(Duration::from_millis(5));
        for _ in 0..100 {
            let pause = poll_pause(&jittered);
            assert!(
                (Duration::from_millis(20)..=Duration::from_millis(25)).contains(&pause),
                "{pause:?}"
            );
        }
    }
}
