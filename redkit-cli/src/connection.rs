//! The data commands' connection (`limits`, `locks`): one server, or a Redis Cluster.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::exit::Failure;

/// A connection to one server or to a Redis Cluster.
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Connects to `urls`: a Cluster with `cluster` or when the node says it is one
/// (`cluster_enabled:1`), else the one server.
pub(crate) async fn connect(
    urls: &[String],
    cluster: bool,
    timeout: Duration,
    target: &str,
) -> Result<Conn, Failure> {
    let fail = |e: redis::RedisError| Failure::from_error(target, &redkit::Error::from(e));
    let late = || Failure::from_error(target, &redkit::Error::Timeout(timeout));
    let cluster_conn = || async {
        let client = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .map_err(fail)?;
        tokio::time::timeout(timeout, client.get_async_connection())
            .await
            .map_err(|_| late())?
            .map(Conn::Cluster)
            .map_err(fail)
    };
    if cluster {
        return cluster_conn().await;
    }
    let client = redis::Client::open(urls[0].as_str()).map_err(fail)?;
    let mut conn = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| late())?
        .map_err(fail)?;
    let info: String = tokio::time::timeout(
        timeout,
        redis::cmd("INFO").arg("cluster").query_async(&mut conn),
    )
    .await
    .map_err(|_| late())?
    .map_err(fail)?;
    if info.contains("cluster_enabled:1") {
        return cluster_conn().await;
    }
    Ok(Conn::Single(conn))
}
