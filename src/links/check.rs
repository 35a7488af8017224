//! One URL's check over HTTP, and what its answer means.
//!
//! HEAD first; a HEAD refused with 400, 403, 405 or 501 is asked again as a ranged GET
//! (`Range: bytes=0-4095`, reading at most [`GET_BODY_LIMIT`]), whose answer decides.
//! Redirects are followed by hand so every hop passes the guard. Every request carries the
//! headers of the check's browser profile ([`super::browser`]).
//!
//! Only definite answers make a link broken: 404 or 410 (after redirects), a name that does
//! not resolve, a refused connection. 401, 403, 429, the other 4xx, 5xx, timeouts, TLS and
//! other connection errors are inconclusive: the link stays.

use reqwest::header::RANGE;
use reqwest::{Client, StatusCode, Url};

use super::Verdict;
use super::browser::Profile;
use crate::net_guard::{Guard, GuardError, is_blocked};

/// Most body bytes read from a GET fallback (and the range it asks for).
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
        // The page is not there, or no longer: the only statuses that condemn a link.
        404 | 410 => Verdict::Broken,
        // Our own `Range` header refused (an empty resource): the resource is there.
        416 => Verdict::Valid,
        // 401/403 (sign-in, bot protection), 429 (rate limiting), 451 (not here, maybe for
        // the reader) and the rest of 4xx (often a bot wall's answer to a request it
        // dislikes) say nothing certain about the link; nor do 5xx.
        400..=599 => Verdict::Inconclusive,
        _ => Verdict::Valid,
    }
}

/// Whether a HEAD answered with `status` is asked again with a GET: refused methods (405,
/// 501), and 400/403, which sites behind bot protection often answer to HEAD alone. 401,
/// 429 and 5xx are not: a GET would not be let in either, or would add load.
fn head_refused(status: StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 403 | 405 | 501)
}

/// What a request that got no answer means. `proxied`: the client connects to the proxy,
/// so its connection errors are the proxy's, never the link's.
fn classify_error(err: &(dyn std::error::Error + 'static), proxied: bool) -> Verdict {
    if is_blocked(err) {
        return Verdict::Skipped;
    }
    let mut cur = Some(err);
    while let Some(e) = cur {
        // The guarded resolver's failure (it wraps the name lookup's own error).
        if let Some(guard) = e.downcast_ref::<GuardError>() {
            return resolve_failure(guard);
        }
        if !proxied
            && let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return Verdict::Broken;
        }
        cur = e.source();
    }
    Verdict::Inconclusive
}

/// A failed lookup of the target's name: broken only when the name does not exist.
fn resolve_failure(err: &GuardError) -> Verdict {
    match err {
        GuardError::Blocked(_) => Verdict::Skipped,
        GuardError::Resolve(io) if name_not_found(io) => Verdict::Broken,
        GuardError::Resolve(_) | GuardError::NoAddress => Verdict::Inconclusive,
    }
}

/// Whether a name lookup failed because the name does not exist (NXDOMAIN: `EAI_NONAME`),
/// not because resolution itself failed (`EAI_AGAIN`, `EAI_FAIL`: inconclusive). The
/// standard library keeps only `gai_strerror`'s text (unlocalised: Rust never calls
/// `setlocale`), so this matches the texts of glibc, musl and the BSDs/macOS, and Windows'
/// `WSAHOST_NOT_FOUND`. An unknown text counts as inconclusive: the link stays.
pub fn name_not_found(err: &std::io::Error) -> bool {
    const WSAHOST_NOT_FOUND: i32 = 11001;
    if cfg!(windows) && err.raw_os_error() == Some(WSAHOST_NOT_FOUND) {
        return true;
    }
    let text = err.to_string();
    [
        "Name or service not known",                    // glibc
        "Name does not resolve",                        // musl
        "nodename nor servname provided, or not known", // BSD, macOS
    ]
    .iter()
    .any(|t| text.contains(t))
}

