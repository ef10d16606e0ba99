//! Property tests: public constructors, builders and options never panic, whatever the input,
//! and what they accept is consistent with what they promise: limiter, keys, replication,
//! admin, middleware, script calls, locks and inventory. (tests/lock_contract.rs also calls
//! `acquire` with extreme options against a real server.)

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use proptest::prelude::*;
use redkit::rate_limit::{FixedWindow, Gcra, LimitKey, SlidingWindow};
use redkit::script::admin::Admin;
use redkit::script::{Acked, Replication};
use redkit::script::{Backend, Library};
use redkit::{Registry, Script, ScriptManager};

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        any::<u64>().prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        any::<[u8; 4]>().prop_map(|b| IpAddr::V6(std::net::Ipv4Addr::from(b).to_ipv6_mapped())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn replication_accepts_exactly_its_documented_range(replicas in any::<u32>(), timeout in any_duration()) {
        let ok = replicas >= 1
            && timeout >= Duration::from_millis(1)
            && timeout <= Replication::MAX_TIMEOUT;
        match Replication::new(replicas, timeout) {
            Ok(r) => {
                prop_assert!(ok);
                prop_assert_eq!(r.replicas(), replicas);
                prop_assert_eq!(r.timeout(), timeout);
            }
            Err(e) => prop_assert!(!ok, "{e}"),
        }
        let a = Acked::new((), replicas, replicas.saturating_add(1));
        prop_assert_eq!(a.is_replicated(), replicas == u32::MAX);
    }

    #[test]
    fn fsynced_replication_accepts_exactly_its_documented_range(replicas in any::<u32>(), timeout in any_duration(), local in any::<bool>()) {
        let ok = timeout >= Duration::from_millis(1) && timeout <= Replication::MAX_TIMEOUT;
        match Replication::fsynced(replicas, timeout) {
            Ok(r) => {
                prop_assert!(ok);
                let r = if local { r.with_local_fsync() } else { r };
                prop_assert!(r.is_fsynced());
                prop_assert_eq!(r.local_fsync(), local);
                prop_assert_eq!((r.replicas(), r.timeout()), (replicas, timeout));
            }
            Err(e) => prop_assert!(!ok, "{e}"),
        }
    }

    #[test]
    fn fixed_window_constructor_never_panics(name in ".{0,300}", limit in any::<u32>(), window in any_duration()) {
        if let Ok(l) = FixedWindow::new(&name, limit, window) {
            prop_assert!(limit >= 1);
            prop_assert!(l.window() >= FixedWindow::MIN_WINDOW && l.window() <= FixedWindow::MAX_WINDOW);
            let _ = l.redis_key(&LimitKey::ip(IpAddr::V6(Ipv6Addr::LOCALHOST)));
            // Aligned to the clock: any window length gives a key and never panics.
            let aligned = l.aligned_to_clock();
            prop_assert!(aligned.is_aligned_to_clock());
            let key = aligned.redis_key(&LimitKey::ip(IpAddr::V6(Ipv6Addr::LOCALHOST)));
            prop_assert!(key.starts_with("rk:rl:"));
        }
    }

    #[test]
    fn window_group_commit_limits_are_checked_without_panicking(
        max_batch in prop_oneof![0usize..300, any::<usize>()],
        in_flight in prop_oneof![0usize..20, any::<usize>()],
    ) {
        let ok = (2..=FixedWindow::MAX_GROUP_BATCH).contains(&max_batch)
            && (1..=FixedWindow::MAX_GROUP_IN_FLIGHT).contains(&in_flight);
        let limiter = FixedWindow::new("g", 10, std::time::Duration::from_secs(1)).unwrap();
        prop_assert_eq!(limiter.group_commit(), None);
        match limiter.with_group_commit(max_batch, in_flight) {
            Ok(l) => {
                prop_assert!(ok);
                prop_assert_eq!(l.group_commit(), Some((max_batch, in_flight)));
            }
            Err(e) => {
                let invalid = matches!(e, redkit::Error::InvalidInput { .. });
                prop_assert!(!ok && invalid, "{e}");
            }
        }
    }

    #[test]
    fn coalescing_limits_are_checked_without_panicking(max_batch in any::<usize>(), in_flight in any::<usize>()) {
        use redkit::connect::Coalescing;
        let ok = (1..=Coalescing::<()>::MAX_BATCH).contains(&max_batch)
            && (1..=Coalescing::<()>::MAX_IN_FLIGHT).contains(&in_flight);
        match Coalescing::with_limits((), max_batch, in_flight) {
            Ok(c) => {
                prop_assert!(ok);
                prop_assert_eq!((c.max_batch(), c.in_flight()), (max_batch, in_flight));
            }
            Err(e) => {
                let invalid = matches!(e, redkit::Error::InvalidInput { .. });
                prop_assert!(!ok && invalid, "{e}");
            }
        }
    }

    #[test]
    fn gcra_constructors_never_panic(name in ".{0,300}", rate in any::<u32>(), period in any_duration(), burst in any::<u32>()) {
        if let Ok(l) = Gcra::new(&name, rate, period) {
            prop_assert!(rate >= 1 && l.burst() == rate);
            prop_assert!(l.emission_interval() >= Duration::from_micros(1));
            prop_assert!(l.emission_interval() * l.burst() <= Gcra::MAX_BUCKET);
            if let Ok(b) = l.with_burst(burst) {
                prop_assert!(burst >= 1 && b.burst() == burst);
                prop_assert!(b.emission_interval() * burst <= Gcra::MAX_BUCKET);
            }
        }
    }

    #[test]
    fn sliding_window_constructor_never_panics(name in ".{0,300}", limit in any::<u32>(), window in any_duration()) {
        if let Ok(l) = SlidingWindow::new(&name, limit, window) {
            prop_assert!(limit >= 1 && l.limit() == limit);
            prop_assert!(l.window() >= SlidingWindow::MIN_WINDOW && l.window() <= SlidingWindow::MAX_WINDOW);
        }
    }

    #[test]
    fn limit_keys_never_panic_and_never_contain_braces(text in ".{0,400}", ip in any_ip(), prefix in any::<u8>()) {
        if let Ok(k) = LimitKey::text(&text) {
            prop_assert!(!text.is_empty() && text.len() <= 256);
            prop_assert!(!k.as_str().contains(['{', '}']), "braces in {:?}", k.as_str());
        }
        let k = LimitKey::ip_grouped(ip, prefix);
        prop_assert!(!k.as_str().contains(['{', '}']), "braces in {:?}", k.as_str());
        let _ = LimitKey::ip(ip);
    }

    #[test]
    fn script_constructor_never_panics(name in ".{0,80}", version in any::<u32>(), keys in any::<usize>(), source in ".{0,200}") {
        let _ = Script::new(&name, version, keys, &source);
        let _ = Script::new_variadic(&name, version, &source);
    }

    #[test]
    fn library_constructor_never_panics_and_names_are_redis_safe(
        set in ".{0,80}",
        files in proptest::collection::vec((".{0,30}", ".{0,120}"), 0..6),
        backend in prop_oneof![Just(Backend::Scripts), Just(Backend::Functions)],
    ) {
        let registry = Registry::from_files(files.iter().map(|(n, c)| (format!("{n}.lua"), c.clone())));
        if let Ok(library) = Library::new(&set, &registry) {
            prop_assert!(library.name().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            prop_assert!(library.code().starts_with("#!lua name="));
            for script in registry.scripts() {
                let function = library.function_name(script);
                prop_assert!(function.is_some_and(|f| f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')));
            }
            let manager = ScriptManager::new().with_library(library).with_backend(backend);
            prop_assert_eq!(manager.backend(), backend);
        }
    }

    #[test]
    fn admin_constructors_never_panic(url in ".{0,120}", port in any::<u16>(), timeout in any_duration()) {
        if let Ok(a) = Admin::single(url.as_str()) {
            let _ = format!("{:?}", a.with_timeout(timeout));
        }
        let _ = Admin::cluster(Vec::<String>::new()).map(|_| ()).unwrap_err();
        let seeds = [format!("redis://127.0.0.1:{port}/"), url.clone()];
        let _ = Admin::cluster(seeds).map(|a| a.with_timeout(timeout));
    }
}

#[cfg(feature = "tower")]
mod middleware {
    use super::*;
    use redkit::middleware::{
        ClientId, ForwardedHeader, KeyExtractor, Policies, PolicyConfig, PolicySpec, RequestInfo,
        TrustedProxies,
    };

    fn request(header: &str, values: &[String], peer: Option<SocketAddr>) -> http::Request<()> {
        let mut b = http::Request::builder();
        for v in values {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                b = b.header(header, v);
            }
        }
        let mut req = b.body(()).unwrap();
        if let Some(peer) = peer {
            req.extensions_mut().insert(peer);
        }
        req
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn trusted_proxies_never_panic(
            hops in prop_oneof![Just(usize::MAX), Just(usize::MAX - 1), any::<usize>(), 0usize..8],
            cidrs in proptest::collection::vec(".{0,40}", 0..4),
            values in proptest::collection::vec("[0-9a-fA-F:.,\\[\\] ;=\"forFOR]{0,80}", 0..4),
            peer_ip in any_ip(),
            port in any::<u16>(),
            forwarded in any::<bool>(),
        ) {
            let (name, kind) = if forwarded {
                ("forwarded", ForwardedHeader::Forwarded)
            } else {
                ("x-forwarded-for", ForwardedHeader::XForwardedFor)
            };
            let req = request(name, &values, Some(SocketAddr::new(peer_ip, port)));
            let info = RequestInfo::new(&req);
            let by_hops = TrustedProxies::hops(hops).header(kind);
            prop_assert!(matches!(by_hops.extract(&info), Some(ClientId::Ip(_))));
            if let Ok(by_cidr) = TrustedProxies::parse_cidrs(&cidrs) {
                prop_assert!(matches!(by_cidr.header(kind).extract(&info), Some(ClientId::Ip(_))));
            }
            // No peer: no client, never a guess from client-controlled headers.
            let bare = request(name, &values, None);
            prop_assert_eq!(TrustedProxies::hops(hops).extract(&RequestInfo::new(&bare)), None);
        }

        #[test]
        fn policies_from_any_config_never_panic(
            name in ".{0,80}", limit in any::<u32>(), window in any_duration(),
            routes in proptest::collection::vec((".{0,20}", ".{0,20}", any::<u32>(), any::<u64>()), 0..4),
        ) {
            let mut config = PolicyConfig::new(PolicySpec::new(name, limit, window));
            for (path, n, l, w) in routes {
                config = config.route(path, PolicySpec::new(n, l, Duration::from_millis(w)));
            }
            if let Ok(p) = Policies::from_config(&config) {
                let _ = p.for_path("/");
                let _ = p.for_path("");
            }
        }
    }
}

// ---- Script calls: Call::new / with_key_count / key / arg with extreme values ----

mod calls {
    use proptest::prelude::*;
    use redkit::{Call, Error, Script};

    fn any_count() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0usize),
            Just(1usize),
            Just(Call::MAX_KEYS),
            Just(Call::MAX_KEYS + 1),
            Just(usize::MAX / 4),
            Just(1usize << 32),
            Just(usize::MAX),
            any::<usize>(),
            0usize..64,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any declared count with any (small) number of keys and args: building never
        /// panics, and validation accepts exactly what the script and the cap allow.
        #[test]
        fn variadic_calls_never_panic_and_validate_exactly(
            declared in any_count(),
            keys in 0usize..8,
            args in proptest::collection::vec(any::<i64>(), 0..8),
            misorder in any::<bool>(),
        ) {
            let v = Script::new_variadic("v", 1, "return #KEYS").unwrap();
            let mut call = Call::with_key_count(&v, declared);
            if misorder {
                call.arg(1);
            }
            for i in 0..keys {
                call.key(format!("{{t}}:{i}"));
            }
            for a in &args {
                call.arg(*a);
            }
            let ok = !misorder && (1..=Call::MAX_KEYS).contains(&declared) && keys == declared;
            match call.validate() {
                Ok(()) => prop_assert!(ok),
                Err(Error::KeyCount { .. }) | Err(Error::InvalidInput { .. }) => prop_assert!(!ok),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }

        /// Fixed scripts: only the declared count passes; keys and args of any bytes.
        #[test]
        fn fixed_calls_never_panic(
            script_keys in 0usize..4,
            declared in any_count(),
            key in proptest::collection::vec(any::<u8>(), 0..64),
            arg in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let s = Script::new("f", 1, script_keys, "return 1").unwrap();
            let mut call = Call::with_key_count(&s, declared);
            for _ in 0..script_keys.min(declared) {
                call.key(&key);
            }
            call.arg(&arg[..]).arg(u64::MAX).arg(i64::MIN).arg(f64::NAN);
            let ok = declared == script_keys && declared <= Call::MAX_KEYS;
            prop_assert_eq!(call.validate().is_ok(), ok);
            let mut plain = Call::new(&s);
            for _ in 0..script_keys {
                plain.key(&key);
            }
            prop_assert!(plain.validate().is_ok());
        }
    }
}

/// Lock section: every `LockOptions` setter and the lock constructors with extreme values.
/// (tests/lock_contract.rs then calls `acquire` with such options against a real server.)
mod lock {
    use super::*;
    use redkit::lock::{FencingToken, Lock, LockOptions, Redlock};

    fn any_options() -> impl Strategy<Value = LockOptions> {
        (
            any_duration(),
            any::<u32>(),
            any_duration(),
            any_duration(),
            proptest::option::of(any_duration()),
            proptest::option::of(any_duration()),
            proptest::option::of(".{0,200}"),
            any::<bool>(),
        )
            .prop_map(
                |(ttl, retries, delay, jitter, max_wait, drift, token, fencing)| {
                    let mut o = LockOptions::new()
                        .ttl(ttl)
                        .retries(retries)
                        .retry_delay(delay)
                        .jitter(jitter)
                        .fencing(fencing);
                    if let Some(w) = max_wait {
                        o = o.max_wait(w);
                    }
                    if let Some(d) = drift {
                        o = o.drift(d);
                    }
                    if let Some(t) = token {
                        o = o.token(t);
                    }
                    o
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn lock_options_setters_never_panic_and_debug_hides_the_token(
            options in any_options(),
            token in "[a-z]{16,40}",
        ) {
            let drift = options.drift_allowance();
            prop_assert!(drift <= Duration::MAX);
            let with = options.clone().token(token.clone());
            let shown = format!("{with:?}");
            prop_assert!(!shown.contains(&token), "{}", shown);
            let _ = LockOptions::default() == options;
            // Fencing is a switch: it changes nothing else (drift, equality of the rest).
            let on = options.clone().fencing(true);
            let off = options.clone().fencing(false);
            prop_assert_eq!(on.drift_allowance(), off.drift_allowance());
            prop_assert!(on != off);
            prop_assert_eq!(on.fencing(false), off);
        }

        #[test]
        fn lock_constructors_never_panic(prefix in ".{0,100}", resource in ".{0,600}", timeout in any_duration(), f in any::<u64>(), g in any::<u64>()) {
            if let Ok(lock) = Lock::new().with_prefix(&prefix) {
                prop_assert_eq!(lock.prefix(), prefix.as_str());
                if let (Ok(k), Ok(fk)) = (lock.lock_key(&resource), lock.fence_key(&resource)) {
                    prop_assert!(fk.starts_with(&k));
                }
            }
            let none: Vec<redis::aio::MultiplexedConnection> = Vec::new();
            prop_assert!(Redlock::new(none).is_err());
            prop_assert_eq!(FencingToken::new(f) < FencingToken::new(g), f < g);
            prop_assert_eq!(FencingToken::new(f).to_string(), f.to_string());
            let _ = timeout;
        }
    }
}

/// Inventory section: prefixes, retention, store ids, SKUs and quantities of any shape.
mod inventory {
    use super::*;
    use redkit::inventory::Inventory;

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            ".{0,40}",
            "[a-z:{}%]{0,300}",
            proptest::collection::vec(any::<char>(), 0..600)
                .prop_map(|c| c.into_iter().collect::<String>()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn constructors_never_panic_and_keep_keys_in_one_slot(
            prefix in any_text(),
            retention in any_duration(),
            store in any_text(),
            sku in any_text(),
            quantity in any::<u64>(),
        ) {
            let built = Inventory::builder(&prefix).retention(retention).build();
            if let Ok(inventory) = built {
                prop_assert!(retention >= Duration::from_millis(1));
                prop_assert!(retention <= Inventory::MAX_RETENTION);
                if let Ok(s) = inventory.store(&store) {
                    if let (Ok(stock), Ok(line)) = (s.sku_key(&sku), s.line(&sku, quantity)) {
                        prop_assert!((1..=Inventory::MAX_QUANTITY).contains(&quantity));
                        prop_assert_eq!(line.quantity(), quantity);
                        // Every key of a store hashes to the store's slot.
                        let slot = |k: &str| redis::cluster_routing::Slot::for_key(k.as_bytes());
                        prop_assert_eq!(slot(&stock), slot(&s.request_key("r").unwrap()));
                        prop_assert_eq!(slot(&stock), slot(&s.reservation_key(&sku).unwrap()));
                    }
                }
            }
        }

        #[test]
        fn group_commit_settings_are_accepted_exactly_in_their_documented_range(
            batch in prop_oneof![any::<usize>(), 0usize..1100],
            in_flight in prop::option::of(prop_oneof![any::<usize>(), 0usize..20]),
            grouped in any::<bool>(),
        ) {
            let mut builder = Inventory::builder("inv");
            if grouped {
                builder = builder.group_commit(batch);
            }
            if let Some(k) = in_flight {
                builder = builder.group_in_flight(k);
            }
            let ok_batch = !grouped || (2..=Inventory::MAX_GROUP_BATCH).contains(&batch);
            let ok_in_flight = in_flight
                .is_none_or(|k| grouped && (1..=Inventory::MAX_GROUP_IN_FLIGHT).contains(&k));
            match builder.build() {
                Ok(inventory) => {
                    prop_assert!(ok_batch && ok_in_flight);
                    prop_assert_eq!(inventory.group_commit(), grouped.then_some(batch));
                    prop_assert_eq!(
                        inventory.group_in_flight(),
                        grouped.then_some(in_flight.unwrap_or(Inventory::DEFAULT_GROUP_IN_FLIGHT))
                    );
                }
                Err(e) => {
                    prop_assert!(!(ok_batch && ok_in_flight));
                    prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                }
            }
        }
    }
}

mod coordination {
    use super::*;
    use redkit::lock::{FairLock, Owner, ReentrantLock, RwLock, Semaphore};
    use redkit::versioned::{RetryPolicy, Snapshot, Versioned};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn coordination_constructors_never_panic_and_keys_hold_one_hash_tag(
            prefix in ".{0,100}",
            name in ".{0,600}",
            attempts in any::<u32>(),
            first in any_duration(),
            max in any_duration(),
        ) {
            let keys = [
                Semaphore::new().with_prefix(&prefix).and_then(|s| s.key(&name)),
                Versioned::new().with_prefix(&prefix).and_then(|v| v.key(&name)),
                RwLock::new().with_prefix(&prefix).and_then(|r| r.key(&name)),
                ReentrantLock::new().with_prefix(&prefix).and_then(|r| r.key(&name)),
                FairLock::new()
                    .with_prefix(&prefix)
                    .and_then(|f| f.with_waiter_lease(first))
                    .and_then(|f| f.key(&name)),
            ];
            prop_assert_eq!(
                Owner::from_token(&name).is_ok(),
                (16..=128).contains(&name.len())
            );
            let lease_ok = FairLock::new().with_waiter_lease(max).is_ok();
            prop_assert_eq!(
                lease_ok,
                max >= Duration::from_millis(30) && max <= redkit::lock::LockOptions::MAX_TTL
            );
            for key in keys.into_iter().flatten() {
                prop_assert_eq!(key.matches('{').count(), 1, "{}", key);
                prop_assert_eq!(key.matches('}').count(), 1, "{}", key);
                prop_assert!(key.ends_with('}'), "{}", key);
            }
            let policy = RetryPolicy::new().attempts(attempts).backoff(first, max);
            prop_assert_eq!(policy.get_attempts(), attempts);
            let s = Snapshot { value: None, version: u64::from(attempts) };
            prop_assert_eq!(s.exists(), attempts > 0);
        }
    }
}

// ---- Local deny cache (and, with `tower`, the concurrency limit) ----

mod shield {
    use super::*;
    use redkit::rate_limit::DenyCache;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn deny_cache_accepts_exactly_its_documented_capacity(capacity in prop_oneof![
            0usize..64, Just(DenyCache::MAX_CAPACITY), Just(DenyCache::MAX_CAPACITY + 1), any::<usize>(),
        ]) {
            let ok = (1..=DenyCache::MAX_CAPACITY).contains(&capacity);
            let cache = DenyCache::new(capacity);
            prop_assert_eq!(cache.is_ok(), ok);
            if let Ok(cache) = cache {
                prop_assert_eq!(cache.capacity(), capacity);
                prop_assert!(cache.is_empty());
                let limiter = FixedWindow::new("p", 1, Duration::from_secs(1)).unwrap().with_deny_cache(cache);
                prop_assert!(limiter.deny_cache().is_some());
            }
        }
    }

    #[cfg(feature = "tower")]
    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn deny_cache_capacity_option_is_validated(capacity in any::<usize>(), small in 0usize..20) {
            use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
            let spec = PolicySpec::new("d", 10, Duration::from_secs(1));
            for c in [capacity, small] {
                let built = Policies::from_config(&PolicyConfig::new(spec.clone()).deny_cache_capacity(c));
                prop_assert_eq!(built.is_ok(), (1..=DenyCache::MAX_CAPACITY).contains(&c));
            }
        }

        #[test]
        fn concurrency_layer_builder_never_panics_and_validates(
            name in prop_oneof!["[a-zA-Z0-9:._-]{0,70}", ".{0,70}"], permits in prop_oneof![0u32..5, any::<u32>()],
            lease in prop_oneof![(1u64..100_000).prop_map(Duration::from_millis), any_duration()],
            timeout in any_duration(), bits in any::<u8>(), status in 100u16..1000,
        ) {
            use redkit::middleware::ConcurrencyLimitLayer;
            let status = http::StatusCode::from_u16(status).unwrap();
            let built = ConcurrencyLimitLayer::builder(&name, permits, ())
                .lease(lease)
                .timeout(timeout)
                .ipv6_prefix(bits)
                .full_status(status)
                .build();
            let lease_ok = !lease.is_zero()
                && lease <= redkit::lock::LockOptions::MAX_TTL
                && lease.subsec_nanos() % 1_000_000 == 0;
            let name_ok = !name.is_empty() && name.len() <= 58
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_:.-".contains(&b));
            let ok = name_ok && (1..=1_000_000).contains(&permits) && lease_ok
                && !timeout.is_zero() && (1..=128).contains(&bits)
                && (status.is_client_error() || status.is_server_error());
            prop_assert_eq!(built.is_ok(), ok, "{:?}", built.err());
        }
    }
}
