//! The operations the bench runs, each an [`Op`] built once and run by [`run_op`]: the plain
//! rows and the paired rows (benches/lean/paired.rs) send the very same calls.

use std::pin::Pin;

use super::*;

/// One bench operation: `op(connection, task, i)`, the i-th call of task `task`.
pub(crate) type Op = Arc<
    dyn Fn(MultiplexedConnection, u64, u64) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// Numbers every run of [`run_op`], so the request ids of two runs never meet.
static SLICE: AtomicU64 = AtomicU64::new(0);

/// Numbers the next runs from `base` (a child process of case `processes`: its request ids
/// then never meet another child's).
pub(crate) fn start_slices_at(base: u64) {
    SLICE.store(base, Ordering::Relaxed);
}

/// Wraps an async closure as an [`Op`].
fn op<F, Fut>(f: F) -> Op
where
    F: Fn(MultiplexedConnection, u64, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |c, t, i| Box::pin(f(c, t, i)))
}

/// Runs `op` for `secs` as [`run`] does.
pub(crate) async fn run_op(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    op: &Op,
) -> Measured {
    SLICE.fetch_add(1, Ordering::Relaxed);
    let op = op.clone();
    run(conn.clone(), pid, secs, move |c, t, i| op(c, t, i)).await
}

/// The limiter ops: `limiter.check` over the 10k IPs, and the seed limiter (key per call).
pub(crate) fn limiter_ops<L: RateLimiter>(limiter: &Arc<L>, ips: &Arc<Vec<LimitKey>>) -> (Op, Op) {
    let (l, k) = (limiter.clone(), ips.clone());
    let redkit = op(move |mut c, t, i| {
        let (l, k) = (l.clone(), k.clone());
        async move {
            let key = &k[((t * 7919 + i * 64) as usize) % IPS];
            let d = l.check(&mut c, key).await.unwrap();
            assert!(matches!(d, Decision::Allowed { .. }), "{d:?}");
        }
    });
    let (s, k) = (Arc::new(redis::Script::new(SEED_LIMITER)), ips.clone());
    let seed = op(move |mut c, t, i| {
        let (s, k) = (s.clone(), k.clone());
        async move {
            let key = format!("seed:rl:{}", k[((t * 7919 + i * 64) as usize) % IPS]);
            seed_check(&s, &mut c, key).await;
        }
    });
    (redkit, seed)
}

/// `limiter.check` over the 10k IPs (any algorithm), every decision allowed.
pub(crate) fn check_op(limiter: Limiter, ips: &Arc<Vec<LimitKey>>) -> Op {
    let (l, k) = (Arc::new(limiter), ips.clone());
    op(move |mut c, t, i| {
        let (l, k) = (l.clone(), k.clone());
        async move {
            let key = &k[((t * 7919 + i * 64) as usize) % IPS];
            let d = l.check(&mut c, key).await.unwrap();
            assert!(matches!(d, Decision::Allowed { .. }), "{d:?}");
        }
    })
}

/// The GCRA ops: `Gcra::check` over the 10k IPs, and go-redis/redis_rate's script (key per
/// call).
pub(crate) fn gcra_ops(ips: &Arc<Vec<LimitKey>>) -> (Op, Op) {
    let period = Duration::from_millis(WINDOW_MS);
    let limiter = Gcra::new(
        "lean",
        Rate::new(crate::support::nz(LIMIT), period).unwrap(),
    )
    .unwrap();
    let (s, k) = (Arc::new(redis::Script::new(SEED_GCRA)), ips.clone());
    let seed = op(move |mut c, t, i| {
        let (s, k) = (s.clone(), k.clone());
        async move {
            let key = format!("seed:gcra:{}", k[((t * 7919 + i * 64) as usize) % IPS]);
            let r: (i64, String, String, String) = s
                .key(key)
                .arg(LIMIT)
                .arg(LIMIT)
                .arg(WINDOW_MS / 1000)
                .arg(1)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(r.0, 1);
        }
    });
    (check_op(limiter.into(), ips), seed)
}