pub struct Probe<'a> {
    pub client: &'a Client,
    pub guard: Guard,
    /// Through a proxy the client's resolver only sees the proxy's name, so targets are
    /// resolved and checked here first (the proxy then resolves on its own).
    pub proxied: bool,
    pub max_redirects: usize,
    /// The browser this check speaks as, on every request.
    pub browser: Profile,
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
                Err(e) => return classify_error(&e, self.proxied),
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
        Verdict::Inconclusive
    }

    /// Address guard before any connection: IP literals always, names when proxied
    /// (otherwise the client's guarded resolver checks them at connect time).
    async fn precheck(&self, url: &Url) -> Option<Verdict> {
        match url.host()? {
            url::Host::Ipv4(ip) => (!self.guard.allows(ip.into())).then_some(Verdict::Skipped),
            url::Host::Ipv6(ip) => (!self.guard.allows(ip.into())).then_some(Verdict::Skipped),
            url::Host::Domain(name) if self.proxied => match self.guard.resolve(name).await {
                Ok(_) => None,
                Err(e) => Some(resolve_failure(&e)),
            },
            url::Host::Domain(_) => None,
        }
    }

    /// The status of `url` and its `Location` header.
    async fn status(&self, url: &Url) -> Result<(StatusCode, Option<String>), reqwest::Error> {
        let head = self
            .browser
            .apply(self.client.head(url.clone()))
            .send()
            .await?;
        let status = head.status();
        if !head_refused(status) {
            return Ok((status, location(&head)));
        }
        drop(head);
        let range = format!("bytes=0-{}", GET_BODY_LIMIT - 1);
        let mut get = self
            .browser
            .apply(self.client.get(url.clone()))
            .header(RANGE, range)
            .send()
            .await?;
        let status = get.status();
        let location = location(&get);
        // Bounded even when the server ignores the range.
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
    fn only_404_and_410_condemn_a_link() {
        let v = |c: u16| classify(StatusCode::from_u16(c).unwrap());
        for c in [200, 204, 206, 304, 416] {
            assert_eq!(v(c), Verdict::Valid, "{c}");
        }
        for c in [404, 410] {
            assert_eq!(v(c), Verdict::Broken, "{c}");
        }
        for c in [
            400, 401, 403, 405, 406, 408, 429, 451, 499, 500, 501, 503, 599,
        ] {
            assert_eq!(v(c), Verdict::Inconclusive, "{c}");
        }
    }

    #[test]
    fn head_is_asked_again_as_get_only_when_refused() {
        let refused = |c: u16| head_refused(StatusCode::from_u16(c).unwrap());
        for c in [400, 403, 405, 501] {
            assert!(refused(c), "{c}");
        }
        for c in [200, 301, 401, 404, 410, 429, 500, 503] {
            assert!(!refused(c), "{c}");
        }
    }

    fn lookup_error(detail: &str) -> GuardError {
        GuardError::Resolve(std::io::Error::other(format!(
            "failed to lookup address information: {detail}"
        )))
    }

    #[test]
    fn only_a_name_that_does_not_exist_is_broken() {
        for detail in [
            "Name or service not known",
            "Name does not resolve",
            "nodename nor servname provided, or not known",
        ] {
            assert_eq!(
                resolve_failure(&lookup_error(detail)),
                Verdict::Broken,
                "{detail}"
            );
        }
        for detail in [
            "Temporary failure in name resolution",
            "Non-recoverable failure in name resolution",
            "Try again",
        ] {
            assert_eq!(
                resolve_failure(&lookup_error(detail)),
                Verdict::Inconclusive,
                "{detail}"
            );
        }
        assert_eq!(
            resolve_failure(&GuardError::NoAddress),
            Verdict::Inconclusive
        );
        let blocked = GuardError::Blocked(std::net::Ipv4Addr::LOCALHOST.into());
        assert_eq!(resolve_failure(&blocked), Verdict::Skipped);
    }

    /// An error that wraps another, as the HTTP client's errors wrap the connector's.
    #[derive(Debug, thiserror::Error)]
    #[error("request failed")]
    struct Wrapped(#[source] Box<dyn std::error::Error + Send + Sync>);

    #[test]
    fn connection_errors_are_classified_through_the_chain() {
        let refused = Wrapped(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(classify_error(&refused, false), Verdict::Broken);
        // Through a proxy, a refused connection is the proxy's.
        assert_eq!(classify_error(&refused, true), Verdict::Inconclusive);
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::InvalidData,
        ] {
            let e = Wrapped(Box::new(std::io::Error::from(kind)));
            assert_eq!(classify_error(&e, false), Verdict::Inconclusive, "{kind}");
        }
        let nxdomain = Wrapped(Box::new(lookup_error("Name or service not known")));
        assert_eq!(classify_error(&nxdomain, false), Verdict::Broken);
        assert_eq!(classify_error(&nxdomain, true), Verdict::Broken);
        let again = Wrapped(Box::new(lookup_error(
            "Temporary failure in name resolution",
        )));
        assert_eq!(classify_error(&again, false), Verdict::Inconclusive);
        let blocked = Wrapped(Box::new(GuardError::Blocked(
            std::net::Ipv4Addr::LOCALHOST.into(),
        )));
        assert_eq!(classify_error(&blocked, false), Verdict::Skipped);
    }
}
