//! Property tests: public constructors, builders and options never panic, whatever the input,
//! and accept exactly what they document: limiter, keys, replication, admin, middleware,
//! script calls, locks and inventory. (tests/lock_contract.rs also calls `acquire` with
//! extreme options against a real server.)
//!
//! Every "accepts exactly" property states the documented predicate `ok` and asserts
//! `result.is_ok() == ok`, checking every getter when accepted. Its inputs come from
//! boundary-aware generators (`duration_around`, `u64_around`, `usize_around`, `prefix_like`,
//! `part_like`) that draw the boundaries (min-1, min, min+1, max-1, max, max+1), values inside
//! and values outside; `coverage::generators_reach_accepted_and_refused_inputs` samples each
//! property's input strategy and asserts that both accepted and refused inputs make up a
//! substantial share (at least 20 % each), so neither branch can silently stop running. Where
//! random input is almost never accepted (library sources, proxy networks, script calls), the
//! strategy mixes an in-range arm of valid inputs and near misses with the random arm, which
//! still shows that no input panics.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use redkit::keys::Prefix;
use redkit::rate_limit::{FixedWindow, Gcra, LimitKey, Rate, SlidingWindow};
use redkit::script::admin::Admin;
use redkit::script::{Acked, Replication};
use redkit::script::{Backend, Library};
use redkit::{GroupCommit, Registry, Script, ScriptManager};

const NS: Duration = Duration::from_nanos(1);
const MS: Duration = Duration::from_millis(1);

/// Any duration, for setters that accept every value (no documented range).
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        (0u64..100_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Durations around the accepted range `min..=max` (`min > 0`, `max < Duration::MAX`): the
/// boundaries at nanosecond and millisecond steps, values inside (near each end and spread
/// over the range), below and above. About half are inside.
fn duration_around(min: Duration, max: Duration) -> BoxedStrategy<Duration> {
    assert!(!min.is_zero() && min <= max && max < Duration::MAX);
    let edges: Vec<Duration> = [
        Some(Duration::ZERO),
        min.checked_sub(MS),
        min.checked_sub(NS),
        Some(min),
        Some(min + NS),
        Some(max - NS),
        Some(max),
        max.checked_add(NS),
        max.checked_add(MS),
        Some(Duration::MAX),
    ]
    .into_iter()
    .flatten()
    .collect();
    let span = max - min;
    let below_ns = u64::try_from(min.as_nanos()).unwrap_or(u64::MAX);
    prop_oneof![
        3 => proptest::sample::select(edges),
        2 => (0u64..=10_000_000_000).prop_map(move |n| (min + Duration::from_nanos(n)).min(max)),
        1 => (0u64..=10_000_000_000).prop_map(move |n| max.saturating_sub(Duration::from_nanos(n)).max(min)),
        2 => (0.0f64..=1.0).prop_map(move |f| (min + span.mul_f64(f)).min(max)),
        1 => (0..below_ns).prop_map(Duration::from_nanos),
        1 => (1u64..=10_000_000_000).prop_map(move |n| max.saturating_add(Duration::from_nanos(n))),
        1 => (any::<u64>(), 0u32..1_000_000_000)
            .prop_map(move |(s, n)| max.saturating_add(Duration::new(s, n)).max(max + NS)),
    ]
    .boxed()
}

/// Integers around the accepted range `min..=max`: boundaries, inside, below and above.
fn u64_around(min: u64, max: u64) -> BoxedStrategy<u64> {
    assert!(min <= max && max < u64::MAX);
    let edges: Vec<u64> = [
        Some(0),
        min.checked_sub(1),
        Some(min),
        Some(min + 1),
        max.checked_sub(1),
        Some(max),
        Some(max + 1),
        Some(u64::MAX),
    ]
    .into_iter()
    .flatten()
    .collect();
    prop_oneof![
        3 => proptest::sample::select(edges),
        2 => min..=max,
        1 => min..=min.saturating_add(100).min(max),
        1 => 0..=min,
        1 => (max + 1)..=u64::MAX,
    ]
    .boxed()
}

/// The documented ranges of [`GroupCommit::new`]: a batch of 2 or more, 1 or more in flight.
fn group_commit_ok(&(max_batch, in_flight): &(usize, usize)) -> bool {
    (2..=GroupCommit::MAX_BATCH).contains(&max_batch)
        && (1..=GroupCommit::MAX_IN_FLIGHT).contains(&in_flight)
}

/// `(max batch, in flight)` of [`Coalescing::with_limits`](redkit::connect::Coalescing::with_limits).
fn coalescing_input() -> impl Strategy<Value = (usize, usize)> {
    use redkit::connect::Coalescing;
    (
        usize_around(1, Coalescing::<()>::MAX_BATCH),
        usize_around(1, Coalescing::<()>::MAX_IN_FLIGHT),
    )
}

/// Its documented ranges: 1 ..= MAX_BATCH, 1 ..= MAX_IN_FLIGHT.
fn coalescing_ok(&(max_batch, in_flight): &(usize, usize)) -> bool {
    use redkit::connect::Coalescing;
    (1..=Coalescing::<()>::MAX_BATCH).contains(&max_batch)
        && (1..=Coalescing::<()>::MAX_IN_FLIGHT).contains(&in_flight)
}

/// [`u64_around`] for `usize` settings.
fn usize_around(min: usize, max: usize) -> BoxedStrategy<usize> {
    assert!(min <= max && max < usize::MAX);
    let edges: Vec<usize> = [
        Some(0),
        min.checked_sub(1),
        Some(min),
        Some(min + 1),
        max.checked_sub(1),
        Some(max),
        Some(max + 1),
        Some(usize::MAX),
    ]
    .into_iter()
    .flatten()
    .collect();
    prop_oneof![
        3 => proptest::sample::select(edges),
        3 => min..=max,
        1 => 0..=min,
        1 => (max + 1)..=usize::MAX,
    ]
    .boxed()
}

/// `u32` counts that must be at least 1 (limits, rates): mostly valid, some 0.
fn count_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => Just(0u32),
        1 => Just(1u32),
        1 => Just(u32::MAX),
        3 => 1u32..100,
        2 => 1u32..=u32::MAX,
    ]
}

/// `true` for a name or prefix `keys` accepts: 1..=64 bytes of `[A-Za-z0-9_:.-]` (src/keys.rs).
fn prefix_ok(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-'))
}

/// Names and prefixes: mostly valid (of every length, 64 bytes included), some empty, too
/// long, with one forbidden character, or arbitrary text.
fn prefix_like() -> BoxedStrategy<String> {
    prop_oneof![
        10 => "[A-Za-z0-9_:.-]{1,64}",
        1 => "[a-z]{64}",
        1 => "[a-z]{65}",
        1 => Just(String::new()),
        2 => (
            "[a-z0-9]{0,30}",
            proptest::sample::select(vec![' ', '{', '}', '/', '*', '\n', '\0', 'é', '%']),
            "[a-z0-9]{0,30}",
        )
            .prop_map(|(a, c, b)| format!("{a}{c}{b}")),
        1 => ".{0,100}",
    ]
    .boxed()
}

/// `true` for a user-supplied key part (resource, store, SKU, limit key): 1..=256 bytes.
fn part_ok(s: &str) -> bool {
    (1..=redkit::keys::MAX_PART_LEN).contains(&s.len())
}

/// Key parts: mostly valid (with braces and `%` to escape, any text, 255 and 256 bytes),
/// some empty or too long.
fn part_like() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "[a-z0-9%{}:]{1,40}",
        1 => ".{1,60}",
        2 => (255usize..=257).prop_map(|n| "x".repeat(n)),
        1 => Just(String::new()),
        1 => (257usize..600).prop_map(|n| "{".repeat(n)),
    ]
    .boxed()
}

/// A part as it appears in a key: `%` -> `%25`, `{` -> `%7B`, `}` -> `%7D` (src/keys.rs).
fn escaped(s: &str) -> String {
    s.replace('%', "%25")
        .replace('{', "%7B")
        .replace('}', "%7D")
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        any::<[u8; 4]>().prop_map(|b| IpAddr::V6(std::net::Ipv4Addr::from(b).to_ipv6_mapped())),
    ]
}

fn is_invalid_input<T>(r: &redkit::Result<T>) -> bool {
    matches!(r, Err(redkit::Error::InvalidInput { .. }))
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

// ---- Inputs and documented predicates of each "accepts exactly" property ----

fn replicas() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1u32),
        Just(u32::MAX),
        1u32..8,
        any::<u32>()
    ]
}

/// `(acked, requested)` replicas of an [`Acked`] answer.
fn acked_counts() -> impl Strategy<Value = (u32, u32)> {
    (0u32..4, 0u32..4)
}

fn replication_timeout() -> BoxedStrategy<Duration> {
    duration_around(MS, Replication::MAX_TIMEOUT)
}

/// `Replication::new` / `fsynced`: timeout 1 ms ..= MAX_TIMEOUT (and `new`: replicas >= 1).
fn replication_timeout_ok(timeout: Duration) -> bool {
    (MS..=Replication::MAX_TIMEOUT).contains(&timeout)
}

fn fixed_window_input() -> impl Strategy<Value = (String, u32, Duration)> {
    (
        prefix_like(),
        count_u32(),
        duration_around(FixedWindow::MIN_WINDOW, FixedWindow::MAX_WINDOW),
    )
}

fn fixed_window_ok((name, limit, window): &(String, u32, Duration)) -> bool {
    prefix_ok(name)
        && *limit >= 1
        && (FixedWindow::MIN_WINDOW..=FixedWindow::MAX_WINDOW).contains(window)
}

fn sliding_window_input() -> impl Strategy<Value = (String, u32, Duration)> {
    (
        prefix_like(),
        count_u32(),
        duration_around(SlidingWindow::MIN_WINDOW, SlidingWindow::MAX_WINDOW),
    )
}

fn sliding_window_ok((name, limit, window): &(String, u32, Duration)) -> bool {
    prefix_ok(name)
        && *limit >= 1
        && (SlidingWindow::MIN_WINDOW..=SlidingWindow::MAX_WINDOW).contains(window)
}

