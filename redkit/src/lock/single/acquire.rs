//! Acquiring a [`Lock`]: one script per attempt (free lock, or a retry by the same owner
//! token), bounded waiting, optional replication acknowledgement.

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::lock::lease::grant::settle;
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::kind::try_acquire;
use crate::lock::lease::native;
use crate::lock::lease::schema;
use crate::lock::lease::token::{issued, FencingToken};
use crate::lock::lease::wait::{self, Attempts, Pace, Step};
use crate::lock::metrics::LockKind;
use crate::lock::options::LockOptions;
use crate::lock::outcome::{Acquire, Held, Renew};
use crate::lock::single::blocking::mark;
use crate::lock::single::Lock;
use crate::script::{Acked, Call, Replication};

impl Lock {
    try_acquire! {
        LockGuard<Lock>;
        /// One attempt: when the lock is free, `SET key token NX PX ttl` (with
        /// [`LockOptions::fencing(true)`](LockOptions::fencing), in one script that also issues a
        /// new fencing token); when it already holds this attempt's owner token (set with
        /// [`LockOptions::token`], e.g. a retry after a lost reply), the lease refreshed (and the
        /// same fencing token again). [`Acquire::Busy`] when another owner holds the lock.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
        /// use redkit::lock::{Acquire, LockOptions};
        /// match lock.try_acquire(&mut conn, "cache-warmup", &LockOptions::new()).await? {
        ///     Acquire::Acquired(guard) => { lock.release(&mut conn, guard).await?; }
        ///     _ => println!("someone else is warming the cache"),
        /// }
        /// # Ok(()) }
        /// ```
    }

    /// Acquires, waiting as the options allow: up to [`retries`](LockOptions::retries) more
    /// attempts, each after [`retry_delay`](LockOptions::retry_delay) plus random
    /// [`jitter`](LockOptions::jitter), none started after
    /// [`max_wait`](LockOptions::max_wait). [`Acquire::Busy`] when all attempts found the lock
    /// held. Every attempt uses one owner token: [`LockOptions::token`] when set (then an
    /// acquire repeated after a lost reply answers [`Acquire::Acquired`] with the same fencing
    /// token), else a fresh random one.
    ///
    /// Fencing tokens are `max(last issued + 1, server TIME in µs)`: see [`FencingToken`](crate::lock::FencingToken).
    ///
    /// Fails with [`Error::InvalidInput`] (nothing sent) for an empty or too long resource
    /// name or invalid options, with [`Error::CorruptData`] / [`Error::WrongType`] when the
    /// fence key holds something else than a token, with [`Error::PermissionDenied`] when the
    /// ACL user may not run one of the script's commands (nothing written in these cases),
    /// and with [`Error::Timeout`] in the rare case the acquire took so long that no validity
    /// was left (the key is then released again).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let wait = LockOptions::new()
    ///     .ttl(Duration::from_secs(5))
    ///     .retries(100)
    ///     .max_wait(Duration::from_secs(2));
    /// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "ledger", &wait).await? {
    ///     lock.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        options: &LockOptions<Lock>,
    ) -> Result<Acquire<LockGuard<Lock>>> {
        LockAttempts::new(self, resource, options)?
            .run(conn, Pace::Poll(options.settings()))
            .await
    }
}

/// The attempts of one acquire of a [`Lock`]: a hold refused for too few replicas may be
/// tried again, like a busy lock.
pub(in crate::lock) struct LockAttempts<'a> {
    pub(in crate::lock) lock: &'a Lock,
    pub(in crate::lock) key: String,
    token: String,
    ttl_ms: u64,
    pub(in crate::lock) options: &'a LockOptions<Lock>,
    wait: Option<Replication>,
    /// What the last attempt's `WAIT` answered.
    replicas: Option<Acked<()>>,
    /// Whether this acquire has waited for a release (blocking acquires only): its hold, once
    /// granted, is marked too, so that callers blocked behind it are woken.
    pub(in crate::lock) waited: bool,
}

