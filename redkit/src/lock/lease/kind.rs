//! What every single-server lock kind holds (key prefix and script manager) and how it
//! sends one acquire attempt ([`Base::attempt`]); the kind's identity ([`Kind`]: its base and
//! metric label); the kind's public struct, its default prefix, its constructor and the
//! accessors every kind shares (`DEFAULT_PREFIX`, `new`, `with_prefix`, `with_manager`,
//! `prefix`, `manager`, `key`, `Default`), written once by `lock_kind!`; its lease verbs
//! (`lease_verbs!`) and `try_acquire` (`try_acquire!`).
//!
//! A leaf but for the key schema and the metric label: it imports nothing else from the lock
//! files.

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::FromRedisValue;

use crate::error::Result;
use crate::lock::metrics::LockKind;
use crate::script::{Acked, Call, Replication, ScriptManager};

/// The key prefix and script manager of a lock kind.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    pub(crate) prefix: String,
    pub(crate) manager: ScriptManager,
}

impl Base {
    /// Keys under `prefix`, calls through a manager of its own.
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            manager: ScriptManager::new(),
        }
    }

    /// One acquire attempt: `call`, followed by `WAIT` for `replication` in the same round
    /// trip when given. The reply, when the request was sent (the lease is measured from
    /// then), and what the `WAIT` answered (`None`: not sent).
    pub(crate) async fn attempt<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        replication: Option<Replication>,
    ) -> Result<(T, Instant, Option<Acked<()>>)> {
        let started = Instant::now();
        let (reply, replicas) = self.manager.invoke_waiting(conn, call, replication).await?;
        Ok((reply, started, replicas))
    }
}

/// What every lock kind is, whatever its leases: its [`Base`] and its metric label.
/// Implemented by `lock_kind!`.
pub(crate) trait Kind {
    /// The kind (the `redkit.lock.kind` metric label).
    const KIND: LockKind;

    /// The key prefix and script manager.
    fn base(&self) -> &Base;
}