/// GCRA's emission interval in whole microseconds (`period` rounded down to whole us, then
/// divided by `rate` rounding up), when the period is at least 1 us.
fn gcra_interval_us(rate: u32, period: Duration) -> Option<u64> {
    let period_us = u64::try_from(period.as_micros())
        .ok()
        .filter(|us| *us >= 1)?;
    Some(period_us.div_ceil(u64::from(rate.max(1))))
}

/// `emission interval x burst <= MAX_BUCKET`.
fn gcra_bucket_ok(interval_us: u64, burst: u32) -> bool {
    u128::from(interval_us) * u128::from(burst) <= Gcra::MAX_BUCKET.as_micros()
}

/// `(name, rate, period, burst pick)`: the burst is chosen from the pick by [`gcra_burst`].
type GcraInput = (String, u32, Duration, (u8, u32));

fn gcra_input() -> impl Strategy<Value = GcraInput> {
    (
        prefix_like(),
        count_u32(),
        duration_around(Duration::from_micros(1), Gcra::MAX_BUCKET),
        (any::<u8>(), any::<u32>()),
    )
}

fn gcra_new_ok((name, rate, period, _): &GcraInput) -> bool {
    prefix_ok(name)
        && *rate >= 1
        && gcra_interval_us(*rate, *period).is_some_and(|i| gcra_bucket_ok(i, *rate))
}

/// The burst to try: any, 0, small, or the largest bucket allowed and one more.
fn gcra_burst((_, rate, period, (pick, raw)): &GcraInput) -> u32 {
    let largest = gcra_interval_us(*rate, *period)
        .map(|i| u32::try_from(Gcra::MAX_BUCKET.as_micros() / u128::from(i)).unwrap_or(u32::MAX));
    match (pick % 5, largest) {
        (1, _) => 0,
        (2, Some(b)) => b,
        (3, Some(b)) => b.saturating_add(1),
        (4, _) => 1 + raw % 100,
        _ => *raw,
    }
}

fn gcra_burst_ok(input: &GcraInput) -> bool {
    let burst = gcra_burst(input);
    input.1 >= 1
        && burst >= 1
        && gcra_interval_us(input.1, input.2).is_some_and(|i| gcra_bucket_ok(i, burst))
}

/// Lua sources with a header `--! flags:` line, and whether it is valid and read-only.
const FLAGS: [(&str, bool, bool); 8] = [
    ("no-writes", true, true),
    ("readonly", true, true),
    ("no-writes,readonly", true, true),
    ("", true, false),
    (" ", true, false),
    ("bogus", false, false),
    ("no-writes bogus", false, false),
    ("allow-oom", false, false),
];

/// `(name, version, keys, source, flags)`: `flags` indexes [`FLAGS`] when the source has a
/// flags header.
type ScriptInput = (String, u32, usize, String, Option<usize>);

fn script_input() -> impl Strategy<Value = ScriptInput> {
    (
        prop_oneof![
            6 => "[a-z0-9_]{1,20}",
            1 => Just(String::new()),
            2 => "[a-z_]{0,5}[A-Z .{:-][a-z_]{0,5}",
        ],
        prop_oneof![1 => Just(0u32), 4 => 1u32..=u32::MAX],
        prop_oneof![0usize..4, any::<usize>()],
        prop_oneof![Just(None), Just(None), (0..FLAGS.len()).prop_map(Some)],
        "([^-].{0,200})?",
    )
        .prop_map(|(name, version, keys, flags, body)| {
            let source = match flags {
                Some(i) => format!("--! keys: 1\n--! flags: {}\n{body}", FLAGS[i].0),
                None => body,
            };
            (name, version, keys, source, flags)
        })
}

/// `Script::new`: a non-empty `[a-z0-9_]` name, a version >= 1, known header flags.
fn script_ok((name, version, _, _, flags): &ScriptInput) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && *version >= 1
        && flags.is_none_or(|i| FLAGS[i].1)
}

/// Shared blocks a script of a library may carry (src/script/shared.rs), and whether
/// `Library::new` accepts them: none, a well-formed block, and one of each refused shape.
const SHARED: [(&str, bool); 8] = [
    ("", true),
    (
        "--! shared: sum\nlocal a, b = 1, 2\n--! end shared: sum\n",
        true,
    ),
    // No end marker.
    ("--! shared: open\nlocal a = 1\n", false),
    // No top-level local.
    ("--! shared: bare\nreturn 1\n--! end shared: bare\n", false),
    // KEYS inside the block.
    (
        "--! shared: keys\nlocal k = KEYS[1]\n--! end shared: keys\n",
        false,
    ),
    // An end marker that closes no block.
    ("--! end shared: none\n", false),
    // A block name that is not [a-z0-9_].
    ("--! shared: Bad\nlocal a = 1\n--! end shared: Bad\n", false),
    // One of the block's locals assigned after it.
    (
        "--! shared: late\nlocal a = 1\n--! end shared: late\na = 2\n",
        false,
    ),
];

/// `(path, contents, shared)` of one file given to `Registry::from_files`: `shared` indexes
/// [`SHARED`] when the file is a script of the registry, `None` when it never is one.
type LibraryFile = (String, String, Option<usize>);

/// `(set name, files)` for `Library::new`.
type LibraryInput = (String, Vec<LibraryFile>);

/// Library names: mostly valid (up to 64 bytes), some empty, too long or with a character
/// outside `[a-z0-9_]`.
fn library_set() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z0-9_]{1,64}",
        1 => Just(String::new()),
        1 => "[a-z0-9_]{65,70}",
        2 => "[a-z0-9_]{0,10}[A-Z .:{-][a-z0-9_]{0,10}",
    ]
}

/// Files of a script set: mostly scripts (few names, so versions and duplicates meet; fixed
/// or variadic keys, some read-only, some with a shared block, well-formed or not), and
/// files that never become scripts (version 0, no `--! keys:` header, not `.lua`).
fn library_file() -> impl Strategy<Value = LibraryFile> {
    let script = (
        "[a-c]{1,2}",
        1u32..=3,
        prop_oneof!["[0-3]", Just("variadic".to_owned())],
        any::<bool>(),
        prop_oneof![4 => Just(0usize), 5 => Just(1usize), 2 => 2..SHARED.len()],
        "return [a-z0-9_ +]{0,20}",
    )
        .prop_map(|(name, version, keys, read_only, shared, body)| {
            let flags = if read_only {
                "--! flags: no-writes\n"
            } else {
                ""
            };
            let source = format!("--! keys: {keys}\n{flags}{}{body}", SHARED[shared].0);
            (format!("{name}.v{version}.lua"), source, Some(shared))
        });
    let never = prop_oneof![
        "[a-c]{1,2}".prop_map(|n| (
            format!("{n}.v0.lua"),
            "--! keys: 1\nreturn 1".to_owned(),
            None
        )),
        "[a-c]{1,2}".prop_map(|n| (format!("{n}.v1.lua"), "return 1".to_owned(), None)),
        "[a-c]{1,2}".prop_map(|n| (
            format!("{n}.v1.txt"),
            "--! keys: 1\nreturn 1".to_owned(),
            None
        )),
    ];
    prop_oneof![4 => script, 1 => never]
}

/// In range: a set name and a few files as above. Random: any name, any file names, any
/// contents that do not start with `-` (so never a `--! keys:` header: never a script).
fn library_input() -> impl Strategy<Value = LibraryInput> {
    let random_file =
        (".{0,30}", "([^-].{0,119})?").prop_map(|(n, c)| (format!("{n}.lua"), c, None));
    prop_oneof![
        4 => (library_set(), proptest::collection::vec(library_file(), 1..5)),
        1 => (".{0,80}", proptest::collection::vec(random_file, 0..6)),
    ]
}

/// `Library::new`: a name of 1..=64 `[a-z0-9_]`, at least one script, every shared block
/// well-formed.
fn library_ok((set, files): &LibraryInput) -> bool {
    (1..=64).contains(&set.len())
        && set
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && files.iter().any(|(_, _, shared)| shared.is_some())
        && files
            .iter()
            .all(|(_, _, shared)| shared.is_none_or(|i| SHARED[i].1))
}

/// Redis URLs (some with a password, whose text must never be shown) and junk.
fn url_like() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (
            proptest::sample::select(vec!["127.0.0.1", "localhost", "redis.example", "[::1]"]),
            any::<u16>(),
            0u8..16,
            proptest::option::of("pw[a-z]{12}"),
        )
            .prop_map(|(host, port, db, pw)| match pw {
                Some(pw) => format!("redis://user:{pw}@{host}:{port}/{db}"),
                None => format!("redis://{host}:{port}/{db}"),
            }),
        1 => "redis://[a-z]{1,8}:[0-9]{5,7}/",
        1 => Just("redis://".to_owned()),
        2 => ".{0,60}",
    ]
}

/// What `Admin` takes a seed for: whatever redis-rs parses as connection info.
fn parses(url: &str) -> bool {
    redis::IntoConnectionInfo::into_connection_info(url).is_ok()
}

fn admin_input() -> impl Strategy<Value = (String, Vec<String>, Duration)> {
    (
        url_like(),
        proptest::collection::vec(url_like(), 0..3),
        any_duration(),
    )
}

