//! A block of a semaphore's permits held by one owner: grown, shrunk, renewed or given back
//! in one script call (`lua/semaphore_block`), for the leased concurrency limit.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::semaphore::Semaphore;
use crate::script::{embedded, Call};

/// What one block call left in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    /// The block's size now: below the size asked for when the semaphore was full.
    pub(crate) size: u32,
    /// Its size before the call, as Redis had it (0 after a lost lease or a restart).
    pub(crate) had: u32,
    /// Every unexpired holder of the semaphore now (this block's members included).
    pub(crate) holders: u32,
    /// Until the earliest other lease ends, when the block got less than asked (else zero).
    pub(crate) retry_after: Duration,
    /// How long the semaphore's contention mark lasts from now: some block got less than it
    /// asked for in the last `mark` (zero: none did).
    pub(crate) contended: Duration,
}

impl Semaphore {
    /// Sets the block of `token` (16 to 128 bytes of `[0-9A-Za-z_-]`) on the semaphore `key`
    /// of `permits` permits to `want` permits (0 gives it back), each with a lease of `ttl_ms`
    /// from the server's clock now. `key` is a key of this semaphore ([`key`](Self::key)).
    /// When the block gets less than `want`, the semaphore's contention mark is set for
    /// `mark_ms`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn set_block<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
        token: &str,
        permits: u32,
        ttl_ms: u64,
        want: u32,
        mark_ms: u64,
    ) -> Result<Block> {
        let script = embedded::SEMAPHORE_BLOCK.script();
        let mut call = Call::new(script);
        call.key(key)
            .key(schema::wake(key))
            .key(schema::contention(key))
            .arg(token)
            .arg(permits)
            .arg(ttl_ms)
            .arg(want)
            .arg(mark_ms);
        let reply: Vec<i64> = self.manager().invoke(conn, &call).await?;
        block_of(&reply).ok_or_else(|| {
            Error::unexpected(
                script.id(),
                format!(
                    "reply {reply:?} is not {{size, had, holders, retry_after_ms, contended_ms}}"
                ),
            )
        })
    }
}

/// The reply `{size, had, holders, retry_after_ms, contended_ms}`, or `None` when it is not
/// one.
fn block_of(reply: &[i64]) -> Option<Block> {
    let count = |n: i64| u32::try_from(n).ok();
    let ms = |n: i64| u64::try_from(n).ok().map(Duration::from_millis);
    match *reply {
        [size, had, holders, retry, contended] => Some(Block {
            size: count(size)?,
            had: count(had)?,
            holders: count(holders)?,
            retry_after: ms(retry)?,
            contended: ms(contended)?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_or_refused() {
        assert_eq!(
            block_of(&[3, 1, 7, 0, 0]),
            Some(Block {
                size: 3,
                had: 1,
                holders: 7,
                retry_after: Duration::ZERO,
                contended: Duration::ZERO,
            })
        );
        assert_eq!(
            block_of(&[0, 0, 4, 250, 1999]).map(|b| (b.retry_after, b.contended)),
            Some((Duration::from_millis(250), Duration::from_millis(1999)))
        );
        for bad in [
            &[1, 1, 1, 1][..],
            &[1, 1, 1, 1, 1, 1],
            &[-1, 0, 0, 0, 0],
            &[0, -1, 0, 0, 0],
            &[0, 0, -1, 0, 0],
            &[0, 0, 0, -5, 0],
            &[0, 0, 0, 0, -5],
        ] {
            assert_eq!(block_of(bad), None, "{bad:?}");
        }
    }
}
