//! The built-in `web-read`: fetch one page and return its readable text, size-capped.
//! SSRF guard: the host is resolved first and every address checked (no private, loopback,
//! link-local, multicast, unspecified or metadata targets unless
//! `skills.allow_private_targets`), the connection is pinned to the checked address, and
//! each redirect hop is checked the same way.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};

use super::executor::{ExecError, checked, transport};
use crate::config::SkillsConfig;

const MAX_REDIRECTS: usize = 5;

/// Each hop gets its own client, pinned to the address that was checked.
pub async fn read(config: &SkillsConfig, url: &str) -> Result<Vec<Value>, ExecError> {
    let mut url = url::Url::parse(url).map_err(|e| ExecError::Invalid(format!("bad url: {e}")))?;
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ExecError::Invalid("only http(s) URLs can be read".into()));
        }
        let host = url
            .host_str()
            .ok_or_else(|| ExecError::Invalid("the URL has no host".into()))?
            .to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        let addr = resolve_checked(&host, port, config.allow_private_targets).await?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&host, addr)
            .timeout(config.timeout)
            .user_agent("chatd-web-read/1")
            .build()
            .map_err(|e| ExecError::Connect(e.to_string()))?;
        let response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| transport(e, config.timeout))?;
        if response.status().is_redirection() {
            let next = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| ExecError::Invalid("redirect without a Location".into()))?;
            url = url
                .join(next)
                .map_err(|e| ExecError::Invalid(format!("bad redirect: {e}")))?;
            continue;
        }
        let response = checked(response)?;
        let html = read_capped(response, config.max_read_bytes, config.timeout).await?;
        let truncated = html.len() >= config.max_read_bytes;
        let title = title_of(&html);
        let text = html2text::from_read(html.as_bytes(), 100)
            .map_err(|e| ExecError::Invalid(format!("unreadable page: {e}")))?;
        return Ok(vec![json!({
            "url": url.as_str(),
            "title": title,
            "text": text.trim(),
            "truncated": truncated,
        })]);
    }
    Err(ExecError::Invalid(format!(
        "more than {MAX_REDIRECTS} redirects"
    )))
}

async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    deadline: Duration,
) -> Result<String, ExecError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(e, deadline))? {
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= cap {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn title_of(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = lower[start..].find('>')? + start + 1;
    let end = lower[open_end..].find("</title>")? + open_end;
    let t = html.get(open_end..end)?.trim();
    (!t.is_empty()).then(|| t.chars().take(300).collect())
}

/// The first address of `host` if every address it resolves to may be contacted.
pub async fn resolve_checked(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<SocketAddr, ExecError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| ExecError::Connect(format!("cannot resolve {host}: {e}")))?
        .collect();
    let first = *addrs
        .first()
        .ok_or_else(|| ExecError::Connect(format!("{host} has no address")))?;
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(ExecError::Invalid(format!(
            "{host} resolves to {}, a private or reserved address; not fetched",
            bad.ip()
        )));
    }
    Ok(first)
}

/// Not private, loopback, link-local, multicast, unspecified, documentation or metadata.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // carrier-grade NAT
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19)) // benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local (incl. fd00:ec2::254)
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x2001 && s[1] == 0x0db8)) // documentation
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_addresses_are_refused() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["93.184.216.34", "2606:4700::1111"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn titles_are_found() {
        assert_eq!(
            title_of("<html><head><TITLE> Hi there </TITLE></head>").as_deref(),
            Some("Hi there")
        );
        assert_eq!(title_of("<p>no title</p>"), None);
    }
}
