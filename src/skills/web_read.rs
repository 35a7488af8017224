//! The built-in `web-read`: fetch one page and return its readable text, size-capped.
//! Every connection (and every redirect hop) goes through the SSRF guard
//! ([`crate::net_guard`]): the name is resolved, every address checked, and the client only
//! gets the checked addresses; private targets only with `skills.allow_private_targets`,
//! metadata addresses never.

use std::time::Duration;

use serde_json::{Value, json};

use super::exec_error::{ExecError, checked, transport};
use crate::config::SkillsConfig;
use crate::net_guard::{Guard, GuardedResolver, is_blocked};

const MAX_REDIRECTS: usize = 5;

pub async fn read(config: &SkillsConfig, url: &str) -> Result<Vec<Value>, ExecError> {
    let url = url::Url::parse(url).map_err(|e| ExecError::Invalid(format!("bad url: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ExecError::Invalid("only http(s) URLs can be read".into()));
    }
    let guard = Guard {
        allow_private: config.allow_private_targets,
    };
    // A literal address never reaches the resolver: check it here.
    if let Some(ip) = literal_ip(&url)
        && !guard.allows(ip)
    {
        return Err(refused(ip));
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(GuardedResolver(guard))
        .redirect(redirects(guard))
        .timeout(config.timeout)
        .user_agent("chatd-web-read/1")
        .build()
        .map_err(|e| ExecError::Connect(e.to_string()))?;
    let response = client.get(url).send().await.map_err(|e| {
        if is_blocked(&e) || e.is_redirect() {
            ExecError::Invalid(format!("not fetched: {}", source_text(&e)))
        } else {
            transport(e, config.timeout)
        }
    })?;
    let final_url = response.url().to_string();
    let response = checked(response)?;
    let html = read_capped(response, config.max_read_bytes, config.timeout).await?;
    let truncated = html.len() >= config.max_read_bytes;
    let title = title_of(&html);
    let text = html2text::from_read(html.as_bytes(), 100)
        .map_err(|e| ExecError::Invalid(format!("unreadable page: {e}")))?;
    Ok(vec![json!({
        "url": final_url,
        "title": title,
        "text": text.trim(),
        "truncated": truncated,
    })])
}

/// Redirects are followed (bounded); a hop to a literal address the guard refuses stops.
fn redirects(guard: Guard) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        match literal_ip(attempt.url()) {
            Some(ip) if !guard.allows(ip) => attempt.error(refused(ip).to_string()),
            _ => attempt.follow(),
        }
    })
}

fn literal_ip(url: &url::Url) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(v4.into()),
        url::Host::Ipv6(v6) => Some(v6.into()),
        url::Host::Domain(_) => None,
    }
}

fn refused(ip: std::net::IpAddr) -> ExecError {
    ExecError::Invalid(format!("{ip} is not a public address; not fetched"))
}

/// The innermost error text (reqwest's own message is generic).
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_found() {
        assert_eq!(
            title_of("<html><head><TITLE> Hi there </TITLE></head>").as_deref(),
            Some("Hi there")
        );
        assert_eq!(title_of("<p>no title</p>"), None);
    }
}