/// A lock kind `$kind`: the public struct (with the kind's docs) holding `inner: Arc<Inner>`,
/// `Inner` (a `base: Base` and the kind's own `inner` fields, each with its initial value),
/// its [`Kind`] impl (the metric label is the `LockKind` variant named as the struct), and the kind's
/// `DEFAULT_PREFIX` (`prefix = "..."`), `new` and accessors, each documented with an example
/// for that kind. `key = "..."` documents what the base key holds; `rebase = path` names a
/// `fn(&mut Inner, Option<&ScriptManager>)` run after the prefix (`None`) or the manager
/// (`Some`) changed.
macro_rules! lock_kind {
    (
        $(#[$doc:meta])*
        pub struct $kind:ident;
        prefix = $prefix:literal;
        key = $key_doc:literal;
        $(rebase = $rebase:path;)?
        inner {
            $($(#[$field_doc:meta])* $vis:vis $field:ident: $ty:ty = $init:expr,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $kind {
            pub(in crate::lock) inner: ::std::sync::Arc<Inner>,
        }

        /// What the kind shares between its clones: the [`Base`] and its own fields.
        #[derive(Debug, Clone)]
        pub(in crate::lock) struct Inner {
            pub(in crate::lock) base: $crate::lock::lease::kind::Base,
            $($(#[$field_doc])* $vis $field: $ty,)*
        }

        impl $crate::lock::lease::kind::Kind for $kind {
            const KIND: $crate::lock::metrics::LockKind = $crate::lock::metrics::LockKind::$kind;

            fn base(&self) -> &$crate::lock::lease::kind::Base {
                &self.inner.base
            }
        }

        impl $kind {
            /// Prefix of every key unless another is chosen.
            ///
            /// ```
            #[doc = concat!("use redkit::lock::", stringify!($kind), ";")]
            #[doc = concat!("assert_eq!(", stringify!($kind), "::DEFAULT_PREFIX, \"", $prefix, "\");")]
            #[doc = concat!("assert_eq!(", stringify!($kind), "::new().key(\"jobs\")?, \"", $prefix, ":{jobs}\");")]
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub const DEFAULT_PREFIX: &'static str = $prefix;

            #[doc = concat!("A [`", stringify!($kind), "`] with keys under [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) and its own")]
            /// [`ScriptManager`](crate::ScriptManager) (share one with
            /// [`with_manager`](Self::with_manager)).
            ///
            /// ```
            #[doc = concat!("let x = redkit::lock::", stringify!($kind), "::new();")]
            #[doc = concat!("assert_eq!(x.key(\"a{b}\")?, \"", $prefix, ":{a%7Bb%7D}\");")]
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub fn new() -> Self {
                Self {
                    inner: ::std::sync::Arc::new(Inner {
                        base: $crate::lock::lease::kind::Base::new(Self::DEFAULT_PREFIX),
                        $($field: $init,)*
                    }),
                }
            }

            /// Puts the keys under `prefix` (a [`Prefix`](crate::keys::Prefix), checked where
            /// it was made, so this cannot fail).
            ///
            /// ```
            /// use redkit::keys::Prefix;
            #[doc = concat!("use redkit::lock::", stringify!($kind), ";")]
            #[doc = concat!("let x = ", stringify!($kind), "::new().with_prefix(Prefix::new(\"app:x\")?);")]
            /// assert_eq!(x.prefix(), "app:x");
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub fn with_prefix(mut self, prefix: $crate::keys::Prefix) -> Self {
                let inner = ::std::sync::Arc::make_mut(&mut self.inner);
                inner.base.prefix = prefix.into_string();
                $($rebase(inner, None);)?
                self
            }

            /// Runs every call through `manager` (e.g. one shared by the whole application,
            /// for its [`Stats`](crate::Stats)).
            ///
            /// ```
            /// let shared = redkit::ScriptManager::new();
            #[doc = concat!("let x = redkit::lock::", stringify!($kind), "::new().with_manager(shared.clone());")]
            /// # let _ = x.manager();
            /// ```
            pub fn with_manager(mut self, manager: $crate::script::ScriptManager) -> Self {
                let inner = ::std::sync::Arc::make_mut(&mut self.inner);
                $($rebase(inner, Some(&manager));)?
                inner.base.manager = manager;
                self
            }

            /// The key prefix.
            ///
            /// ```
            #[doc = concat!("use redkit::lock::", stringify!($kind), ";")]
            #[doc = concat!("assert_eq!(", stringify!($kind), "::new().prefix(), ", stringify!($kind), "::DEFAULT_PREFIX);")]
            /// ```
            pub fn prefix(&self) -> &str {
                &self.inner.base.prefix
            }

            /// The script manager used for every call.
            ///
            /// ```
            /// use redkit::script::Backend;
            /// let shared = redkit::ScriptManager::new().with_backend(Backend::Functions);
            #[doc = concat!("let x = redkit::lock::", stringify!($kind), "::new().with_manager(shared);")]
            /// assert_eq!(x.manager().backend(), Backend::Functions);
            /// ```
            pub fn manager(&self) -> &$crate::script::ScriptManager {
                &self.inner.base.manager
            }

            #[doc = $key_doc]
            ///
            /// ```
            #[doc = concat!("assert!(redkit::lock::", stringify!($kind), "::new().key(\"\").is_err());")]
            /// ```
            pub fn key(&self, resource: &str) -> $crate::error::Result<String> {
                $crate::lock::lease::schema::base(&self.inner.base.prefix, resource)
            }
        }

        impl Default for $kind {
            #[doc = concat!("[`", stringify!($kind), "::new`].")]
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

pub(in crate::lock) use lock_kind;

/// The lease verbs of a kind (`release`, `renew`, `watch`), inside its `impl` block: one body
/// for every kind, through its [`LeaseKind`](crate::lock::lease::LeaseKind) impl, each verb with the
/// kind's own docs. `$guard` is the kind's guard type.
macro_rules! lease_verbs {
    (
        $guard:ty;
        $(#[$release:meta])* release;
        $(#[$renew:meta])* renew;
        $(#[$watch:meta])* watch;
    ) => {
        $(#[$release])*
        pub async fn release<C: ::redis::aio::ConnectionLike>(
            &self,
            conn: &mut C,
            mut guard: $guard,
        ) -> $crate::error::Result<$crate::lock::Release> {
            guard.watchdog = None;
            $crate::lock::lease::release(
                self,
                conn,
                &guard.held,
                $crate::lock::lease::LeaseGuard::extra(&guard),
            )
            .await
        }

        $(#[$renew])*
        ///
        /// For a hold acquired with
        /// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas), the
        /// renewal is followed by the same `WAIT` in the same round trip, and the validity moves
        /// only when as many replicas acknowledged it in time: otherwise the answer is
        /// [`Renew::NotReplicated`](crate::lock::Renew::NotReplicated) (the TTL was reset on the
        /// primary only) and the validity stays as the last confirmed renewal left it.
        pub async fn renew<C: ::redis::aio::ConnectionLike>(
            &self,
            conn: &mut C,
            guard: &mut $guard,
        ) -> $crate::error::Result<$crate::lock::Renew> {
            $crate::lock::lease::renew(self, conn, &guard.held).await
        }

        $(#[$watch])*
        ///
        /// For a hold acquired with
        /// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas), only
        /// renewals the replicas acknowledged move the validity: when none did before it ran
        /// out, the signal fires with [`LeaseLoss::Expired`](crate::lock::LeaseLoss::Expired).
        pub fn watch<C>(
            &self,
            conn: &C,
            guard: &mut $guard,
        ) -> $crate::error::Result<$crate::lock::LeaseSignal>
        where
            C: ::redis::aio::ConnectionLike + Clone + Send + 'static,
        {
            $crate::lock::lease::watchdog::watch(self, conn, &mut guard.watchdog, &guard.held)
        }
    };
}

pub(in crate::lock) use lease_verbs;

/// A kind's `try_acquire`, inside its `impl` block: one attempt, the kind's `acquire` with
/// no retries and no `max_wait`. `$guard` is the kind's guard type, `$arg: $ty` what its
/// acquire takes between the resource and the options (`=> $held`: its busy answer's type when
/// not [`Held`](crate::lock::Held)); the docs are the kind's own.
macro_rules! try_acquire {
    ($guard:ty $(=> $held:ty)? $(, $arg:ident: $ty:ty)*; $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub async fn try_acquire<C: ::redis::aio::ConnectionLike>(
            &self,
            conn: &mut C,
            resource: &str,
            $($arg: $ty,)*
            options: &$crate::lock::LockOptions<Self>,
        ) -> $crate::error::Result<$crate::lock::Acquire<$guard $(, $held)?>> {
            self.acquire(conn, resource, $($arg,)* &options.once()).await
        }
    };
}

pub(in crate::lock) use try_acquire;
