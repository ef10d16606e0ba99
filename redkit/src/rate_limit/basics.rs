//! The setters and accessors every algorithm has as its own, written once.

/// Expands, inside an algorithm's `impl` block, to the methods the algorithms share word for
/// word: `with_prefix`, `prefix`, `rate`, `name`, `with_manager`, `manager`, `check` and
/// `check_n` (and, after `deny_cache`, `with_deny_cache` and `deny_cache`). `$ty` is the
/// type's name as its examples write it. The type holds `keys: KeySpace`, `rate: Rate`,
/// `manager: ScriptManager` (and `deny_cache: Option<DenyCache>`), and has its own
/// `count(conn, key, cost: u32)`: the one place its check differs, reached with a cost that
/// is at least 1 by its type.
macro_rules! limiter_basics {
    ($ty:literal, deny_cache) => {
        $crate::rate_limit::basics::limiter_basics!($ty);

        /// Answers clients known to be limited locally until their refusal's `retry_after`
        /// ends, from `cache` (see [`DenyCache`](crate::rate_limit::DenyCache)).
        ///
        /// ```
        /// use redkit::rate_limit::{DenyCache, Rate};
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?")]
        ///     .with_deny_cache(DenyCache::new(10_000)?);
        /// assert!(l.deny_cache().is_some());
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn with_deny_cache(mut self, cache: $crate::rate_limit::DenyCache) -> Self {
            self.deny_cache = Some(cache);
            self
        }

        /// The deny cache checks are answered from, when one is attached.
        ///
        /// ```
        /// use redkit::rate_limit::Rate;
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?;")]
        /// assert!(l.deny_cache().is_none());
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn deny_cache(&self) -> Option<&$crate::rate_limit::DenyCache> {
            self.deny_cache.as_ref()
        }
    };
    ($ty:literal) => {
        /// Puts the keys under `prefix` (a validated [`Prefix`](crate::keys::Prefix)) instead
        /// of [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX): `<prefix>:<name>:{<client>}`.
        ///
        /// ```
        /// use redkit::keys::Prefix;
        /// use redkit::rate_limit::{LimitKey, Rate};
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?")]
        ///     .with_prefix(Prefix::new("app:rl")?);
        /// assert_eq!(l.prefix(), "app:rl");
        /// assert!(l.redis_key(&LimitKey::text("u")?).starts_with("app:rl:api:{k:u}"));
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn with_prefix(mut self, prefix: $crate::keys::Prefix) -> Self {
            self.keys = self.keys.with_prefix(&prefix);
            self
        }

        /// The key prefix.
        ///
        /// ```
        /// use redkit::rate_limit::Rate;
        #[doc = concat!("use redkit::rate_limit::", $ty, ";")]
        #[doc = concat!("let l = ", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?;")]
        #[doc = concat!("assert_eq!(l.prefix(), ", $ty, "::DEFAULT_PREFIX);")]
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn prefix(&self) -> &str {
            self.keys.prefix()
        }

        /// The rate it was built with, its period as the algorithm holds it (whole
        /// milliseconds for the windows, whole microseconds for GCRA).
        ///
        /// ```
        /// use redkit::rate_limit::Rate;
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?;")]
        /// assert_eq!(*l.rate(), Rate::per_second(redkit::nonzero!(10)));
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn rate(&self) -> &$crate::rate_limit::Rate {
            &self.rate
        }

        /// The limiter's name (its keys are its own).
        ///
        /// ```
        /// use redkit::rate_limit::Rate;
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?;")]
        /// assert_eq!(l.name(), "api");
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn name(&self) -> &str {
            self.keys.name()
        }

        /// Uses `manager` (e.g. one shared by the whole application, for its stats).
        ///
        /// ```
        /// use redkit::{rate_limit::Rate, ScriptManager};
        /// let shared = ScriptManager::new();
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?")]
        ///     .with_manager(shared.clone());
        /// # let _ = l; Ok::<(), redkit::Error>(())
        /// ```
        pub fn with_manager(mut self, manager: $crate::ScriptManager) -> Self {
            self.manager = manager;
            self
        }

        /// The script manager running the checks (for its [`Stats`](crate::Stats)).
        ///
        /// ```
        /// use redkit::rate_limit::Rate;
        #[doc = concat!("let l = redkit::rate_limit::", $ty, "::new(\"api\", Rate::per_second(redkit::nonzero!(10)))?;")]
        /// let _stats = l.manager().stats();
        /// # Ok::<(), redkit::Error>(())
        /// ```
        pub fn manager(&self) -> &$crate::ScriptManager {
            &self.manager
        }

        /// Counts one unit for `key`. See [`check_n`](Self::check_n).
        ///
        /// ```no_run
        #[doc = concat!("# async fn run(l: redkit::rate_limit::", $ty, ", mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {")]
        /// use redkit::rate_limit::LimitKey;
        /// let d = l.check(&mut conn, &LimitKey::text("user-42")?).await?;
        /// # let _ = d; Ok(()) }
        /// ```
        pub async fn check<C: redis::aio::ConnectionLike>(
            &self,
            conn: &mut C,
            key: &$crate::rate_limit::LimitKey,
        ) -> $crate::Result<$crate::rate_limit::Decision> {
            self.count(conn, key, 1).await
        }

        /// Counts `cost` units for `key` in one round trip, if they fit. A cost above what
        /// can pass at once (a window's limit, GCRA's burst) is
        /// [`Decision::CostExceedsLimit`](crate::rate_limit::Decision::CostExceedsLimit)
        /// (nothing counted). With a deny cache attached, a client known to be limited for
        /// this cost is answered locally (no round trip). Errors:
        /// [`Error::WrongType`](crate::Error::WrongType) /
        /// [`Error::CorruptData`](crate::Error::CorruptData) when the key holds something
        /// that is not this limiter's state,
        /// [`Error::PermissionDenied`](crate::Error::PermissionDenied) when an ACL refuses a
        /// command the script runs (nothing written in each case), and connection errors.
        ///
        /// ```no_run
        #[doc = concat!("# async fn run(l: redkit::rate_limit::", $ty, ", mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {")]
        /// use redkit::rate_limit::LimitKey;
        /// let upload_cost = redkit::nonzero!(5);
        /// let d = l.check_n(&mut conn, &LimitKey::text("user-42")?, upload_cost).await?;
        /// # let _ = d; Ok(()) }
        /// ```
        pub async fn check_n<C: redis::aio::ConnectionLike>(
            &self,
            conn: &mut C,
            key: &$crate::rate_limit::LimitKey,
            cost: std::num::NonZeroU32,
        ) -> $crate::Result<$crate::rate_limit::Decision> {
            self.count(conn, key, cost.get()).await
        }
    };
}
pub(super) use limiter_basics;