impl<'a> LockAttempts<'a> {
    /// The attempts of an acquire of `resource`, every one with the same owner token and
    /// followed by `WAIT` when the options require replicas; or the typed error of bad input
    /// (nothing sent).
    pub(in crate::lock) fn new(
        lock: &'a Lock,
        resource: &str,
        options: &'a LockOptions<Lock>,
    ) -> Result<Self> {
        let ttl_ms = options.validate()?;
        Ok(Self {
            lock,
            key: lock.key(resource)?,
            token: options.owner_token(),
            ttl_ms,
            options,
            wait: options.get_replication(),
            replicas: None,
            waited: false,
        })
    }

    /// Checks that the server can `WAIT` (when asked to), then attempts at `pace`.
    pub(in crate::lock) async fn run<C: ConnectionLike>(
        &mut self,
        conn: &mut C,
        pace: Pace<'_>,
    ) -> Result<Acquire<LockGuard<Lock>>> {
        if let Some(r) = &self.wait {
            Box::pin(self.lock.inner.base.manager.check_wait(conn, r)).await?;
        }
        wait::acquire(pace, conn, self).await
    }

    /// One attempt, with or without fencing as the options say.
    async fn send<C: ConnectionLike>(&self, conn: &mut C) -> Result<(Attempt, Option<Acked<()>>)> {
        if !self.options.get_fencing() {
            return self.unfenced(conn).await;
        }
        // Boxed: the default (unfenced) attempt's future stays small.
        Box::pin(self.fenced(conn)).await
    }

    /// An attempt with fencing: `lock_acquire` issues the fencing token in the same script.
    async fn fenced<C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<(Attempt, Option<Acked<()>>)> {
        let (key, ttl_ms, script) = (&self.key, self.ttl_ms, self.lock.inner.acquire);
        let fence_key = schema::fence(key);
        let mut call = Call::new(script);
        call.key(key)
            .key(&fence_key)
            .arg(&self.token)
            .arg(ttl_ms)
            .arg(schema::fence_ttl_ms(ttl_ms));
        let ((acquired, n), started, replicas): ((i64, i64), _, _) =
            self.lock.inner.base.attempt(conn, &call, self.wait).await?;
        let outcome = match acquired {
            0 => Attempt::Busy {
                holder_ttl: u64::try_from(n).ok().map(Duration::from_millis),
            },
            1 => Attempt::Granted {
                fence: Some(issued(script, n)?),
                started,
            },
            other => {
                return Err(Error::unexpected(
                    script.id(),
                    format!("status {other} is neither 0 nor 1"),
                ))
            }
        };
        Ok((outcome, replicas))
    }

    /// An attempt without fencing: `SET key token NX PX ttl GET` (plus `WAIT` in the same
    /// round trip when asked). The holder it reads decides: none, the lock is ours; our own
    /// token, marked by a blocked acquirer or not (a retry after a lost reply), the lease is
    /// refreshed by the compare-and-PEXPIRE renewal; another owner, [`Acquire::Busy`] with
    /// its `PTTL`.
    async fn unfenced<C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<(Attempt, Option<Acked<()>>)> {
        let (key, token, ttl_ms) = (&self.key, &self.token, self.ttl_ms);
        // Sized once for its 7 arguments (`SET`, `NX`, `PX`, `GET`, at most 20 digits): built
        // growing from empty, the command's buffers were reallocated several times per acquire.
        let mut set = redis::Cmd::with_capacity(7, key.len() + token.len() + 32);
        set.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .arg("GET");
        let started = Instant::now();
        let sent = match self.wait {
            None => set
                .query_async::<Option<Vec<u8>>>(conn)
                .await
                .map(|holder| (holder, None)),
            Some(r) => match Box::pin(r.pipeline(set).query_async::<Vec<Value>>(conn)).await {
                Ok(replies) => match r.split_replies(replies) {
                    None => {
                        return Err(Error::unexpected("SET NX PX GET + WAIT", "missing replies"))
                    }
                    Some((Value::ServerError(e), _)) => Err(e.into()),
                    Some((holder, wait)) => Option::<Vec<u8>>::from_redis_value(holder)
                        .map_err(|e| e.into())
                        .map(|holder| (holder, Some(r.acked((), &wait)))),
                },
                Err(e) => Err(e),
            },
        };
        let (holder, replicas) = sent.map_err(unfenced_error)?;
        let outcome = match holder {
            Some(holder) if !is_own(&holder, token) => {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(key)
                    .query_async(conn)
                    .await
                    .map_err(unfenced_error)?;
                Attempt::Busy {
                    holder_ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                }
            }
            Some(_)
                if Box::pin(self.lock.renew_raw(
                    conn,
                    key,
                    token,
                    Duration::from_millis(ttl_ms),
                ))
                .await?
                    == Renew::Lost =>
            {
                // Ours a moment ago, expired since: try again as a fresh attempt.
                return Box::pin(self.unfenced(conn)).await;
            }
            _ => Attempt::Granted {
                fence: None,
                started,
            },
        };
        Ok((outcome, replicas))
    }
}