fn text_key_like() -> impl Strategy<Value = String> {
    prop_oneof![part_like(), ".{0,400}".boxed()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn replication_accepts_exactly_its_documented_range(
        replicas in replicas(),
        timeout in replication_timeout(),
        (acked, requested) in acked_counts(),
    ) {
        let ok = replicas >= 1 && replication_timeout_ok(timeout);
        let built = Replication::new(replicas, timeout);
        prop_assert_eq!(built.is_ok(), ok, "{:?} {:?}: {:?}", replicas, timeout, built);
        match built {
            Ok(r) => {
                prop_assert_eq!(r.replicas(), replicas);
                prop_assert_eq!(r.timeout(), timeout);
                prop_assert!(!r.is_fsynced() && !r.local_fsync());
                let local = r.with_local_fsync();
                prop_assert!(local.is_fsynced() && local.local_fsync());
                prop_assert_eq!((local.replicas(), local.timeout()), (replicas, timeout));
            }
            Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
        }
        let a = Acked::new((), acked, requested);
        prop_assert_eq!((a.replicas, a.requested, a.local_fsync), (acked, requested, None));
        prop_assert_eq!(a.is_replicated(), acked >= requested);
    }

    #[test]
    fn fsynced_replication_accepts_exactly_its_documented_range(
        replicas in replicas(),
        timeout in replication_timeout(),
        local in any::<bool>(),
    ) {
        let ok = replication_timeout_ok(timeout);
        let built = Replication::fsynced(replicas, timeout);
        prop_assert_eq!(built.is_ok(), ok, "{:?} {:?}: {:?}", replicas, timeout, built);
        match built {
            Ok(r) => {
                prop_assert!(r.is_fsynced() && !r.local_fsync());
                let r = if local { r.with_local_fsync() } else { r };
                prop_assert!(r.is_fsynced());
                prop_assert_eq!(r.local_fsync(), local);
                prop_assert_eq!((r.replicas(), r.timeout()), (replicas, timeout));
            }
            Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
        }
    }

    #[test]
    fn fixed_window_accepts_exactly_its_documented_range(input in fixed_window_input()) {
        let ok = fixed_window_ok(&input);
        let (name, limit, window) = input;
        // A zero limit cannot be a rate: `NonZeroU32` refuses it.
        let Some(nz) = NonZeroU32::new(limit) else {
            prop_assert!(!ok);
            return Ok(());
        };
        let built = Rate::new(nz, window).and_then(|r| FixedWindow::new(&name, r));
        prop_assert_eq!(built.is_ok(), ok, "{:?} {} {:?}", name, limit, window);
        let Ok(l) = built else {
            prop_assert!(is_invalid_input(&built));
            return Ok(());
        };
        let window_ms = u64::try_from(window.as_millis()).unwrap();
        prop_assert_eq!(l.name(), name.as_str());
        prop_assert_eq!(l.limit(), limit);
        prop_assert_eq!(l.window(), Duration::from_millis(window_ms));
        let key = LimitKey::text("u").unwrap();
        let base = format!("redkit:rl:{name}:{{k:u}}");
        prop_assert_eq!(l.redis_key(&key), base.clone());
        // Aligned to the clock: the key ends with the number of the current window.
        let aligned = redkit::rate_limit::AlignedWindow::new(&name, Rate::new(nz, window).unwrap()).unwrap();
        let before = now_ms();
        let key = aligned.redis_key(&key);
        let after = now_ms();
        let number: u64 = key
            .strip_prefix(&format!("{base}:"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("aligned key {key:?}")))?;
        prop_assert!((before / window_ms..=after / window_ms).contains(&number), "{}", key);
    }

    /// The one value that switches group commit on: accepted exactly in its documented
    /// ranges, and read back unchanged from both components that group.
    #[test]
    fn group_commit_settings_are_accepted_exactly_in_their_documented_range(
        max_batch in usize_around(2, GroupCommit::MAX_BATCH),
        in_flight in usize_around(1, GroupCommit::MAX_IN_FLIGHT),
    ) {
        let ok = group_commit_ok(&(max_batch, in_flight));
        let limiter = FixedWindow::new("g", Rate::per_second(redkit::nonzero!(10))).unwrap();
        match GroupCommit::new(max_batch, in_flight) {
            Ok(settings) => {
                prop_assert!(ok);
                prop_assert_eq!(
                    (settings.max_batch(), settings.max_in_flight()),
                    (max_batch, in_flight)
                );
                let l = limiter.grouped(settings);
                prop_assert_eq!(l.group_commit(), settings);
                let inventory = redkit::inventory::Inventory::builder()
                    .prefix("inv")
                    .with_group_commit(settings)
                    .build()
                    .unwrap();
                prop_assert_eq!(inventory.group_commit(), Some(settings));
            }
            Err(e) => {
                let invalid = matches!(e, redkit::Error::InvalidInput { .. });
                prop_assert!(!ok && invalid, "{e}");
            }
        }
    }

    #[test]
    fn coalescing_limits_are_checked_without_panicking(input in coalescing_input()) {
        use redkit::connect::Coalescing;
        let ok = coalescing_ok(&input);
        let (max_batch, in_flight) = input;
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
    fn gcra_accepts_exactly_its_documented_range(input in gcra_input()) {
        let ok = gcra_new_ok(&input);
        let burst = gcra_burst(&input);
        let burst_ok = gcra_burst_ok(&input);
        let (name, rate, period, _) = input;
        let Some(nz) = NonZeroU32::new(rate) else {
            prop_assert!(!ok);
            return Ok(());
        };
        let built = Rate::new(nz, period).and_then(|r| Gcra::new(&name, r));
        prop_assert_eq!(built.is_ok(), ok, "{:?} {} {:?}", name, rate, period);
        let Ok(l) = built else {
            prop_assert!(is_invalid_input(&built));
            return Ok(());
        };
        let interval = gcra_interval_us(rate, period).unwrap();
        prop_assert_eq!(l.name(), name.as_str());
        prop_assert_eq!((l.rate().limit(), l.burst()), (rate, rate));
        prop_assert_eq!(l.rate().period(), Duration::from_micros(u64::try_from(period.as_micros()).unwrap()));
        prop_assert_eq!(l.emission_interval(), Duration::from_micros(interval));
        prop_assert_eq!(
            l.redis_key(&LimitKey::text("u").unwrap()),
            format!("redkit:gcra:{name}:{{k:u}}")
        );
        // The same rate with a burst: only the bucket of that burst must fit (a burst of 0
        // cannot be built: `NonZeroU32`).
        let with = NonZeroU32::new(burst)
            .map(|b| Rate::new(nz, period).and_then(|r| Gcra::bursting(&name, r, b)));
        let accepted = matches!(with, Some(Ok(_)));
        prop_assert_eq!(accepted, burst_ok, "burst {} interval {} us", burst, interval);
        match with {
            Some(Ok(b)) => {
                prop_assert_eq!((b.rate().limit(), b.burst()), (rate, burst));
                prop_assert_eq!(b.emission_interval(), Duration::from_micros(interval));
            }
            Some(Err(e)) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
            None => prop_assert_eq!(burst, 0),
        }
    }

    #[test]
    fn sliding_window_accepts_exactly_its_documented_range(input in sliding_window_input()) {
        let ok = sliding_window_ok(&input);
        let (name, limit, window) = input;
        let Some(nz) = NonZeroU32::new(limit) else {
            prop_assert!(!ok);
            return Ok(());
        };
        let built = Rate::new(nz, window).and_then(|r| SlidingWindow::new(&name, r));
        prop_assert_eq!(built.is_ok(), ok, "{:?} {} {:?}", name, limit, window);
        let Ok(l) = built else {
            prop_assert!(is_invalid_input(&built));
            return Ok(());
        };
        prop_assert_eq!(l.name(), name.as_str());
        prop_assert_eq!(l.limit(), limit);
        prop_assert_eq!(l.window(), Duration::from_millis(u64::try_from(window.as_millis()).unwrap()));
        prop_assert_eq!(
            l.redis_key(&LimitKey::text("u").unwrap()),
            format!("redkit:sw:{name}:{{k:u}}")
        );
    }

    #[test]
    fn limit_keys_accept_exactly_their_documented_length_and_never_contain_braces(
        text in text_key_like(),
        ip in any_ip(),
        prefix in any::<u8>(),
    ) {
        let key = LimitKey::text(&text);
        prop_assert_eq!(key.is_ok(), part_ok(&text), "{} bytes", text.len());
        match key {
            Ok(k) => prop_assert_eq!(k.as_str(), format!("k:{}", escaped(&text))),
            Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
        }
        let k = LimitKey::ip_grouped(ip, prefix);
        prop_assert!(k.as_str().starts_with("ip:"), "{:?}", k.as_str());
        prop_assert!(!k.as_str().contains(['{', '}']), "braces in {:?}", k.as_str());
        // Prefixes above 128 bits are 128; `ip` is the default /64 grouping.
        prop_assert_eq!(&k, &LimitKey::ip_grouped(ip, prefix.min(128)));
        prop_assert_eq!(LimitKey::ip(ip), LimitKey::ip_grouped(ip, redkit::rate_limit::DEFAULT_IPV6_PREFIX));
    }

    /// Accepts exactly a non-empty `[a-z0-9_]` name, a version >= 1 and known header flags;
    /// reports the SHA1 of the body (as Redis computes it), the key count given (1 for a
    /// variadic script) and the read-only flag.
    #[test]
    fn script_constructor_accepts_exactly_valid_scripts_and_reports_their_sha1(
        input in script_input(),
    ) {
        let ok = script_ok(&input);
        let (name, version, keys, source, flags) = input;
        let read_only = flags.is_some_and(|i| FLAGS[i].2);
        // redis-rs's own hash of the source, as it sends EVALSHA.
        let sha1 = redis::Script::new(&source).get_hash().to_owned();
        let fixed = Script::new(&name, version, keys, &source);
        let variadic = Script::new_variadic(&name, version, &source);
        prop_assert_eq!(fixed.is_ok(), ok, "{:?}", fixed.as_ref().err());
        prop_assert_eq!(variadic.is_ok(), ok, "{:?}", variadic.as_ref().err());
        match (fixed, variadic) {
            (Ok(f), Ok(v)) => {
                for s in [&f, &v] {
                    prop_assert_eq!(s.name(), name.as_str());
                    prop_assert_eq!(s.version(), version);
                    prop_assert_eq!(s.id(), format!("{name}.v{version}"));
                    prop_assert_eq!(s.sha1(), sha1.as_str());
                    prop_assert_eq!(s.source(), source.as_str());
                    prop_assert_eq!(s.is_read_only(), read_only);
                }
                prop_assert_eq!((f.key_count(), f.is_variadic()), (keys, false));
                prop_assert_eq!((v.key_count(), v.is_variadic()), (1, true));
            }
            (f, v) => {
                prop_assert!(is_invalid_input(&f), "{:?}", f.err());
                prop_assert!(is_invalid_input(&v), "{:?}", v.err());
            }
        }
    }

    /// Accepts exactly a valid name, a set with a script and well-formed shared blocks. The
    /// library is `<set>_<8 hex digits>`, the digits the set's alone (the same scripts under
    /// another name: the same digits); one function per script, `<library>_<script>_v<N>`
    /// (a body given twice: the first script's), flagged `no-writes` when read-only, running
    /// the body unchanged, or with its shared block replaced by a call of one shared function.
    #[test]
    fn library_constructor_accepts_exactly_valid_sets_and_names_one_function_per_script(
        input in library_input(),
        backend in prop_oneof![Just(Backend::Scripts), Just(Backend::Functions)],
    ) {
        let ok = library_ok(&input);
        let (set, files) = input;
        let registry = Registry::from_files(files.iter().map(|(n, c, _)| (n.clone(), c.clone())));
        let built = Library::new(&set, &registry);
        prop_assert_eq!(built.is_ok(), ok, "{:?} {:?}", set, built.as_ref().err());
        let library = match built {
            Ok(library) => library,
            Err(e) => {
                prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                return Ok(());
            }
        };
        let name = library.name().to_owned();
        let hash = name
            .strip_prefix(&format!("{set}_"))
            .ok_or_else(|| TestCaseError::fail(format!("library {name:?} of set {set:?}")))?;
        prop_assert!(
            hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{}", name
        );
        let code = library.code();
        prop_assert!(code.starts_with(&format!("#!lua name={name}\n")), "{}", code);
        prop_assert_eq!(library.functions(), registry.scripts().len());
        let renamed = Library::new("other", &registry).unwrap();
        prop_assert_eq!(renamed.name(), format!("other_{hash}"));
        let again = Library::new(&set, &registry).unwrap();
        prop_assert_eq!(again.code(), code);
        for script in registry.scripts() {
            let first = registry.scripts().iter().find(|s| s.sha1() == script.sha1()).unwrap();
            let function = format!("{name}_{}_v{}", first.name(), first.version());
            prop_assert_eq!(library.function_name(script), Some(function.as_str()));
            let flags = if first.is_read_only() { "{'no-writes'}" } else { "{}" };
            prop_assert!(
                code.contains(&format!("function_name='{function}', flags={flags}, ")),
                "{} {}\n{}", function, flags, code
            );
            if !script.source().contains("--! shared:") {
                let body = format!("callback=function(KEYS, ARGV)\n{}\nend}}", script.source());
                prop_assert!(code.contains(&body), "{:?} not in\n{}", script.source(), code);
            }
        }
        // The well-formed block: defined once, called by each script that carries it.
        let carrying = registry
            .scripts()
            .iter()
            .filter(|s| s.source().contains(SHARED[1].0))
            .count();
        prop_assert_eq!(
            code.matches("local function redkit_shared_sum_").count(),
            usize::from(carrying > 0),
            "{}", code
        );
        prop_assert_eq!(code.matches("local a, b = redkit_shared_sum_").count(), carrying, "{}", code);
        prop_assert!(!code.contains(SHARED[1].0), "{}", code);
        let manager = ScriptManager::new().with_library(library).with_backend(backend);
        prop_assert_eq!(manager.backend(), backend);
    }

    /// `Admin::single` takes exactly what redis-rs parses as connection info, `cluster`
    /// exactly a non-empty list of such seeds; `Debug` shows the mode and the timeout set,
    /// never a password.
    #[test]
    fn admin_constructors_accept_exactly_parseable_seeds(input in admin_input()) {
        let (url, seeds, timeout) = input;
        let passwords: Vec<&str> = std::iter::once(&url)
            .chain(&seeds)
            .filter_map(|u| u.split_once(":pw").and_then(|(_, rest)| rest.get(..12)))
            .collect();
        let single = Admin::single(url.as_str());
        prop_assert_eq!(single.is_ok(), parses(&url), "{:?}", url);
        if let Ok(a) = single {
            let shown = format!("{:?}", a.with_timeout(timeout));
            prop_assert!(shown.contains("cluster: false"), "{}", shown);
            prop_assert!(shown.contains(&format!("timeout: {timeout:?}")), "{}", shown);
            for pw in &passwords {
                prop_assert!(!shown.contains(pw), "{}", shown);
            }
        }
        let cluster = Admin::cluster(seeds.iter().map(String::as_str));
        let ok = !seeds.is_empty() && seeds.iter().all(|s| parses(s));
        prop_assert_eq!(cluster.is_ok(), ok, "{:?}", seeds);
        match cluster {
            Ok(a) => {
                let shown = format!("{:?}", a.with_timeout(timeout));
                prop_assert!(shown.contains("cluster: true"), "{}", shown);
                prop_assert!(shown.contains(&format!("timeout: {timeout:?}")), "{}", shown);
                for pw in &passwords {
                    prop_assert!(!shown.contains(pw), "{}", shown);
                }
            }
            Err(e) if seeds.is_empty() => {
                prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}")
            }
            Err(_) => {}
        }
    }
}

mod middleware {
    use super::*;
    use ipnet::IpNet;
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

    /// One trusted-proxy entry as text, and the network it stands for (`None`: none).
    pub(crate) type CidrEntry = (String, Option<IpNet>);

    /// `ip` as the limiter sees it: an IPv4-mapped IPv6 address is its IPv4 address.
    fn canonical(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        }
    }

    /// `text` as the notation reads it: a network, or a bare address (that one host).
    fn reads(text: &str) -> Option<IpNet> {
        let text = text.trim();
        text.parse::<IpNet>()
            .ok()
            .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
    }

    /// Networks as documented (`a.b.c.d/p`, `<ipv6>/p`, host bits set or not; a bare address,
    /// that one host), prefixes just past the longest, text with a letter no address has
    /// (`g` to `z`), and any text (its network, if any, as the notation reads it).
    fn cidr_entry() -> impl Strategy<Value = CidrEntry> {
        let net = |ip: IpAddr, p: u8| (format!("{ip}/{p}"), IpNet::new(ip, p).ok());
        prop_oneof![
            3 => (any::<[u8; 4]>(), 0u8..=32).prop_map(move |(a, p)| net(a.into(), p)),
            2 => (any::<[u8; 16]>(), 0u8..=128).prop_map(move |(a, p)| net(a.into(), p)),
            2 => any_ip().prop_map(|ip| (ip.to_string(), Some(IpNet::from(ip)))),
            1 => (any::<[u8; 4]>(), 33u8..=40).prop_map(move |(a, p)| net(a.into(), p)),
            1 => (any::<[u8; 16]>(), 129u8..=255).prop_map(move |(a, p)| net(a.into(), p)),
            1 => ("[0-9a-f:./]{0,12}", "[g-z]", "[0-9a-f:./]{0,12}")
                .prop_map(|(a, z, b)| (format!("{a}{z}{b}"), None)),
        ]
    }

    /// In range: one to three entries as above. Random: up to three texts of any characters
    /// (an empty list among them: accepted, trusting no one).
    pub(crate) fn cidr_entries() -> impl Strategy<Value = Vec<CidrEntry>> {
        let random = ".{0,40}".prop_map(|t: String| {
            let net = reads(&t);
            (t, net)
        });
        prop_oneof![
            3 => proptest::collection::vec(cidr_entry(), 1..4),
            1 => proptest::collection::vec(random, 0..4),
        ]
    }

    /// `TrustedProxies::parse_cidrs`: every entry a network; `Some(networks)` when accepted.
    pub(crate) fn cidrs_model(entries: &[CidrEntry]) -> Option<Vec<IpNet>> {
        entries.iter().map(|(_, net)| *net).collect()
    }

    /// Where an address of a request lies: `(where, network, host bits, any address)`, read by
    /// [`address`].
    pub(crate) type Pick = (u8, proptest::sample::Index, u128, IpAddr);

    /// The picks of a request's peer, farther hop and nearer hop.
    pub(crate) type Picks = (Pick, Pick, Pick);

    pub(crate) fn pick() -> impl Strategy<Value = Pick> {
        (
            prop_oneof![4 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8), 2 => Just(3u8)],
            any::<proptest::sample::Index>(),
            any::<u128>(),
            any_ip(),
        )
    }

    /// 0: inside one of `nets`; 1: just past its last address (wrapping); 2: inside, written
    /// as an IPv4-mapped IPv6 address when the network is IPv4; 3, or no network: anywhere.
    pub(crate) fn address(&(at, network, bits, any): &Pick, nets: &[IpNet]) -> IpAddr {
        if nets.is_empty() || at == 3 {
            return any;
        }
        let net = nets[network.index(nets.len())];
        let (first, host, last) = match net {
            IpNet::V4(n) => (
                u128::from(u32::from(n.network())),
                u128::from(u32::from(n.hostmask())),
                u128::from(u32::from(n.broadcast())),
            ),
            IpNet::V6(n) => (
                u128::from(n.network()),
                u128::from(n.hostmask()),
                u128::from(n.broadcast()),
            ),
        };
        let value = if at == 1 {
            last.wrapping_add(1)
        } else {
            first | (bits & host)
        };
        match net {
            IpNet::V4(_) => {
                let v4 = std::net::Ipv4Addr::from(value as u32);
                if at == 2 {
                    IpAddr::V6(v4.to_ipv6_mapped())
                } else {
                    IpAddr::V4(v4)
                }
            }
            IpNet::V6(_) => IpAddr::V6(value.into()),
        }
    }

    /// Whether the limiter trusts `ip` as a proxy of `nets`.
    pub(crate) fn trusted(nets: &[IpNet], ip: IpAddr) -> bool {
        let ip = canonical(ip);
        nets.iter().any(|n| n.contains(&ip))
    }

    /// The client of a request from `peer` with `X-Forwarded-For: far, near`, trusting
    /// `nets` (see `TrustedProxies`): the peer unless trusted; else the first untrusted hop
    /// from the right, or the left-most when all are trusted.
    pub(crate) fn client(nets: &[IpNet], peer: IpAddr, far: IpAddr, near: IpAddr) -> IpAddr {
        if !trusted(nets, peer) {
            peer
        } else if trusted(nets, near) {
            far
        } else {
            near
        }
    }

    /// One fixed-window policy: `(name, limit, window)`.
    pub(crate) type Spec = (String, u32, Duration);
    /// A route: `(path, policy)`.
    pub(crate) type Route = (String, Spec);

    /// Few names, limits and windows, so routes share names (with the same or another
    /// configuration) and paths (also with a trailing `/`).
    fn spec() -> impl Strategy<Value = Spec> {
        (
            prop_oneof![
                6 => proptest::sample::select(vec!["a", "b", "d"]).prop_map(str::to_owned),
                1 => Just("x y".to_owned()),
            ],
            prop_oneof![1 => Just(0u32), 6 => Just(5u32), 2 => Just(7u32)],
            prop_oneof![
                1 => Just(Duration::ZERO),
                1 => Just(Duration::from_micros(999)),
                8 => Just(Duration::from_secs(1)),
                2 => Just(Duration::from_secs(60)),
                1 => Just(FixedWindow::MAX_WINDOW),
                1 => Just(FixedWindow::MAX_WINDOW + MS),
            ],
        )
    }

    /// A policy whose limit and window depend on its name only: reusing it never clashes.
    fn consistent_spec() -> impl Strategy<Value = Spec> {
        proptest::sample::select(vec![("a", 5u32, 1u64), ("b", 7, 60), ("d", 5, 2)])
            .prop_map(|(n, l, s)| (n.to_owned(), l, Duration::from_secs(s)))
    }

    pub(crate) fn policies_input() -> impl Strategy<Value = (Spec, Vec<Route>)> {
        let path = prop_oneof![
            8 => proptest::sample::select(vec!["/", "/a", "/a/", "/a/b", "/b", "/bb"]),
            1 => proptest::sample::select(vec!["a", ""]),
        ];
        let route_spec = prop_oneof![3 => consistent_spec(), 1 => spec()];
        (
            prop_oneof![consistent_spec(), spec()],
            proptest::collection::vec((path.prop_map(str::to_owned), route_spec), 0..4),
        )
    }

    fn spec_ok((name, limit, window): &Spec) -> bool {
        // PolicySpec keeps whole milliseconds.
        let window = Duration::from_millis(u64::try_from(window.as_millis()).unwrap());
        fixed_window_ok(&(name.clone(), *limit, window))
    }

    /// What `Policies::from_config` documents: every policy valid, route paths starting with
    /// `/` (a trailing `/` is dropped) and given once, a name never reused with another limit
    /// or window. `Some(routes)` (with normalized paths) when accepted.
    pub(crate) fn policies_model((default, routes): &(Spec, Vec<Route>)) -> Option<Vec<Route>> {
        if !spec_ok(default) {
            return None;
        }
        let same =
            |a: &Spec, b: &Spec| a.0 != b.0 || (a.1 == b.1 && a.2.as_millis() == b.2.as_millis());
        let mut accepted: Vec<Route> = Vec::new();
        for (path, spec) in routes {
            if !spec_ok(spec) || !path.starts_with('/') {
                return None;
            }
            let path = if path.len() > 1 {
                path.trim_end_matches('/')
            } else {
                path
            };
            if accepted.iter().any(|(p, _)| p == path)
                || !same(default, spec)
                || accepted.iter().any(|(_, s)| !same(s, spec))
            {
                return None;
            }
            accepted.push((path.to_owned(), spec.clone()));
        }
        Some(accepted)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any hop count, any trusted-proxy text, any headers: never a panic. `parse_cidrs`
        /// accepts exactly a list of networks (a bare address: that host) and refuses naming
        /// the first other entry; the proxies it gives trust exactly those networks: a
        /// request from an untrusted peer is the peer's, from a trusted one the first
        /// untrusted hop's from the right (the left-most when every hop is trusted).
        #[test]
        fn trusted_proxies_never_panic_and_trust_exactly_the_networks_given(
            hops in prop_oneof![Just(usize::MAX), Just(usize::MAX - 1), any::<usize>(), 0usize..8],
            entries in cidr_entries(),
            values in proptest::collection::vec("[0-9a-fA-F:.,\\[\\] ;=\"forFOR]{0,80}", 0..4),
            peer_ip in any_ip(),
            port in any::<u16>(),
            forwarded in any::<bool>(),
            picks in (pick(), pick(), pick()),
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
            // No peer: no client, never a guess from client-controlled headers.
            let bare = request(name, &values, None);
            prop_assert_eq!(TrustedProxies::hops(hops).extract(&RequestInfo::new(&bare)), None);

            let expected = cidrs_model(&entries);
            let by_cidr = TrustedProxies::parse_cidrs(entries.iter().map(|(text, _)| text));
            prop_assert_eq!(by_cidr.is_ok(), expected.is_some(), "{:?}", entries);
            let (by_cidr, nets) = match (by_cidr, expected) {
                (Ok(p), Some(nets)) => (p, nets),
                (Err(e), _) => {
                    let (bad, _) = entries.iter().find(|(_, net)| net.is_none()).unwrap();
                    let named = format!("{:?}", bad.trim());
                    prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                    prop_assert!(e.to_string().contains(&named), "{} does not name {}", e, named);
                    return Ok(());
                }
                (Ok(_), None) => unreachable!(),
            };
            prop_assert!(matches!(by_cidr.clone().header(kind).extract(&info), Some(ClientId::Ip(_))));
            prop_assert_eq!(by_cidr.extract(&RequestInfo::new(&bare)), None);
            let (peer, far, near) = (
                address(&picks.0, &nets),
                address(&picks.1, &nets),
                address(&picks.2, &nets),
            );
            let req = request(
                "x-forwarded-for",
                &[format!("{far}, {near}")],
                Some(SocketAddr::new(peer, port)),
            );
            prop_assert_eq!(
                by_cidr.extract(&RequestInfo::new(&req)),
                Some(ClientId::Ip(client(&nets, peer, far, near))),
                "peer {} far {} near {} nets {:?}", peer, far, near, nets
            );
        }

        /// Builds exactly the configurations `Policies::from_config` documents as valid, and
        /// each route's path (and paths below it) then gets the route's limiter; other paths
        /// get the default (or the `/` route).
        #[test]
        fn policies_accept_exactly_valid_configs_and_route_by_path(input in policies_input()) {
            let expected = policies_model(&input);
            let (default, routes) = input;
            // As configuration: any limit and window, valid or not (a `Rate` refuses invalid
            // ones; a zero limit is refused when the configuration is read: `NonZeroU32`).
            let spec = |(n, l, w): &Spec| -> Option<PolicySpec> {
                let window_ms = u64::try_from(w.as_millis()).unwrap_or(u64::MAX);
                let read = serde_json::from_value::<PolicySpec>(
                    serde_json::json!({"name": n, "limit": l, "window_ms": window_ms}),
                );
                assert_eq!(read.is_err(), *l == 0, "{read:?}");
                read.ok()
            };
            let read = || -> Option<PolicyConfig> {
                let mut config = PolicyConfig::new(spec(&default)?);
                for (path, s) in &routes {
                    config = config.route(path.clone(), spec(s)?);
                }
                Some(config)
            };
            let Some(config) = read() else {
                prop_assert!(expected.is_none());
                return Ok(());
            };
            let built = Policies::from_config(&config);
            prop_assert_eq!(built.is_ok(), expected.is_some(), "{:?}", built.as_ref().err());
            let (Ok(p), Some(accepted)) = (built, expected) else {
                return Ok(());
            };
            let window = |w: &Duration| Duration::from_millis(u64::try_from(w.as_millis()).unwrap());
            for (path, (name, limit, w)) in &accepted {
                for probe in [path.clone(), format!("{}/x", path.trim_end_matches('/'))] {
                    let l = p.for_path(&probe);
                    prop_assert_eq!(
                        (l.name(), l.limit(), l.window()),
                        (name.as_str(), *limit, window(w)),
                        "{}", probe
                    );
                }
            }
            let fallback = accepted
                .iter()
                .find(|(path, _)| path == "/")
                .map_or(&default, |(_, s)| s);
            let l = p.for_path("/zz");
            prop_assert_eq!(
                (l.name(), l.limit(), l.window()),
                (fallback.0.as_str(), fallback.1, window(&fallback.2))
            );
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

    /// The number of keys a call passes against the count it declared: the same mostly, one
    /// fewer or one more.
    fn near(declared: usize) -> impl Strategy<Value = usize> {
        prop_oneof![
            3 => Just(declared),
            1 => Just(declared.saturating_sub(1)),
            1 => Just(declared + 1),
        ]
    }

    /// `(declared, keys, args, misorder)`: a variadic call declaring `declared` keys, passing
    /// `keys` keys and `args`, with one argument before the keys when `misorder`.
    pub(crate) type VariadicInput = (usize, usize, Vec<i64>, bool);

    /// Random: any declared count, up to 7 keys, misordered half the time. In range: a count
    /// of 1..=16 with as many keys (or one fewer or more), rarely misordered.
    pub(crate) fn variadic_input() -> impl Strategy<Value = VariadicInput> {
        let args = || proptest::collection::vec(any::<i64>(), 0..8);
        prop_oneof![
            1 => (any_count(), 0usize..8, args(), any::<bool>()),
            2 => (1usize..=16)
                .prop_flat_map(move |d| (Just(d), near(d), args(), proptest::bool::weighted(0.2))),
        ]
    }

    /// `Call::validate` of a variadic call: keys before arguments, 1..=MAX_KEYS declared and
    /// passed.
    pub(crate) fn variadic_ok((declared, keys, _, misorder): &VariadicInput) -> bool {
        !misorder && (1..=Call::MAX_KEYS).contains(declared) && keys == declared
    }

    /// `(script keys, declared, key, arg)`: a fixed script of `script keys` keys, a call
    /// declaring `declared` and passing as many keys as both allow, of any bytes.
    pub(crate) type FixedInput = (usize, usize, Vec<u8>, Vec<u8>);

    /// Random: any declared count. In range: the script's count, one fewer or one more.
    pub(crate) fn fixed_input() -> impl Strategy<Value = FixedInput> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..64);
        prop_oneof![
            (0usize..4, any_count(), bytes(), bytes()),
            (0usize..4).prop_flat_map(move |k| (Just(k), near(k), bytes(), bytes())),
        ]
    }

    /// `Call::validate` of a fixed script's call: exactly the script's count declared.
    pub(crate) fn fixed_ok((script_keys, declared, ..): &FixedInput) -> bool {
        declared == script_keys && *declared <= Call::MAX_KEYS
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any declared count with any (small) number of keys and args: building never
        /// panics, and validation accepts exactly what the script and the cap allow. An
        /// accepted call holds the keys and arguments given; a refused one says why: a key
        /// after an argument, or the count expected against the count got.
        #[test]
        fn variadic_calls_never_panic_and_validate_exactly(input in variadic_input()) {
            let ok = variadic_ok(&input);
            let (declared, keys, args, misorder) = input;
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
            let validated = call.validate();
            prop_assert_eq!(validated.is_ok(), ok, "{:?}", validated);
            match validated {
                Ok(()) => {
                    prop_assert_eq!(call.script().sha1(), v.sha1());
                    prop_assert_eq!(
                        format!("{call:?}"),
                        format!("Call {{ script: \"v.v1\", keys: {keys}, args: {} }}", args.len())
                    );
                }
                // A key after an argument (misordered without keys: no key came after it).
                Err(Error::InvalidInput { .. }) => prop_assert!(misorder && keys > 0),
                Err(Error::KeyCount { script, expected, got }) => {
                    prop_assert!(!misorder || keys == 0);
                    prop_assert_eq!(script, "v.v1");
                    let counts = if declared > Call::MAX_KEYS {
                        (Call::MAX_KEYS, declared)
                    } else if declared == 0 {
                        (1, 0)
                    } else {
                        (declared, keys)
                    };
                    prop_assert_eq!((expected, got), counts);
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }

        /// Fixed scripts: only the declared count passes; keys and args of any bytes.
        #[test]
        fn fixed_calls_never_panic(input in fixed_input()) {
            let ok = fixed_ok(&input);
            let (script_keys, declared, key, arg) = input;
            let s = Script::new("f", 1, script_keys, "return 1").unwrap();
            let mut call = Call::with_key_count(&s, declared);
            for _ in 0..script_keys.min(declared) {
                call.key(&key);
            }
            call.arg(&arg[..]).arg(u64::MAX).arg(i64::MIN).arg(f64::NAN);
            let validated = call.validate();
            prop_assert_eq!(validated.is_ok(), ok, "{:?}", validated);
            match validated {
                Ok(()) => prop_assert_eq!(
                    format!("{call:?}"),
                    format!("Call {{ script: \"f.v1\", keys: {script_keys}, args: 4 }}")
                ),
                Err(Error::KeyCount { expected, got, .. }) => {
                    let counts = if declared > Call::MAX_KEYS {
                        (Call::MAX_KEYS, declared)
                    } else {
                        (script_keys, declared)
                    };
                    prop_assert_eq!((expected, got), counts);
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
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

    /// Every setting of a `LockOptions`: ttl, retries, retry delay, jitter, max wait, drift,
    /// token, fencing.
    pub(crate) type Parts = (
        Duration,
        u32,
        Duration,
        Duration,
        Option<Duration>,
        Option<Duration>,
        Option<String>,
        bool,
    );

    pub(crate) fn default_parts() -> Parts {
        (
            redkit::lock::limits::DEFAULT_TTL,
            redkit::lock::limits::DEFAULT_RETRIES,
            redkit::lock::limits::DEFAULT_RETRY_DELAY,
            redkit::lock::limits::DEFAULT_JITTER,
            None,
            None,
            None,
            false,
        )
    }

    /// A duration: the default of the setting or any other.
    fn or_default(default: Duration) -> impl Strategy<Value = Duration> {
        prop_oneof![Just(default), any_duration()]
    }

    pub(crate) fn any_parts() -> impl Strategy<Value = Parts> {
        (
            or_default(redkit::lock::limits::DEFAULT_TTL),
            prop_oneof![Just(redkit::lock::limits::DEFAULT_RETRIES), any::<u32>()],
            or_default(redkit::lock::limits::DEFAULT_RETRY_DELAY),
            or_default(redkit::lock::limits::DEFAULT_JITTER),
            proptest::option::of(any_duration()),
            proptest::option::of(any_duration()),
            proptest::option::of(".{0,200}"),
            any::<bool>(),
        )
    }

    /// Settings for the setters: the defaults a quarter of the time (so options equal to the
    /// default are compared), else [`any_parts`].
    pub(crate) fn setter_parts() -> impl Strategy<Value = Parts> {
        prop_oneof![1 => Just(default_parts()), 3 => any_parts()]
    }

    fn build(parts: &Parts) -> LockOptions<Lock> {
        let (ttl, retries, delay, jitter, max_wait, drift, token, fencing) = parts.clone();
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
    }

    fn other(d: Duration) -> Duration {
        d.checked_add(NS).unwrap_or_else(|| d - NS)
    }

    /// `parts` with setting `i` changed to another value.
    fn changed(parts: &Parts, i: usize) -> Parts {
        let mut p = parts.clone();
        match i {
            0 => p.0 = other(p.0),
            1 => p.1 = p.1.wrapping_add(1),
            2 => p.2 = other(p.2),
            3 => p.3 = other(p.3),
            4 => p.4 = p.4.map_or(Some(Duration::ZERO), |w| Some(other(w))),
            5 => {
                p.5 = if p.5.is_some() {
                    None
                } else {
                    Some(Duration::ZERO)
                }
            }
            6 => {
                p.6 =
                    p.6.take()
                        .map_or(Some(String::new()), |t| Some(format!("{t}x")))
            }
            _ => p.7 = !p.7,
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn lock_options_setters_never_panic_and_debug_hides_the_token(
            parts in setter_parts(),
            token in "[a-z]{16,40}",
        ) {
            let options = build(&parts);
            // The drift allowance: as set, else 1 % of the ttl + DRIFT_FLOOR.
            let expected = parts
                .5
                .unwrap_or_else(|| (parts.0 / 100).saturating_add(redkit::lock::limits::DRIFT_FLOOR));
            prop_assert_eq!(options.drift_allowance(), expected);
            let with = options.clone().token(token.clone());
            let shown = format!("{with:?}");
            prop_assert!(!shown.contains(&token), "{}", shown);
            prop_assert!(shown.contains("<redacted>"), "{}", shown);
            prop_assert_eq!(LockOptions::default() == options, parts == default_parts());
            // Fencing is a switch: it changes nothing else (drift, equality of the rest).
            let on = options.clone().fencing(true);
            let off = options.clone().fencing(false);
            prop_assert_eq!(on.drift_allowance(), off.drift_allowance());
            prop_assert!(on != off);
            prop_assert_eq!(on.fencing(false), off);
        }

        /// Two options are equal exactly when every setting is: changing any one of them
        /// makes them differ.
        #[test]
        fn lock_options_are_equal_exactly_when_every_setting_is(
            parts in any_parts(),
            change in proptest::option::of(0usize..8),
        ) {
            let b = change.map_or_else(|| parts.clone(), |i| changed(&parts, i));
            prop_assert_eq!(build(&parts) == build(&b), change.is_none(), "{:?}", change);
        }

        /// `with_prefix` accepts exactly a valid prefix; `key` exactly a resource of
        /// 1..=256 bytes, as `<prefix>:{<escaped resource>}`, and the fence key is in its slot.
        #[test]
        fn lock_constructors_accept_exactly_valid_prefixes_and_resources(
            prefix in prefix_like(),
            resource in part_like(),
            f in any::<u64>(),
            g in any::<u64>(),
        ) {
            let lock = Prefix::new(&prefix).map(|p| Lock::new().with_prefix(p));
            prop_assert_eq!(lock.is_ok(), prefix_ok(&prefix), "{:?}", prefix);
            let lock = match lock {
                Ok(lock) => {
                    prop_assert_eq!(lock.prefix(), prefix.as_str());
                    lock
                }
                Err(e) => {
                    prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                    Lock::new()
                }
            };
            let key = lock.key(&resource);
            prop_assert_eq!(key.is_ok(), part_ok(&resource), "{} bytes", resource.len());
            prop_assert_eq!(lock.fence_key(&resource).is_ok(), part_ok(&resource));
            if let Ok(k) = key {
                prop_assert_eq!(&k, &format!("{}:{{{}}}", lock.prefix(), escaped(&resource)));
                let fk = lock.fence_key(&resource).unwrap();
                prop_assert_eq!(&fk, &format!("{k}:fence"));
                let slot = |k: &str| redis::cluster_routing::Slot::for_key(k.as_bytes());
                prop_assert_eq!(slot(&k), slot(&fk));
            }
            let none: Vec<redis::aio::MultiplexedConnection> = Vec::new();
            prop_assert!(Redlock::new(none).is_err());
            // Zero is never a token; every other value is, ordered and printed as the number.
            prop_assert_eq!(FencingToken::new(f).is_none(), f == 0);
            if let (Some(a), Some(b)) = (FencingToken::new(f), FencingToken::new(g)) {
                prop_assert_eq!(a < b, f < g);
                prop_assert_eq!(a.get(), f);
                prop_assert_eq!(a.to_string(), f.to_string());
            }
        }
    }

    #[test]
    fn default_options_are_the_documented_defaults() {
        assert_eq!(LockOptions::<Lock>::default(), LockOptions::new());
        assert_eq!(build(&default_parts()), LockOptions::default());
        assert_eq!(
            LockOptions::<Lock>::default().drift_allowance(),
            redkit::lock::limits::DEFAULT_TTL / 100 + redkit::lock::limits::DRIFT_FLOOR
        );
    }
}

/// Inventory section: prefixes, retention, store ids, SKUs and quantities of any shape.
mod inventory {
    use super::*;
    use redkit::inventory::Inventory;

    /// `(prefix, retention, store, sku, quantity)`.
    pub(crate) type Input = (String, Duration, String, String, u64);

    pub(crate) fn input() -> impl Strategy<Value = Input> {
        (
            prefix_like(),
            duration_around(MS, Inventory::MAX_RETENTION),
            part_like(),
            part_like(),
            u64_around(1, Inventory::MAX_QUANTITY),
        )
    }

    /// `build` documents a valid prefix and a retention of 1 ms ..= MAX_RETENTION.
    pub(crate) fn built_ok((prefix, retention, ..): &Input) -> bool {
        prefix_ok(prefix) && (MS..=Inventory::MAX_RETENTION).contains(retention)
    }

    /// Every step accepted: the inventory, the store, the SKU and the quantity.
    pub(crate) fn line_ok(input: &Input) -> bool {
        let (_, _, store, sku, quantity) = input;
        built_ok(input)
            && part_ok(store)
            && part_ok(sku)
            && (1..=Inventory::MAX_QUANTITY).contains(quantity)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn constructors_accept_exactly_their_documented_range_and_keep_keys_in_one_slot(
            input in input(),
        ) {
            let ok = built_ok(&input);
            let line_ok = line_ok(&input);
            let (prefix, retention, store, sku, quantity) = input;
            let built = Inventory::builder().prefix(&prefix).retention(retention).build();
            prop_assert_eq!(built.is_ok(), ok, "{:?} {:?}", prefix, retention);
            let inventory = match built {
                Ok(i) => i,
                Err(e) => {
                    prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                    return Ok(());
                }
            };
            prop_assert_eq!(
                inventory.retention(),
                Duration::from_millis(u64::try_from(retention.as_millis()).unwrap())
            );
            let s = inventory.store(&store);
            prop_assert_eq!(s.is_ok(), part_ok(&store), "{} bytes", store.len());
            let Ok(s) = s else { return Ok(()) };
            prop_assert_eq!(s.id(), store.as_str());
            let base = format!("{prefix}:{{{}}}", escaped(&store));
            let stock = s.key(&sku);
            prop_assert_eq!(stock.is_ok(), part_ok(&sku), "{} bytes", sku.len());
            let line = s.line(&sku, quantity);
            prop_assert_eq!(line.is_ok(), line_ok, "{:?} {}", sku, quantity);
            if let Ok(line) = line {
                prop_assert_eq!((line.sku(), line.quantity()), (sku.as_str(), quantity));
            }
            if let Ok(stock) = stock {
                prop_assert_eq!(&stock, &format!("{base}:sku:{}", escaped(&sku)));
                let reservation = s.reservation_key(&sku).unwrap();
                prop_assert_eq!(&reservation, &format!("{base}:resv:{}", escaped(&sku)));
                // Every key of a store hashes to the store's slot.
                let slot = |k: &str| redis::cluster_routing::Slot::for_key(k.as_bytes());
                prop_assert_eq!(slot(&stock), slot(&base));
                prop_assert_eq!(slot(&stock), slot(&s.request_key("r").unwrap()));
                prop_assert_eq!(slot(&stock), slot(&reservation));
            }
        }
    }
}

mod coordination {
    use super::*;
    use redkit::lock::{FairLock, Owner, ReentrantLock, RwLock, Semaphore, WaiterLease};
    use redkit::versioned::{RetryPolicy, Snapshot, Versioned};

    /// FairLock's waiter lease: 30 ms ..= `redkit::lock::limits::MAX_TTL`.
    pub(crate) const MIN_WAITER_LEASE: Duration = Duration::from_millis(30);

    pub(crate) fn waiter_lease() -> BoxedStrategy<Duration> {
        duration_around(MIN_WAITER_LEASE, redkit::lock::limits::MAX_TTL)
    }

    pub(crate) fn waiter_lease_ok(lease: Duration) -> bool {
        (MIN_WAITER_LEASE..=redkit::lock::limits::MAX_TTL).contains(&lease)
    }

    /// Owner tokens: 16..=128 bytes accepted; lengths around both ends, some multi-byte.
    pub(crate) fn owner_token() -> impl Strategy<Value = String> {
        prop_oneof![
            (14usize..=18).prop_map(|n| "t".repeat(n)),
            (126usize..=130).prop_map(|n| "t".repeat(n)),
            (0usize..=200).prop_map(|n| "t".repeat(n)),
            ".{4,50}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Every coordination type accepts exactly a valid prefix and a resource of
        /// 1..=256 bytes, keyed `<prefix>:{<escaped resource>}`; FairLock's waiter lease
        /// exactly 30 ms ..= MAX_TTL; an owner token exactly 16..=128 bytes.
        #[test]
        fn coordination_constructors_accept_exactly_their_documented_range(
            prefix in prefix_like(),
            name in part_like(),
            lease in waiter_lease(),
            token in owner_token(),
            attempts in prop_oneof![Just(0u32), any::<u32>()],
            first in any_duration(),
            max in any_duration(),
        ) {
            let keys = [
                ("semaphore", Prefix::new(&prefix).and_then(|p| Semaphore::new().with_prefix(p).key(&name))),
                ("versioned", Prefix::new(&prefix).and_then(|p| Versioned::new().with_prefix(p).key(&name))),
                ("rw", Prefix::new(&prefix).and_then(|p| RwLock::new().with_prefix(p).key(&name))),
                ("reentrant", Prefix::new(&prefix).and_then(|p| ReentrantLock::new().with_prefix(p).key(&name))),
                ("fair", Prefix::new(&prefix).and_then(|p| FairLock::new().with_prefix(p).key(&name))),
            ];
            let ok = prefix_ok(&prefix) && part_ok(&name);
            let expected = format!("{prefix}:{{{}}}", escaped(&name));
            for (what, key) in keys {
                prop_assert_eq!(key.is_ok(), ok, "{}: {:?} {} bytes", what, prefix, name.len());
                match key {
                    Ok(key) => {
                        prop_assert_eq!(&key, &expected, "{}", what);
                        prop_assert_eq!(key.matches('{').count(), 1, "{}", key);
                        prop_assert_eq!(key.matches('}').count(), 1, "{}", key);
                        prop_assert!(key.ends_with('}'), "{}", key);
                    }
                    Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{what}: {e:?}"),
                }
            }
            let leased = WaiterLease::new(lease).map(|lease| FairLock::new().with_waiter_lease(lease));
            prop_assert_eq!(leased.is_ok(), waiter_lease_ok(lease), "{:?}", lease);
            match leased {
                Ok(fair) => {
                    let shown = format!("{fair:?}");
                    prop_assert!(shown.contains(&format!("waiter_lease: {lease:?}")), "{}", shown);
                    prop_assert_eq!(fair.prefix(), FairLock::DEFAULT_PREFIX);
                }
                Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
            }
            let owner = Owner::from_token(&token);
            prop_assert_eq!(owner.is_ok(), (16..=128).contains(&token.len()), "{} bytes", token.len());
            match owner {
                // The token is a secret: never shown.
                Ok(owner) => prop_assert_eq!(format!("{owner:?}"), "Owner { .. }"),
                Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
            }
            let policy = RetryPolicy::new().attempts(attempts).backoff(first, max);
            prop_assert_eq!(policy.max_attempts(), attempts);
            prop_assert_eq!(policy, RetryPolicy::new().backoff(first, max).attempts(attempts));
            let s = Snapshot { value: None, version: u64::from(attempts) };
            prop_assert_eq!(s.exists(), attempts > 0);
        }
    }
}

// ---- Local deny cache (and, with `tower`, the concurrency limit) ----

mod shield {
    use super::*;
    use redkit::rate_limit::DenyCache;

    /// `(name, permits, lease, timeout, ipv6 bits, full status)` of a concurrency layer.
    pub(crate) type LayerInput = (String, u32, Duration, Duration, u8, u16);

    pub(crate) fn layer_input() -> impl Strategy<Value = LayerInput> {
        (
            prop_oneof![4 => "[a-zA-Z0-9:._-]{1,64}", 1 => "[a-zA-Z0-9:._-]{0,70}", 1 => ".{0,70}"],
            prop_oneof![
                4 => 1u32..=redkit::lock::Semaphore::MAX_PERMITS,
                1 => Just(0u32),
                1 => Just(redkit::lock::Semaphore::MAX_PERMITS + 1),
                1 => any::<u32>(),
            ],
            prop_oneof![4 => (1u64..100_000).prop_map(Duration::from_millis), 1 => any_duration()],
            prop_oneof![4 => (1u64..100_000).prop_map(Duration::from_millis), 1 => any_duration()],
            prop_oneof![4 => 1u8..=128, 1 => any::<u8>()],
            prop_oneof![4 => 400u16..600, 1 => 100u16..1000],
        )
    }

    /// What `ConcurrencyLimitLayer`'s builder documents as valid.
    pub(crate) fn layer_ok((name, permits, lease, timeout, bits, status): &LayerInput) -> bool {
        let status = http::StatusCode::from_u16(*status).unwrap();
        let lease_ok = !lease.is_zero()
            && *lease <= redkit::lock::limits::MAX_TTL
            && lease.subsec_nanos() % 1_000_000 == 0;
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_:.-".contains(&b));
        name_ok
            && (1..=1_000_000).contains(permits)
            && lease_ok
            && !timeout.is_zero()
            && (1..=128).contains(bits)
            && (status.is_client_error() || status.is_server_error())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn deny_cache_accepts_exactly_its_documented_capacity(
            capacity in usize_around(1, DenyCache::MAX_CAPACITY),
        ) {
            let ok = (1..=DenyCache::MAX_CAPACITY).contains(&capacity);
            let cache = DenyCache::new(capacity);
            prop_assert_eq!(cache.is_ok(), ok);
            if let Ok(cache) = cache {
                prop_assert_eq!(cache.capacity(), capacity);
                prop_assert!(cache.is_empty());
                let limiter = FixedWindow::new("p", Rate::per_second(redkit::nonzero!(1))).unwrap().with_deny_cache(cache);
                prop_assert!(limiter.deny_cache().is_some());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn deny_cache_capacity_option_is_validated(capacity in usize_around(1, DenyCache::MAX_CAPACITY)) {
            use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
            let spec = PolicySpec::new("d", Rate::per_second(redkit::nonzero!(10)));
            let built = Policies::from_config(&PolicyConfig::new(spec).deny_cache_capacity(capacity));
            let ok = (1..=DenyCache::MAX_CAPACITY).contains(&capacity);
            prop_assert_eq!(built.is_ok(), ok);
            if let Ok(p) = built {
                prop_assert_eq!(p.for_path("/").deny_cache().map(|c| c.capacity()), Some(capacity));
            }
        }

        #[test]
        fn concurrency_layer_builder_accepts_exactly_valid_settings(input in layer_input()) {
            use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
            let ok = layer_ok(&input);
            let (name, permits, lease, timeout, bits, status) = input;
            let built = ConcurrencyPolicy::new(&name, permits).and_then(|policy| {
                ConcurrencyLimitLayer::builder(policy, ())
                    .lease(lease)
                    .timeout(timeout)
                    .ipv6_prefix(bits)
                    .full_status(http::StatusCode::from_u16(status).unwrap())
                    .build()
            });
            prop_assert_eq!(built.is_ok(), ok, "{:?}", built.as_ref().err());
            match built {
                Ok(layer) => {
                    prop_assert_eq!((layer.name(), layer.policy().permits()), (name.as_str(), permits));
                    prop_assert_eq!(layer.stats(), redkit::middleware::ConcurrencyStats::default());
                    let key = LimitKey::text("u").unwrap();
                    prop_assert_eq!(layer.resource(&key), "k:u");
                }
                Err(e) => prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}"),
            }
        }
    }
}

/// The generators reach both branches of every "accepts exactly" property: sampling each
/// property's own input strategy (deterministic RNG), the documented predicate holds for a
/// substantial share of the inputs and fails for a substantial share.
mod coverage {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    const SAMPLES: usize = 1_000;
    /// The least share of accepted, and of refused, inputs.
    const MIN_SHARE: f64 = 0.2;

    /// The share of `strategy`'s values for which `pred` holds.
    fn share<S: Strategy>(strategy: S, pred: impl Fn(&S::Value) -> bool) -> f64 {
        let mut runner = TestRunner::deterministic();
        let hits = (0..SAMPLES)
            .filter(|_| pred(&strategy.new_tree(&mut runner).unwrap().current()))
            .count();
        hits as f64 / SAMPLES as f64
    }

    /// Accepted and refused inputs each make up at least `min` of the draws.
    #[track_caller]
    fn assert_mixed<S: Strategy>(
        what: &str,
        strategy: S,
        ok: impl Fn(&S::Value) -> bool,
        min: f64,
    ) {
        let s = share(strategy, ok);
        eprintln!("{what}: {:.0} % accepted", s * 100.0);
        assert!(
            (min..=1.0 - min).contains(&s),
            "{what}: {:.1} % of the inputs are accepted, wanted {:.0} % to {:.0} %",
            s * 100.0,
            min * 100.0,
            (1.0 - min) * 100.0
        );
    }

    #[test]
    fn generators_reach_accepted_and_refused_inputs() {
        assert_mixed(
            "Replication::new",
            (replicas(), replication_timeout()),
            |(r, t)| *r >= 1 && replication_timeout_ok(*t),
            MIN_SHARE,
        );
        assert_mixed(
            "Acked::is_replicated",
            acked_counts(),
            |(acked, requested)| acked >= requested,
            MIN_SHARE,
        );
        assert_mixed(
            "Replication::fsynced",
            replication_timeout(),
            |t| replication_timeout_ok(*t),
            MIN_SHARE,
        );
        assert_mixed(
            "FixedWindow::new",
            fixed_window_input(),
            fixed_window_ok,
            MIN_SHARE,
        );
        assert_mixed(
            "SlidingWindow::new",
            sliding_window_input(),
            sliding_window_ok,
            MIN_SHARE,
        );
        assert_mixed("Gcra::new", gcra_input(), gcra_new_ok, MIN_SHARE);
        // Among accepted limiters, bursts accepted and refused.
        assert_mixed(
            "Gcra::bursting",
            gcra_input().prop_filter("accepted", gcra_new_ok),
            gcra_burst_ok,
            MIN_SHARE,
        );
        assert_mixed(
            "GroupCommit::new",
            (
                usize_around(2, GroupCommit::MAX_BATCH),
                usize_around(1, GroupCommit::MAX_IN_FLIGHT),
            ),
            group_commit_ok,
            MIN_SHARE,
        );
        assert_mixed(
            "Coalescing::with_limits",
            coalescing_input(),
            coalescing_ok,
            MIN_SHARE,
        );
        assert_mixed("LimitKey::text", text_key_like(), |t| part_ok(t), MIN_SHARE);
        assert_mixed("Script::new", script_input(), script_ok, MIN_SHARE);
        assert_mixed("Library::new", library_input(), library_ok, MIN_SHARE);
        // Accepted libraries with the well-formed shared block (so its calls are checked).
        assert_mixed(
            "Library::new with a shared block",
            library_input(),
            |i| library_ok(i) && i.1.iter().any(|f| f.2 == Some(1)),
            MIN_SHARE,
        );
        assert_mixed(
            "Call::validate, variadic",
            calls::variadic_input(),
            calls::variadic_ok,
            MIN_SHARE,
        );
        assert_mixed(
            "Call::validate, fixed",
            calls::fixed_input(),
            calls::fixed_ok,
            MIN_SHARE,
        );
        assert_mixed("Admin::single", url_like(), |u| parses(u), MIN_SHARE);
        assert_mixed(
            "Admin::cluster",
            admin_input(),
            |(_, seeds, _)| !seeds.is_empty() && seeds.iter().all(|s| parses(s)),
            MIN_SHARE,
        );
        assert_mixed("prefixes", prefix_like(), |p| prefix_ok(p), MIN_SHARE);
        assert_mixed("key parts", part_like(), |p| part_ok(p), MIN_SHARE);
        assert_mixed(
            "Lock keys",
            (prefix_like(), part_like()),
            |(p, r)| prefix_ok(p) && part_ok(r),
            MIN_SHARE,
        );
        assert_mixed(
            "LockOptions equality",
            proptest::option::of(0usize..8),
            Option::is_none,
            MIN_SHARE,
        );
        assert_mixed(
            "LockOptions drift set",
            lock::setter_parts(),
            |p| p.5.is_some(),
            MIN_SHARE,
        );
        assert_mixed(
            "LockOptions equal to the default",
            lock::setter_parts(),
            |p| *p == lock::default_parts(),
            MIN_SHARE,
        );
        assert_mixed(
            "Inventory::build",
            inventory::input(),
            inventory::built_ok,
            MIN_SHARE,
        );
        assert_mixed("Store::line", inventory::input(), inventory::line_ok, 0.1);
        assert_mixed(
            "WaiterLease::new",
            coordination::waiter_lease(),
            |l| coordination::waiter_lease_ok(*l),
            MIN_SHARE,
        );
        assert_mixed(
            "Owner::from_token",
            coordination::owner_token(),
            |t| (16..=128).contains(&t.len()),
            MIN_SHARE,
        );
        assert_mixed(
            "DenyCache::new",
            usize_around(1, redkit::rate_limit::DenyCache::MAX_CAPACITY),
            |c| (1..=redkit::rate_limit::DenyCache::MAX_CAPACITY).contains(c),
            MIN_SHARE,
        );
    }

    #[test]
    fn middleware_generators_reach_accepted_and_refused_inputs() {
        assert_mixed(
            "Policies::from_config",
            middleware::policies_input(),
            |i| middleware::policies_model(i).is_some(),
            MIN_SHARE,
        );
        // Accepted configurations with routes (so routing is checked).
        assert_mixed(
            "Policies::from_config with routes",
            middleware::policies_input(),
            |i| middleware::policies_model(i).is_some_and(|r| !r.is_empty()),
            0.1,
        );
        assert_mixed(
            "TrustedProxies::parse_cidrs",
            middleware::cidr_entries(),
            |e| middleware::cidrs_model(e).is_some(),
            MIN_SHARE,
        );
        // Accepted with networks (an empty list trusts no one: nothing to check).
        assert_mixed(
            "TrustedProxies::parse_cidrs with networks",
            middleware::cidr_entries(),
            |e| middleware::cidrs_model(e).is_some_and(|nets| !nets.is_empty()),
            MIN_SHARE,
        );
        // Among accepted lists, each of the three clients of a request `far, near` from
        // `peer`: the peer (untrusted), the nearest hop (untrusted behind a trusted peer), the
        // farther hop (both trusted).
        let requests = || {
            (
                middleware::cidr_entries()
                    .prop_filter_map("refused", |e| middleware::cidrs_model(&e)),
                (middleware::pick(), middleware::pick(), middleware::pick()),
            )
        };
        let client = |(nets, (p, f, n)): &(Vec<ipnet::IpNet>, middleware::Picks)| {
            use middleware::address;
            let (peer, far, near) = (address(p, nets), address(f, nets), address(n, nets));
            let client = middleware::client(nets, peer, far, near);
            (client == peer, client == near, client == far)
        };
        assert_mixed(
            "TrustedProxies: the peer",
            requests(),
            |r| client(r).0,
            MIN_SHARE,
        );
        assert_mixed(
            "TrustedProxies: the near hop",
            requests(),
            |r| client(r).1,
            MIN_SHARE,
        );
        assert_mixed(
            "TrustedProxies: the far hop",
            requests(),
            |r| client(r).2,
            MIN_SHARE,
        );
        assert_mixed(
            "ConcurrencyLimitLayer::build",
            shield::layer_input(),
            shield::layer_ok,
            MIN_SHARE,
        );
    }
}
