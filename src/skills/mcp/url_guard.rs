//! The SSRF pre-check of an MCP tool's URL arguments (`guarded_urls` in the manifest): an
//! MCP server that fetches URLs itself (the shipped `fetch`) connects with its own code,
//! outside chatd's guarded resolver, so chatd checks each declared argument before the call
//! is forwarded: an http(s) URL whose host is public ([`crate::net_guard`]; private,
//! loopback and link-local targets only with `skills.allow_private_targets`, metadata
//! addresses never). A refused request never reaches the server.
//!
//! What it cannot cover: the server resolves the name again (a name that changes its
//! answer between the two lookups gets through), follows redirects, and may be sent
//! through a proxy. Only the server's own guard, or its network (a namespace, a container,
//! an egress proxy), bounds those.

use serde_json::Value;

use crate::net_guard::{Guard, GuardError};
use crate::skills::exec_error::ExecError;

/// Checks every `fields` argument of `request` that is present (each must be a string).
pub async fn check(fields: &[String], request: &Value, guard: Guard) -> Result<(), ExecError> {
    for field in fields {
        match request.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(url)) => check_url(url, guard)
                .await
                .map_err(|why| ExecError::Invalid(format!("`{field}`: {why}; not fetched")))?,
            Some(_) => {
                return Err(ExecError::Invalid(format!("`{field}` must be a URL")));
            }
        }
    }
    Ok(())
}

async fn check_url(url: &str, guard: Guard) -> Result<(), String> {
    let url = url::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("only http(s) URLs".into());
    }
    let refused = |ip: std::net::IpAddr| format!("{ip} is not a public address");
    match url.host() {
        Some(url::Host::Ipv4(v4)) if !guard.allows(v4.into()) => Err(refused(v4.into())),
        Some(url::Host::Ipv6(v6)) if !guard.allows(v6.into()) => Err(refused(v6.into())),
        Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => Ok(()),
        Some(url::Host::Domain(name)) => match guard.resolve(name).await {
            Ok(_) => Ok(()),
            Err(GuardError::Blocked(ip)) => Err(format!("{name} resolves to {}", refused(ip))),
            Err(e) => Err(format!("{name}: {e}")),
        },
        None => Err("no host".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn checked(url: Value, allow_private: bool) -> Result<(), String> {
        let request = json!({ "url": url });
        check(&["url".into()], &request, Guard { allow_private })
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn private_targets_are_refused_before_the_server_hears_of_them() {
        for url in [
            "http://127.0.0.1:8080/",
            "http://2130706433/",
            "http://127.1/",
            "http://[::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://localhost/",
            "http://169.254.169.254/latest/meta-data/",
        ] {
            let why = checked(json!(url), false).await.unwrap_err();
            assert!(why.contains("not a public address"), "{url}: {why}");
        }
        let scheme = checked(json!("file:///etc/passwd"), false).await;
        assert!(scheme.unwrap_err().contains("http(s)"));
        assert!(checked(json!(5), false).await.is_err());
        // Public, absent or allowed: forwarded.
        assert!(
            checked(json!("http://93.184.215.14/x"), false)
                .await
                .is_ok()
        );
        assert!(checked(Value::Null, false).await.is_ok());
        assert!(checked(json!("http://127.0.0.1/"), true).await.is_ok());
        let metadata = checked(json!("http://169.254.169.254/"), true).await;
        assert!(metadata.is_err(), "metadata addresses never");
    }
}
