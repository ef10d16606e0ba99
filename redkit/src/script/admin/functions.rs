//! Redis Functions libraries on every node: list, load, verify, delete, flush.
//!
//! Loading, deleting and flushing are writes: Redis runs them on primaries and replicates them
//! to their replicas (a replica refuses them). Listing and verifying ask every node, replicas
//! included, so a deploy gate sees a replica that has not caught up.

use redis::aio::MultiplexedConnection;
use redis::Value;
use serde::Serialize;

use super::{Admin, FlushMode, NodeReport};
use crate::error::{Error, Result};
use crate::script::errors::unsupported_or;
use crate::script::functions::fields;
use crate::script::Library;

/// What one node holds of a library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::script::{admin::{Admin, LibraryState}, Library};
/// let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?;
/// for r in admin.verify_library(Library::redkit()).await? {
///     match r.value {
///         Some(LibraryState::Loaded) => {}
///         Some(LibraryState::Missing) => eprintln!("{}: not loaded yet", r.node.addr),
///         Some(LibraryState::Different) => eprintln!("{}: same name, other code", r.node.addr),
///         Some(_) => eprintln!("{}: {:?}", r.node.addr, r.value),
///         None => eprintln!("{}: {:?}", r.node.addr, r.error),
///     }
/// }
/// # Ok(()) }
/// ```
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LibraryState {
    /// Loaded, with exactly the library's code.
    Loaded,
    /// No library of that name.
    Missing,
    /// A library of that name with other code.
    Different,
}

impl Admin {
    /// The names of the Functions libraries on every node, replicas included.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
    /// for r in admin.libraries().await? {
    ///     println!("{}: {:?}", r.node.addr, r.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn libraries(&self) -> Result<Vec<NodeReport<Vec<String>>>> {
        self.each_node(|admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                let libs = function_list(&mut conn, None).await?;
                Ok(libs.into_iter().map(|(name, _)| name).collect())
            }
            .await;
            (node, result)
        })
        .await
    }

    /// `FUNCTION LOAD REPLACE` of `library` on every primary (replicas receive it by
    /// replication). Idempotent: loading N+1 leaves N in place (blue/green).
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::{admin::Admin, Library};
    /// let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?;
    /// assert!(admin.load_library(Library::redkit()).await?.iter().all(|r| r.is_ok()));
    /// # Ok(()) }
    /// ```
    pub async fn load_library(&self, library: &Library) -> Result<Vec<NodeReport<()>>> {
        self.each_node_where(true, |admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                library
                    .load_cmd()
                    .query_async::<Value>(&mut conn)
                    .await
                    .map_err(unsupported_or)?;
                Ok(())
            }
            .await;
            (node, result)
        })
        .await
    }

    /// Whether every node, replicas included, holds `library` with exactly its code.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::{admin::{Admin, LibraryState}, Library};
    /// let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?;
    /// let ready = admin.verify_library(Library::redkit()).await?
    ///     .iter()
    ///     .all(|r| r.value == Some(LibraryState::Loaded));
    /// # let _ = ready; Ok(()) }
    /// ```
    pub async fn verify_library(&self, library: &Library) -> Result<Vec<NodeReport<LibraryState>>> {
        self.each_node(|admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                let libs = function_list(&mut conn, Some(library.name())).await?;
                Ok(match libs.iter().find(|(name, _)| name == library.name()) {
                    None => LibraryState::Missing,
                    Some((_, code)) if code.as_deref() == Some(library.code()) => {
                        LibraryState::Loaded
                    }
                    Some(_) => LibraryState::Different,
                })
            }
            .await;
            (node, result)
        })
        .await
    }

    /// `FUNCTION DELETE <name>` on every primary (replicated to replicas): the value is
    /// `false` where the library was not there.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
    /// admin.delete_library("redkit_0123abcd").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_library(&self, name: &str) -> Result<Vec<NodeReport<bool>>> {
        self.each_node_where(true, |admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                match redis::cmd("FUNCTION")
                    .arg("DELETE")
                    .arg(name)
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(e) if e.detail().is_some_and(|d| d.contains("not found")) => Ok(false),
                    Err(e) => Err(unsupported_or(e)),
                }
            }
            .await;
            (node, result)
        })
        .await
    }

    /// `FUNCTION FLUSH` on every primary (replicated to replicas): every library is gone.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::admin::{Admin, FlushMode};
    /// Admin::single("redis://127.0.0.1:6379/")?.flush_functions(FlushMode::Sync).await?;
    /// # Ok(()) }
    /// ```
    pub async fn flush_functions(&self, mode: FlushMode) -> Result<Vec<NodeReport<()>>> {
        self.flush_each("FUNCTION", mode, true, unsupported_or)
            .await
    }
}

/// `FUNCTION LIST [LIBRARYNAME <name> WITHCODE]`: (library name, code when asked).
async fn function_list(
    conn: &mut MultiplexedConnection,
    name: Option<&str>,
) -> Result<Vec<(String, Option<String>)>> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LIST");
    if let Some(name) = name {
        cmd.arg("LIBRARYNAME").arg(name).arg("WITHCODE");
    }
    let reply: Value = cmd.query_async(conn).await.map_err(unsupported_or)?;
    let Value::Array(libraries) = reply else {
        return Err(Error::unexpected("FUNCTION LIST", "not an array"));
    };
    libraries
        .iter()
        .map(|lib| {
            let field = |want: &str| fields(lib).find(|(k, _)| *k == want).map(|(_, v)| v);
            let text = |v: &Value| match v {
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                Value::SimpleString(s) => Some(s.clone()),
                _ => None,
            };
            let name = field("library_name")
                .and_then(text)
                .ok_or_else(|| Error::unexpected("FUNCTION LIST", "no library_name"))?;
            Ok((name, field("library_code").and_then(text)))
        })
        .collect()
}
