//! What a server of this binary's children hands back: its accept loop.

/// A server's accept loop, run by the child until its stdin closes.
pub type Serving = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