impl<C: ConnectionLike> Attempts<C> for LockAttempts<'_> {
    type Guard = LockGuard<Lock>;
    type Held = Held;

    const KIND: LockKind = LockKind::Lock;

    async fn wait(
        &mut self,
        conn: &mut C,
        answer: &Acquire<LockGuard<Lock>>,
        left: Duration,
    ) -> Result<bool> {
        self.wait_for_release(conn, answer, left).await
    }

    async fn attempt(&mut self, conn: &mut C) -> Result<Step<LockGuard<Lock>>> {
        let (granted, replicas) = self.send(conn).await?;
        self.replicas = replicas;
        let answer = match granted {
            Attempt::Busy { holder_ttl } => Acquire::Busy(Held::until(holder_ttl)),
            Attempt::Granted { fence, started } => {
                let settings = self.options.settings();
                // Without a replication requirement a hold is the acquire's answer, or (no
                // validity left) its error: no later attempt needs the key and the token, so
                // the guard takes them instead of copies.
                let (key, token) = if self.wait.is_none() {
                    (
                        std::mem::take(&mut self.key),
                        std::mem::take(&mut self.token),
                    )
                } else {
                    (self.key.clone(), self.token.clone())
                };
                let mut guard = LockGuard::held(key, token, fence, self.ttl_ms, settings, started);
                if !self.options.get_fencing() {
                    guard.held = guard.held.into_plain();
                }
                let replicas = self.replicas.as_ref();
                settle(self.lock, conn, guard, started, settings, replicas).await?
            }
        };
        if let (true, Acquire::Acquired(guard)) = (self.waited, &answer) {
            // Callers may still be blocked behind this one: mark the new hold so that its
            // release wakes the next. Best effort: a caller not woken tries again when the
            // lease it waits on would have ended.
            if let Err(e) = Box::pin(mark(self.lock, conn, &guard.held.key)).await {
                tracing::debug!(error = %e, "the hold of a caller that waited is not marked");
            }
        }
        Ok(Step::unless_acquired(answer))
    }
}

/// What one attempt's reply granted, before a guard is built for it.
enum Attempt {
    /// The lock is ours since a request sent at `started`.
    Granted {
        fence: Option<FencingToken>,
        started: Instant,
    },
    /// Another owner holds it.
    Busy { holder_ttl: Option<Duration> },
}

/// Whether a lock key holding `holder` is held with `token`: the token itself, or the token
/// marked by a blocked acquirer (followed by the byte 0xFF, see `lock_mark`).
fn is_own(holder: &[u8], token: &str) -> bool {
    let token = token.as_bytes();
    holder == token || holder.strip_suffix(&[schema::MARK]) == Some(token)
}

/// The typed error for a refusal of the plain commands of an unfenced acquire.
fn unfenced_error(err: redis::RedisError) -> Error {
    native::typed("lock acquire without fencing (SET NX PX GET)", err)
}
