//! An operator's survey of a limiter's clients: which clients it holds state for
//! ([`Limiter::scan_clients`]) and which use the most ([`Limiter::busiest`]), read without
//! changing anything.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::num::NonZeroU32;

use futures_util::future::join_all;

use super::decision::Quota;
use super::key::LimitKey;
use super::limiter::{Algorithm, Limiter};
use crate::connect::{KeyType, ScanKeys};
use crate::error::Result;

/// Peeks sent at once while surveying (pipelined on a multiplexed connection).
const PEEKS_AT_ONCE: usize = 64;

/// The clients a limiter holds state for ([`Limiter::scan_clients`]).
///
/// ```
/// # fn show(found: redkit::rate_limit::ClientScan) {
/// for client in &found.clients { println!("{}", client.as_str()); }
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientScan {
    /// The clients found (each once, also when an aligned window holds several windows).
    pub clients: Vec<LimitKey>,
    /// Whether the scan stopped at the cap before visiting every key.
    pub truncated: bool,
    /// Keys matching the limiter's pattern that do not read back as a client (not written
    /// by redkit): left out.
    pub skipped: usize,
}

impl Limiter {
    /// The clients this limiter holds state for, found by `SCAN MATCH
    /// <prefix>:<name>:{*} TYPE string` on every primary ([`ScanKeys`](crate::connect::ScanKeys)),
    /// visiting at most `cap` keys. Never `KEYS`, never a scan inside a script, nothing
    /// written. A diagnostic: clients come and go while it runs.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let found = l.scan_clients(&mut conn, redkit::nonzero!(10_000)).await?;
    /// for client in &found.clients {
    ///     let q = l.peek(&mut conn, client).await?;
    ///     println!("{}: {} used", client.as_str(), q.used());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn scan_clients<S: ScanKeys>(
        &self,
        conn: &mut S,
        cap: NonZeroU32,
    ) -> Result<ClientScan> {
        let head = format!("{}:{}:{{", self.prefix(), self.name());
        let aligned = self.algorithm() == Algorithm::AlignedWindow;
        let pattern = if aligned {
            format!("{head}*}}:*")
        } else {
            format!("{head}*}}")
        };
        let found = conn.scan_keys(&pattern, Some(KeyType::String), cap).await?;
        let mut out = ClientScan {
            truncated: found.truncated,
            ..ClientScan::default()
        };
        let mut seen = HashSet::new();
        for key in &found.keys {
            let tag = key
                .strip_prefix(&head)
                .and_then(|rest| rest.split_once('}'))
                .filter(|(_, tail)| aligned || tail.is_empty())
                .and_then(|(tag, _)| LimitKey::from_canonical(tag));
            match tag {
                Some(client) => {
                    if seen.insert(client.as_str().to_owned()) {
                        out.clients.push(client);
                    }
                }
                None => out.skipped += 1,
            }
        }
        Ok(out)
    }
}

/// The clients that use a limiter most ([`Limiter::busiest`]).
///
/// ```
/// # fn show(top: redkit::rate_limit::Busiest) {
/// for (client, quota) in &top.clients {
///     println!("{}: {} of {}", client.as_str(), quota.used(), quota.limit());
/// }
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Busiest {
    /// The busiest clients with what a peek read, most used first (ties by client).
    pub clients: Vec<(LimitKey, Quota)>,
    /// How many clients were peeked.
    pub surveyed: usize,
    /// Whether the scan stopped at its cap: a busier client may not have been seen.
    pub truncated: bool,
}

impl Limiter {
    /// The `n` clients using this limiter most right now: [`scan_clients`](Self::scan_clients)
    /// (at most `cap` keys visited), then a [`peek`](Self::peek) of each, 64 at a time on
    /// clones of `conn` (pipelined on a multiplexed connection), keeping the `n` busiest in
    /// a bounded heap: memory for `n`, not for every client. Nothing is written. A
    /// diagnostic: counts move while it runs.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let top = l.busiest(&mut conn, redkit::nonzero!(10_000), redkit::nonzero!(10)).await?;
    /// for (client, q) in &top.clients {
    ///     println!("{}: {} used, {} left", client.as_str(), q.used(), q.remaining());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn busiest<S: ScanKeys + Clone>(
        &self,
        conn: &mut S,
        cap: NonZeroU32,
        n: NonZeroU32,
    ) -> Result<Busiest> {
        let found = self.scan_clients(conn, cap).await?;
        let keep = usize::try_from(n.get()).unwrap_or(usize::MAX);
        // A min-heap of the busiest so far: its top is the one to drop.
        let mut heap: BinaryHeap<Reverse<(u32, Reverse<String>)>> = BinaryHeap::new();
        let mut quotas = std::collections::HashMap::new();
        for chunk in found.clients.chunks(PEEKS_AT_ONCE) {
            let peeks = chunk.iter().map(|client| {
                let mut conn = conn.clone();
                async move { self.peek(&mut conn, client).await }
            });
            for (client, quota) in chunk.iter().zip(join_all(peeks).await) {
                let quota = quota?;
                let name = client.as_str().to_owned();
                heap.push(Reverse((quota.used(), Reverse(name.clone()))));
                quotas.insert(name, (client.clone(), quota));
                if heap.len() > keep {
                    if let Some(Reverse((_, Reverse(dropped)))) = heap.pop() {
                        quotas.remove(&dropped);
                    }
                }
            }
        }
        let mut ranked: Vec<_> = heap.into_iter().map(|Reverse(e)| e).collect();
        ranked.sort_by(|a, b| b.cmp(a));
        let clients = ranked
            .into_iter()
            .filter_map(|(_, Reverse(name))| quotas.remove(&name))
            .collect();
        Ok(Busiest {
            clients,
            surveyed: found.clients.len(),
            truncated: found.truncated,
        })
    }
}
