//! [`Semaphore::acquire_blocking`]: waiting for a permit without polling, and
//! [`Semaphore::acquire_fair`]: the same wait in arrival order.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::lease::schema;
use crate::lock::lease::wait::{self, block_on, give_up, Pace};
use crate::lock::options::LockOptions;
use crate::lock::outcome::{Acquire, HeldPermits, Renew};
use crate::lock::semaphore::permit::PermitGuard;
use crate::lock::semaphore::{PermitAttempts, Semaphore};

/// The lease of a fair acquire's place at the gate: a caller that dies there delays the ones
/// behind it by at most this long. Renewed about every third of it while waiting.
const GATE_LEASE: Duration = Duration::from_secs(2);

impl Semaphore {
    /// Acquires a permit, waiting up to the options' [`max_wait`](LockOptions::max_wait)
    /// without polling (none set: one attempt): after an attempt finds every
    /// permit held, the caller blocks on the resource's wake-up list (`BLPOP`) until a release
    /// pushes to it or the earliest lease ends (a crashed holder's permit), then tries again.
    /// Answers [`Acquire::Busy`] when `max_wait` has passed ([`Duration::MAX`](std::time::Duration::MAX):
    /// no deadline). Every attempt uses one owner token ([`LockOptions::token`], else a fresh
    /// random one); the options' `retries` are not used (the wait is paced by releases).
    ///
    /// `BLPOP` holds the connection for the wait: pass a connection of its own (a multiplexed
    /// connection shared with other work would queue that work behind it) whose response
    /// timeout, if any, is above 400 ms (each `BLPOP` asks for at most 250 ms, and Redis may answer up to `1000 / hz` ms later). A notification nobody waited for may wake a
    /// later waiter early (it just tries again); at most `permits` of them are kept, for 60 s.
    ///
    /// Not fair: a caller arriving later may take a freed permit first
    /// ([`acquire_fair`](Self::acquire_fair) serves callers in arrival order).
    ///
    /// Fails like [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # async fn run(sem: redkit::lock::Semaphore, client: redis::Client) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let options = LockOptions::new().max_wait(Duration::from_secs(30));
    /// let outcome = sem.acquire_blocking(&mut own, "gpu", 2, &options).await?;
    /// if let Acquire::Acquired(permit) = outcome {
    ///     sem.release(&mut own, permit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_blocking<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        permits: u32,
        options: &LockOptions<Semaphore>,
    ) -> Result<Acquire<PermitGuard, HeldPermits>> {
        let (mut attempts, pace) = self.blocking(resource, permits, options)?;
        wait::acquire(pace, conn, &mut attempts).await
    }

    /// Acquires a permit **in arrival order**: callers of `acquire_fair` on one resource get
    /// permits in the order they called, like [`FairLock`](crate::lock::FairLock) with `permits`
    /// holders. The caller first queues at the resource's gate, a `FairLock` under
    /// `<prefix>:gate` (waiting without polling, a dead caller skipped after its 2 s place
    /// lease); at the head of the gate it waits for a permit as
    /// [`acquire_blocking`](Self::acquire_blocking) does, renewing its place, then leaves the
    /// gate (waking the next in line). Both waits share the options'
    /// [`max_wait`](LockOptions::max_wait) (none set: one attempt at each); after it the caller leaves the
    /// queue and gets [`Acquire::Busy`] (`holders`: `permits`, `ttl`: `None` when
    /// it was still behind earlier arrivals).
    ///
    /// Cost: without contention three round trips (gate join, permit, gate leave) instead of
    /// one. Fair among `acquire_fair` callers only: an [`acquire`](Self::acquire) or
    /// `acquire_blocking` on the same resource does not queue and can take a freed permit
    /// first. The connection needs what `acquire_blocking` needs (a connection of its own).
    /// Fails like [`acquire_blocking`](Self::acquire_blocking) (bad input refused before
    /// anything is sent).
    ///
    /// ```no_run
    /// # async fn run(sem: redkit::lock::Semaphore, client: redis::Client) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let lease = LockOptions::new()
    ///     .ttl(Duration::from_secs(60))
    ///     .max_wait(Duration::from_secs(300));
    /// // 8 report builds at once, started in the order they were asked for
    /// match sem.acquire_fair(&mut own, "reports", 8, &lease).await? {
    ///     Acquire::Acquired(permit) => { sem.release(&mut own, permit).await?; }
    ///     _ => eprintln!("still queued after 5 minutes: gave up our place"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_fair<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        permits: u32,
        options: &LockOptions<Semaphore>,
    ) -> Result<Acquire<PermitGuard, HeldPermits>> {
        let (mut attempts, pace) = self.blocking(resource, permits, options)?;
        let gate = &self.inner.gate;
        let mut place = LockOptions::new().ttl(GATE_LEASE);
        if let Some(wait) = options.get_max_wait() {
            place = place.max_wait(wait);
        }
        if let Some(token) = options.get_token() {
            place = place.token(token);
        }
        let mut turn = match gate.acquire(conn, resource, &place).await? {
            Acquire::Acquired(turn) => turn,
            _ => return Ok(Acquire::Busy(HeldPermits::by(permits, None))),
        };
        attempts.gate = Some(&mut turn);
        let outcome = wait::acquire(pace, conn, &mut attempts).await;
        if let Err(e) = gate.release(conn, turn).await {
            // The place ends with its lease (2 s); the permit, if any, is the caller's.
            tracing::warn!(resource, error = %e, "leaving the fair semaphore's gate failed");
        }
        outcome
    }

    /// The attempts of a blocking acquire of one of `permits` permits of `resource` (bad
    /// input refused, nothing sent), paced by notifications until the options'
    /// [`max_wait`](LockOptions::max_wait), measured from now, has passed.
    fn blocking<'a>(
        &'a self,
        resource: &str,
        permits: u32,
        options: &'a LockOptions<Semaphore>,
    ) -> Result<(PermitAttempts<'a>, Pace<'a>)> {
        let pace = Pace::Until(give_up(options.get_max_wait()));
        Ok((self.attempts(resource, permits, options)?, pace))
    }
}

impl PermitAttempts<'_> {
    /// After `answer`: when every permit is held, renews the caller's place at the gate (if
    /// any), then blocks on the wake-up list for at most `left`, or until the earliest lease
    /// ends (+1 ms: it must have ended). `false` for any other answer: it ends the acquire.
    pub(in crate::lock) async fn wait_for_release<C: ConnectionLike>(
        &mut self,
        conn: &mut C,
        answer: &Acquire<PermitGuard, HeldPermits>,
        left: Duration,
    ) -> Result<bool> {
        let Acquire::Busy(HeldPermits {
            ttl: Some(retry_after),
            ..
        }) = answer
        else {
            return Ok(false);
        };
        let mut block = retry_after
            .saturating_add(Duration::from_millis(1))
            .min(left)
            .max(Duration::from_millis(1));
        if let Some(turn) = self.gate.as_deref_mut() {
            if self.sem.inner.gate.renew(conn, turn).await? == Renew::Lost {
                tracing::warn!(
                    key = self.key.as_str(),
                    "fair semaphore: place at the gate lost"
                );
            }
            block = block.min(GATE_LEASE / 3);
        }
        block_on(conn, schema::wake(&self.key).as_str(), block).await?;
        Ok(true)
    }
}
