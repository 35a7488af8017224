//! OpenAI-compatible chat-completions client: `POST {base_url}/chat/completions` with
//! `stream: true`, Server-Sent Events parsed by `eventsource-stream`. The only module that
//! knows this provider JSON: the request's in [`request`], the streamed reply's in [`sse`].

mod request;
mod sse;

use request::{Hints, request_body};
pub(crate) use sse::events_of_body;
use sse::sse_to_events;

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::future::BoxFuture;
use secrecy::{ExposeSecret, SecretString};

use super::{LlmClient, LlmError, LlmRequest, LlmStream};
use crate::config::LlmConfig;

pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    /// `GET {base_url}/models`: the readiness probe.
    models_url: String,
    api_key: Option<SecretString>,
    idle_timeout: Duration,
    /// Requests cost money: `llm.metered`, else the endpoint is not on this machine or a
    /// private network.
    metered: bool,
    /// The provider hints sent (`llm.prompt_cache_key`, `llm.send_user`).
    hints: Hints,
}

impl OpenAiClient {
    pub fn new(config: &LlmConfig) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| LlmError::Connect(e.to_string()))?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            models_url: format!("{}/models", config.base_url.trim_end_matches('/')),
            api_key: config.api_key.clone(),
            idle_timeout: config.idle_timeout,
            metered: config
                .metered
                .unwrap_or_else(|| !is_local(&config.base_url)),
            hints: Hints {
                cache_key: config.prompt_cache_key,
                user: config.send_user,
            },
        })
    }

    async fn open(&self, request: LlmRequest) -> Result<LlmStream, LlmError> {
        let mut builder = self
            .http
            .post(&self.url)
            .json(&request_body(&request, self.hints));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose_secret());
        }
        let response = tokio::time::timeout(self.idle_timeout, builder.send())
            .await
            .map_err(|_| LlmError::Idle(self.idle_timeout))?
            .map_err(|e| LlmError::Connect(without_url(&e)))?;
        let status = response.status();
        if status.as_u16() == 429 {
            return Err(LlmError::RateLimited {
                retry_after: retry_after(response.headers()),
            });
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let mut body = body;
            body.truncate(512);
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
            });
        }
        let events = response.bytes_stream().eventsource();
        Ok(Box::pin(sse_to_events(events, self.idle_timeout)))
    }
}

/// A base URL whose host is `localhost`, a loopback, private or link-local address (a model
/// served next to chatd: Ollama, vLLM, llama.cpp) rather than a metered provider.
fn is_local(base_url: &str) -> bool {
    let Ok(url) = url::Url::parse(base_url) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Some(url::Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local()
        }
        None => false,
    }
}

impl LlmClient for OpenAiClient {
    fn is_metered(&self) -> bool {
        self.metered
    }

    fn stream(&self, request: LlmRequest) -> BoxFuture<'_, Result<LlmStream, LlmError>> {
        Box::pin(self.open(request))
    }

    fn provider_name(&self) -> &str {
        "openai_compatible"
    }

    /// `GET /models`: an answer shows the provider is up; 401/403 that the key is not
    /// taken. A provider without the endpoint (404, 405) is up all the same.
    fn probe(&self) -> BoxFuture<'_, Result<(), LlmError>> {
        Box::pin(async move {
            let mut builder = self.http.get(&self.models_url);
            if let Some(key) = &self.api_key {
                builder = builder.bearer_auth(key.expose_secret());
            }
            let wait = self.idle_timeout.min(PROBE_TIMEOUT);
            let response = tokio::time::timeout(wait, builder.send())
                .await
                .map_err(|_| LlmError::Idle(wait))?
                .map_err(|e| LlmError::Connect(without_url(&e)))?;
            let status = response.status();
            if status.is_success() || matches!(status.as_u16(), 404 | 405) {
                return Ok(());
            }
            Err(LlmError::Status {
                status: status.as_u16(),
                body: String::new(),
            })
        })
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The longest a readiness probe waits.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A short description of a request error: its kind and innermost cause, never the URL.
fn without_url(e: &reqwest::Error) -> String {
    use std::error::Error;
    let kind = if e.is_connect() {
        "connect"
    } else if e.is_timeout() {
        "timeout"
    } else {
        "request"
    };
    let mut cause = None;
    let mut source = e.source();
    while let Some(s) = source {
        cause = Some(s.to_string());
        source = s.source();
    }
    format!(
        "{kind} error: {}",
        cause.unwrap_or_else(|| "unknown".into())
    )
}

/// A request's body as the provider reads it (every hint sent): for tests that compare the
/// bytes a provider's prompt cache sees.
#[cfg(test)]
pub(crate) fn wire_body(request: &super::LlmRequest) -> serde_json::Result<serde_json::Value> {
    let hints = Hints {
        cache_key: true,
        user: true,
    };
    serde_json::to_value(request_body(request, hints))
}

#[cfg(test)]
mod tests;
