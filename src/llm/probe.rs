//! Whether the model provider answers, for `/readyz`: one cheap request (the client's
//! [`LlmClient::probe`]), its result kept for a short while so that frequent readiness
//! checks cost the provider nothing more; concurrent checks share one probe.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::LlmClient;

/// How long a probe's result stands.
const FRESH_FOR: Duration = Duration::from_secs(15);

pub struct LlmProbe {
    client: Arc<dyn LlmClient>,
    /// The last result and when it was taken. A tokio Mutex: held across the probe, so
    /// concurrent checks wait for one request instead of sending their own.
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl LlmProbe {
    pub fn new(client: Arc<dyn LlmClient>) -> Self {
        Self {
            client,
            last: Mutex::new(None),
        }
    }

    pub async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return result.clone();
        }
        let result = self.client.probe().await.map_err(|e| e.to_string());
        *last = Some((Instant::now(), result.clone()));
        result
    }
}
