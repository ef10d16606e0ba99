//! [`Padded`]: a value on cache lines of its own.

use std::ops::Deref;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_starts_its_own_line() {
        let pair = [Padded(1u8), Padded(2u8)];
        let (a, b) = (&pair[0] as *const _ as usize, &pair[1] as *const _ as usize);
        assert_eq!(b - a, 128);
        assert_eq!(a % 128, 0);
        assert_eq!(*pair[1], 2);
    }
}