/// The sliding-window ops: `SlidingWindow::check` over the 10k IPs, and python `limits`'
/// two-key script.
pub(crate) fn sliding_ops(ips: &Arc<Vec<LimitKey>>) -> (Op, Op) {
    let window = Duration::from_millis(WINDOW_MS);
    let limiter = SlidingWindow::new(
        "lean",
        Rate::new(crate::support::nz(LIMIT), window).unwrap(),
    )
    .unwrap();
    let (s, k) = (Arc::new(redis::Script::new(SEED_SLIDING)), ips.clone());
    let seed = op(move |mut c, t, i| {
        let (s, k) = (s.clone(), k.clone());
        async move {
            let ip = &k[((t * 7919 + i * 64) as usize) % IPS];
            let (prev, cur) = (format!("seed:sw:{{{ip}}}:p"), format!("seed:sw:{{{ip}}}:c"));
            let ok: Option<i64> = s
                .key(prev)
                .key(cur)
                .arg(LIMIT)
                .arg(WINDOW_MS)
                .arg(1)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(ok, Some(1));
        }
    });
    (check_op(limiter.into(), ips), seed)
}

/// The limiter ops on ONE hot key: `limiter.check`, and the seed limiter on the same key.
pub(crate) fn hot_key_ops<L: RateLimiter>(limiter: &Arc<L>, key: &LimitKey) -> (Op, Op) {
    let (l, k) = (limiter.clone(), Arc::new(key.clone()));
    let redkit = op(move |mut c, _, _| {
        let (l, k) = (l.clone(), k.clone());
        async move {
            let d = l.check(&mut c, &k).await.unwrap();
            assert!(matches!(d, Decision::Allowed { .. }), "{d:?}");
        }
    });
    let (s, key) = (
        Arc::new(redis::Script::new(SEED_LIMITER)),
        format!("seed:rl:{key}"),
    );
    let seed = op(move |mut c, _, _| {
        let (s, key) = (s.clone(), key.clone());
        async move { seed_check(&s, &mut c, key).await }
    });
    (redkit, seed)
}

/// A Lua body through raw `redis::Script` (no redkit code on the client), called as the
/// limiter rows call theirs over the 10k IPs: `fixed_window.v9`'s body with the limiter's key
/// and arguments when `shipped`, else the seed limiter with one `PTTL` before it (the seed's
/// arguments). Case `bodies`: what a script's server time alone does to a row.
pub(crate) fn raw_body_op(
    limiter: &Arc<FixedWindow>,
    ips: &Arc<Vec<LimitKey>>,
    shipped: bool,
) -> Op {
    let source = if shipped {
        Registry::global()
            .require("fixed_window", 9)
            .unwrap()
            .source()
            .to_owned()
    } else {
        format!("redis.call('PTTL', KEYS[1])\n{SEED_LIMITER}")
    };
    let (s, l, k) = (
        Arc::new(redis::Script::new(&source)),
        limiter.clone(),
        ips.clone(),
    );
    op(move |mut c, t, i| {
        let (s, l, k) = (s.clone(), l.clone(), k.clone());
        async move {
            let ip = &k[((t * 7919 + i * 64) as usize) % IPS];
            if shipped {
                let packed: i64 = s
                    .key(l.redis_key(ip))
                    .arg(LIMIT)
                    .arg(WINDOW_MS)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                assert!(packed >= 0, "{packed}");
            } else {
                seed_check(&s, &mut c, format!("seed-pttl:rl:{ip}")).await;
            }
        }
    })
}

