//! Shared state laid out against contention between cores: [`Padded`], a value on cache
//! lines of its own, and [`Striped`], one copy of a value per stripe of threads.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// `T` alone on its cache lines (128 bytes: two 64-byte lines, as the adjacent-line
/// prefetcher of x86 cores moves them in pairs). For shared state that every request writes
/// from several cores (a lock's word, a counter): the values beside it are then not pulled
/// from core to core with it.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// One `T` per stripe, each on lines of its own; a thread works on its own stripe
/// ([`mine`](Self::mine)). For state that every request writes from whichever core serves
/// it (a counter, a read lock's count, a shared value's reference count): two cores then
/// rarely touch the same line, where one shared value would be pulled from core to core on
/// every request. Readers of the whole combine the stripes ([`iter`](Self::iter)).
pub(crate) struct Striped<T> {
    stripes: Box<[Padded<T>]>,
}

impl<T> Striped<T> {
    /// One value per stripe, each made by `make`.
    pub(crate) fn new(mut make: impl FnMut() -> T) -> Self {
        Self {
            stripes: (0..stripe_count()).map(|_| Padded(make())).collect(),
        }
    }

    /// The stripe of the calling thread.
    pub(crate) fn mine(&self) -> &T {
        // Never empty (`stripe_count` is at least 1): the index is in bounds.
        &self.stripes[thread_stripe() % self.stripes.len()]
    }

    /// Every stripe.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }

    /// The total of one counter over every stripe (saturating).
    pub(crate) fn sum(&self, counter: impl Fn(&T) -> &AtomicU64) -> u64 {
        self.iter()
            .map(|stripe| counter(stripe).load(Ordering::Relaxed))
            .fold(0, u64::saturating_add)
    }
}

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Self::new(T::default)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Striped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Striped")
            .field("stripes", &self.stripes.len())
            .field("first", &self.stripes.first().map(|p| &p.0))
            .finish()
    }
}

/// How many stripes a [`Striped`] has: twice the CPUs this process may use (threads take
/// stripes in turn, so a few threads that are not workers do not push two workers onto one
/// stripe), at least 16 and at most 64.
fn stripe_count() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.saturating_mul(2).clamp(16, 64)
    })
}

/// The calling thread's stripe number: threads are numbered in the order they first ask.
fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    // A thread being torn down has no locals left: it shares stripe 0.
    STRIPE.try_with(|s| *s).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_stripes_of_their_own_in_turn() {
        let striped: Striped<AtomicUsize> = Striped::default();
        let len = striped.iter().count();
        assert!((16..=64).contains(&len));
        let at = |n: usize| &striped.stripes[n % len].0 as *const AtomicUsize;
        // The same stripe every time on one thread: the one of its number.
        assert_eq!(striped.mine() as *const _, at(thread_stripe()));
        assert_eq!(thread_stripe(), thread_stripe());
        // Threads started one after another are numbered in turn (other tests' threads may
        // take numbers in between: later, never the same).
        let numbers: Vec<usize> = (0..4)
            .map(|_| {
                std::thread::scope(|s| {
                    s.spawn(|| {
                        striped.mine().fetch_add(1, Ordering::Relaxed);
                        assert_eq!(striped.mine() as *const _, at(thread_stripe()));
                        thread_stripe()
                    })
                    .join()
                    .unwrap()
                })
            })
            .collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
        let total: usize = striped.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        assert_eq!(total, 4);
        let counts: Striped<AtomicU64> = Striped::default();
        // Two different stripes (there are at least 16).
        if let Some(first) = counts.iter().next() {
            first.fetch_add(2, Ordering::Relaxed);
        }
        if let Some(last) = counts.iter().last() {
            last.fetch_add(u64::MAX, Ordering::Relaxed);
        }
        assert_eq!(counts.sum(|c| c), u64::MAX, "saturates");
        // Each stripe on lines of its own.
        let addrs: Vec<usize> = striped.iter().map(|c| c as *const _ as usize).collect();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] == 128));
    }

    #[test]
    fn each_value_starts_its_own_line() {
        let pair = [Padded(1u8), Padded(2u8)];
        let (a, b) = (&pair[0] as *const _ as usize, &pair[1] as *const _ as usize);
        assert_eq!(b - a, 128);
        assert_eq!(a % 128, 0);
        assert_eq!(*pair[1], 2);
    }
}
