//! How one attempt of a skill request fails ([`ExecError`]: timeout, connection, HTTP status,
//! bad input or answer), and the HTTP helpers that map reqwest's outcomes onto it; shared by
//! the executor and the built-in `web-read`.

use std::time::Duration;

use reqwest::StatusCode;

/// Why one attempt of a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExecError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot reach the skill: {0}")]
    Connect(String),
    #[error("the skill answered HTTP {status}")]
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    #[error("{0}")]
    Invalid(String),
}

impl ExecError {
    /// Timeouts, connection errors and 5xx get one retry; 4xx and bad input none.
    pub fn is_retryable(&self) -> bool {
        match self {
            ExecError::Timeout(_) | ExecError::Connect(_) => true,
            ExecError::Status { status, .. } => *status >= 500,
            ExecError::Invalid(_) => false,
        }
    }

    /// A rate limit: how long to wait before trying again.
    pub fn rate_limited(&self) -> Option<Duration> {
        match self {
            ExecError::Status {
                status: 429,
                retry_after,
            } => Some(retry_after.unwrap_or(Duration::from_secs(1))),
            _ => None,
        }
    }
}

/// A reqwest error as an [`ExecError`]: a timeout after `deadline`, else a connection error.
pub fn transport(e: reqwest::Error, deadline: Duration) -> ExecError {
    if e.is_timeout() {
        ExecError::Timeout(deadline)
    } else {
        ExecError::Connect(e.to_string())
    }
}

/// Turns a non-2xx answer into an error (with `Retry-After` for 429).
pub fn checked(response: reqwest::Response) -> Result<reqwest::Response, ExecError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = (status == StatusCode::TOO_MANY_REQUESTS)
        .then(|| {
            response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
        })
        .flatten();
    Err(ExecError::Status {
        status: status.as_u16(),
        retry_after,
    })
}
