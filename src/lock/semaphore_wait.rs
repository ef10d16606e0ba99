//! [`Semaphore::acquire_blocking`]: waiting for a permit without polling.

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use super::lock_wait::{block_on, wait_deadline};
use super::options::LockOptions;
use super::permit::PermitAcquire;
use super::semaphore::{wake_key_of, Semaphore};
use super::token::owner_token;
use crate::error::Result;

impl Semaphore {
    /// Acquires a permit, waiting up to `wait` without polling: after an attempt finds every
    /// permit held, the caller blocks on the resource's wake-up list (`BLPOP`) until a release
    /// pushes to it or the earliest lease ends (a crashed holder's permit), then tries again.
    /// Answers [`PermitAcquire::Full`] when `wait` has passed. Every attempt uses one owner
    /// token ([`LockOptions::token`], else a fresh random one); the options' own retries and
    /// `max_wait` are not used.
    ///
    /// `BLPOP` holds the connection for the wait: pass a connection of its own (a multiplexed
    /// connection shared with other work would queue that work behind it) whose response
    /// timeout, if any, is above 400 ms (each `BLPOP` asks for at most 250 ms, and Redis may answer up to `1000 / hz` ms later). A notification nobody waited for may wake a
    /// later waiter early (it just tries again); at most `permits` of them are kept, for 60 s.
    ///
    /// Fails like [`acquire`](Self::acquire), and with [`Error::InvalidInput`](crate::Error::InvalidInput) for a `wait`
    /// that is zero or beyond what an [`Instant`] can hold.
    ///
    /// ```no_run
    /// # async fn run(sem: redkit::lock::Semaphore, client: redis::Client) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{LockOptions, PermitAcquire};
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let outcome = sem
    ///     .acquire_blocking(&mut own, "gpu", 2, &LockOptions::new(), Duration::from_secs(30))
    ///     .await?;
    /// if let PermitAcquire::Acquired(permit) = outcome {
    ///     sem.release(&mut own, permit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_blocking<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        permits: u32,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<PermitAcquire> {
        let give_up = wait_deadline(wait)?;
        let mut once = options.clone().retries(0);
        if options.get_token().is_none() {
            once = once.token(owner_token());
        }
        let wake = wake_key_of(&self.key(resource)?);
        loop {
            let outcome = self.acquire(conn, resource, permits, &once).await?;
            let PermitAcquire::Full { retry_after, .. } = &outcome else {
                return Ok(outcome);
            };
            let remaining = give_up.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(outcome);
            }
            // Wake on a release, or when the earliest lease ends (+1 ms: it must have ended).
            let block = retry_after
                .saturating_add(Duration::from_millis(1))
                .min(remaining)
                .max(Duration::from_millis(1));
            block_on(conn, wake.as_str(), block).await?;
        }
    }
}
