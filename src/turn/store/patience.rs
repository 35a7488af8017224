//! A turn store call tried again while the store cannot be reached for a moment: the first
//! commands after a Redis restart or a cut connection fail while it comes back. Fenced,
//! behind and the like are answers, not passing failures, and end the tries at once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::TurnStoreError;

/// The longest a call is tried again.
pub const PATIENCE: Duration = Duration::from_secs(5);
/// How often meanwhile.
const RETRY: Duration = Duration::from_millis(50);

/// An error that may pass if the call is made again shortly.
pub trait Passing {
    fn passing(&self) -> bool;
}

impl Passing for TurnStoreError {
    fn passing(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Timeout(_))
    }
}

/// Makes `call` until it returns anything but a passing failure, for at most [`PATIENCE`]
/// and never again after `until`.
pub async fn patiently<T, E, F, Fut>(until: Option<Instant>, mut call: F) -> Result<T, E>
where
    E: Passing,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let patience = Instant::now() + PATIENCE;
    let deadline = until.map_or(patience, |u| u.min(patience));
    loop {
        match call().await {
            Err(e) if e.passing() && Instant::now() < deadline => {
                tokio::time::sleep(RETRY).await;
            }
            done => return done,
        }
    }
}
