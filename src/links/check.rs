//! One URL's check over HTTP: HEAD (GET on 405/501, reading at most [`GET_BODY_LIMIT`]),
//! redirects followed by hand so every hop passes the guard, and the classification.

use reqwest::{Client, Method, StatusCode, Url};

use super::Verdict;
use crate::net_guard::{Guard, GuardError, is_blocked};

/// Most body bytes read from a GET fallback.
pub const GET_BODY_LIMIT: usize = 4096;

/// The URL to check: parsed, http(s) with a host, fragment removed. `None`: malformed.
pub fn normalize(raw: &str) -> Option<Url> {
    let mut url = Url::parse(raw.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return None;
    }
    url.set_fragment(None);
    Some(url)
}

/// What a final status (after redirects) means.
pub fn classify(status: StatusCode) -> Verdict {
    match status.as_u16() {
        // Rate limiting and request timeouts say nothing about the link.
        408 | 429 => Verdict::Temporary,
        400..=499 => Verdict::Broken,
        500..=599 => Verdict::Temporary,
        _ => Verdict::Valid,
    }
}

pub struct Probe<'a> {
    pub client: &'a Client,
    pub guard: Guard,
    /// Through a proxy the client's resolver only sees the proxy's name, so targets are
    /// resolved and checked here first (the proxy then resolves on its own).
    pub proxied: bool,
    pub max_redirects: usize,
}

impl Probe<'_> {
    /// Checks `url` (already normalized); the caller bounds the time.
    pub async fn run(&self, mut url: Url) -> Verdict {
        for _ in 0..=self.max_redirects {
            if let Some(verdict) = self.precheck(&url).await {
                return verdict;
            }
            let (status, location) = match self.status(&url).await {
                Ok(s) => s,
                Err(e) if is_blocked(&e) => return Verdict::Skipped,
                Err(_) => return Verdict::Temporary,
            };
            if !status.is_redirection() {
                return classify(status);
            }
            // A 3xx without a usable http(s) `Location` stands as it is.
            let Some(next) = location
                .and_then(|l| url.join(&l).ok())
                .and_then(|u| normalize(u.as_str()))
            else {
                return Verdict::Valid;
            };
            url = next;
        }
        // Too many redirects: nothing certain about the link, leave it.
        Verdict::Temporary
    }

    /// Address guard before any connection: IP literals always, names when proxied
    /// (otherwise the client's guarded resolver checks them at connect time).
    async fn precheck(&self, url: &Url) -> Option<Verdict> {
        match url.host()? {
            url::Host::Ipv4(ip) => (!self.guard.allows(ip.into())).then_some(Verdict::Skipped),
            url::Host::Ipv6(ip) => (!self.guard.allows(ip.into())).then_some(Verdict::Skipped),
            url::Host::Domain(name) if self.proxied => match self.guard.resolve(name).await {
                Ok(_) => None,
                Err(GuardError::Blocked(_)) => Some(Verdict::Skipped),
                Err(_) => Some(Verdict::Temporary),
            },
            url::Host::Domain(_) => None,
        }
    }

    /// The status of `url` and its `Location` header.
    async fn status(&self, url: &Url) -> Result<(StatusCode, Option<String>), reqwest::Error> {
        let head = self.client.head(url.clone()).send().await?;
        let status = head.status();
        if status != StatusCode::METHOD_NOT_ALLOWED && status != StatusCode::NOT_IMPLEMENTED {
            return Ok((status, location(&head)));
        }
        drop(head);
        let mut get = self.client.request(Method::GET, url.clone()).send().await?;
        let status = get.status();
        let location = location(&get);
        let mut read = 0;
        while read < GET_BODY_LIMIT {
            match get.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Ok((status, location))
    }
}

fn location(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::LOCATION)?
        .to_str()
        .ok()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_strips_fragments_and_rejects_malformed() {
        assert_eq!(
            normalize("https://a.example/x?y=1#part").map(String::from),
            Some("https://a.example/x?y=1".to_string())
        );
        assert!(normalize("http://exa mple.com/x").is_none());
        assert!(normalize("http://").is_none());
        assert!(normalize("https://[::1").is_none());
        assert!(normalize("ftp://a.example").is_none());
    }

    #[test]
    fn classification() {
        let v = |c: u16| classify(StatusCode::from_u16(c).unwrap());
        assert_eq!(v(200), Verdict::Valid);
        assert_eq!(v(204), Verdict::Valid);
        assert_eq!(v(304), Verdict::Valid);
        assert_eq!(v(404), Verdict::Broken);
        assert_eq!(v(403), Verdict::Broken);
        assert_eq!(v(410), Verdict::Broken);
        assert_eq!(v(429), Verdict::Temporary);
        assert_eq!(v(500), Verdict::Temporary);
        assert_eq!(v(503), Verdict::Temporary);
    }
}