/// One version of the default window's script, `fixed_window.v<version>`, called through a
/// script manager with the limiter's own keys and arguments (the script's share of a check,
/// for a row of one version against another).
pub(crate) fn window_version_op(
    limiter: &Arc<FixedWindow>,
    ips: &Arc<Vec<LimitKey>>,
    version: u32,
) -> Op {
    let script = Registry::global()
        .require("fixed_window", version)
        .unwrap_or_else(|_| crate::fixtures::script("fixed_window", version));
    let (l, k, m) = (limiter.clone(), ips.clone(), ScriptManager::new());
    op(move |mut c, t, i| {
        let (l, k, m) = (l.clone(), k.clone(), m.clone());
        async move {
            let key = l.redis_key(&k[((t * 7919 + i * 64) as usize) % IPS]);
            let mut call = Call::new(script);
            call.key(&key).arg(LIMIT).arg(WINDOW_MS);
            if version < 8 {
                // v8 counts 1 without a cost, as the limiter calls it.
                call.arg(1);
            }
            // Allowed: the packed reply (v5 and later), a non-negative integer.
            let packed: i64 = m.invoke(&mut c, &call).await.unwrap();
            assert!(packed >= 0, "{packed}");
        }
    })
}

/// `Store::decrement` of SKU `hot` by 1, with a request id (unique per slice, task and call)
/// when `with_id`.
pub(crate) fn decrement_op(store: &Arc<redkit::inventory::Store>, with_id: bool) -> Op {
    let st = store.clone();
    op(move |mut c, t, i| {
        let st = st.clone();
        async move {
            let id = with_id.then(|| format!("p{}-{t}-{i}", SLICE.load(Ordering::Relaxed)));
            let d = st.decrement(&mut c, "hot", 1, id.as_deref()).await.unwrap();
            assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
        }
    })
}

/// The seed stock script on `seed:stock:hot`, and the seed with its own `SET NX PX` record.
pub(crate) fn seed_stock_ops() -> (Op, Op) {
    let s = Arc::new(redis::Script::new(SEED_STOCK));
    let plain = op(move |mut c, _, _| {
        let s = s.clone();
        async move { seed_take(&s, &mut c, "seed:stock:hot").await }
    });
    let s = Arc::new(redis::Script::new(SEED_STOCK_ID));
    let with_record = op(move |mut c, t, i| {
        let s = s.clone();
        async move {
            let slice = SLICE.load(Ordering::Relaxed);
            let r: i64 = s
                .key("seed:stock:hot")
                .key(format!("seed:req:p{slice}-{t}-{i}"))
                .arg(1)
                .arg(86_400_000)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(r, 1);
        }
    });
    (plain, with_record)
}

/// Acquire + release of `<prefix>-<task>` with `options`, each task its own key.
pub(crate) fn lock_op(
    lock: &Arc<Lock>,
    options: &Arc<LockOptions<Lock>>,
    prefix: &'static str,
) -> Op {
    let (lk, o) = (lock.clone(), options.clone());
    op(move |mut c, t, _| {
        let (lk, o) = (lk.clone(), o.clone());
        async move {
            let resource = format!("{prefix}-{t}");
            match lk.acquire(&mut c, &resource, &o).await.unwrap() {
                Acquire::Acquired(guard) => {
                    let r = lk.release(&mut c, guard).await.unwrap();
                    assert_eq!(r, Release::Released);
                }
                other => panic!("{other:?}"),
            }
        }
    })
}

/// The seed lock's cycle on `<prefix>:<task>`: `SET NX PX` with the default lease of
/// [`LockOptions`], then the compare-and-delete script.
pub(crate) fn seed_lock_op(prefix: &'static str) -> Op {
    let u = Arc::new(redis::Script::new(SEED_UNLOCK));
    let ttl_ms = redkit::lock::limits::DEFAULT_TTL.as_millis() as u64;
    op(move |mut c, t, _| {
        let u = u.clone();
        async move { seed_lock_cycle(&u, &mut c, &format!("{prefix}:{t}"), ttl_ms).await }
    })
}

/// The default lock's cycle on `pres-<task>`, the same with `wake_on_release(false)` on
/// `pnw-<task>`, and the seed's on `seed:plock:<task>`.
pub(crate) fn lock_ops() -> (Op, Op, Op) {
    let (lock, options) = (Arc::new(Lock::new()), Arc::new(LockOptions::new()));
    let quiet = Arc::new(Lock::new().wake_on_release(false));
    (
        lock_op(&lock, &options, "pres"),
        lock_op(&quiet, &options, "pnw"),
        seed_lock_op("seed:plock"),
    )
}
