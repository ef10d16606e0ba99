//! A handler that holds its request until the test opens a gate: how a test keeps requests in
//! flight behind a layer, and learns that each one reached the handler, without sleeping.

use axum::routing::get;
use axum::Router;
use tokio::sync::{mpsc, watch};

/// An app whose handler at `/` tells `entered` that a request reached it, then waits until
/// `gate` is opened (`gate.send(true)`); apply the layer under test with `.layer(..)`. The gate
/// stays open once opened, so no wake-up is lost to a handler not yet waiting.
pub struct Gated {
    /// Opens the gate: `gate.send(true)`.
    pub gate: watch::Sender<bool>,
    /// One message per request that reached the handler.
    pub entered: mpsc::UnboundedReceiver<()>,
    /// The app, without a layer.
    pub app: Router,
}

/// A [`Gated`] app, its gate closed.
pub fn gated() -> Gated {
    let (gate, open) = watch::channel(false);
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let app = Router::new().route(
        "/",
        get(move || {
            let (mut open, entered_tx) = (open.clone(), entered_tx.clone());
            async move {
                entered_tx.send(()).expect("the test holds the receiver");
                open.wait_for(|open| *open)
                    .await
                    .expect("the test holds the gate");
                "done"
            }
        }),
    );
    Gated { gate, entered, app }
}
