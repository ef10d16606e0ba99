//! What a metric recording costs with the `metrics` feature on and no recorder installed (the
//! facade's no-op): nanoseconds per recording (criterion), and heap allocations per recording
//! (counted by this binary's allocator, only while it counts). No Redis: each recording
//! function is called as redkit calls it, through `redkit::__bench` (not public API).
//!
//! `cargo bench --features bench,metrics --bench metrics`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use redkit::__bench::Recordings;

/// The system allocator, counting allocations while `COUNTING` is set (a relaxed load
/// otherwise: the timed runs pay next to nothing for it).
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

type Recording = (&'static str, fn(&Recordings));

const RECORDINGS: [Recording; 8] = [
    ("rate_limited", Recordings::rate_limited),
    (
        "concurrency_limited+active",
        Recordings::concurrency_limited,
    ),
    ("lock_operation", Recordings::lock_operation),
    ("inventory_operation", Recordings::inventory_operation),
    ("round_trip", Recordings::round_trip),
    ("round_trip_whole", Recordings::round_trip_whole),
    ("group_sent", Recordings::group_sent),
    ("deny_cache_lookup+entries", Recordings::deny_cache),
];

/// Heap allocations per call of `record`, over `n` calls after one warm-up call.
fn allocations(recordings: &Recordings, record: fn(&Recordings), n: u64) -> f64 {
    record(recordings);
    ALLOCATIONS.store(0, Relaxed);
    COUNTING.store(true, Relaxed);
    for _ in 0..n {
        record(recordings);
    }
    COUNTING.store(false, Relaxed);
    ALLOCATIONS.load(Relaxed) as f64 / n as f64
}

fn bench(c: &mut Criterion) {
    let recordings = Recordings::new();
    println!("heap allocations per call (feature `metrics` on, no recorder installed):");
    for (name, record) in RECORDINGS {
        println!("  {name:<28} {}", allocations(&recordings, record, 10_000));
    }
    let mut group = c.benchmark_group("metrics, no recorder");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for (name, record) in RECORDINGS {
        group.bench_function(name, |b| b.iter(|| record(&recordings)));
    }
    // For reference: what a round trip's two clock reads cost (its start, its duration).
    group.bench_function("reference: Instant::now + elapsed", |b| {
        b.iter(|| std::hint::black_box(Instant::now()).elapsed())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
