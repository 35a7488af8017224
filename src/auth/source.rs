//! Where the upgrade request carries its token: the `token` query parameter, a
//! `bearer.<token>` WebSocket subprotocol, the session cookie (`auth.cookie_name`), or an
//! `Authorization: Bearer` header. Owns the subprotocol convention; knows nothing of how a
//! token is verified.

use axum::http::{HeaderMap, header};

/// The subprotocol chatd speaks and selects in the handshake answer. A browser that offers
/// subprotocols fails the connection unless the server selects one of them, so a client
/// sending its token as a subprotocol offers this one beside it.
pub const SUBPROTOCOL: &str = "chatd";

/// Prefix of the subprotocol that carries a token: `bearer.<jwt>` (a JWT's characters,
/// base64url and `.`, are all valid in a subprotocol name).
pub const BEARER_SUBPROTOCOL_PREFIX: &str = "bearer.";

/// Where the upgrade request's token came from. A cookie is the one a browser sends by
/// itself, to any page's request: only that one needs the origin checked against
/// cross-site use. A subprotocol, like the query, is set by the page's own script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    Query,
    Subprotocol,
    Cookie,
    Bearer,
}

/// The request's token, tried in order: `?token=`, a `bearer.<token>` subprotocol, the
/// `cookie_name` cookie, `Authorization: Bearer`. Explicit credentials come before the
/// cookie a browser adds by itself.
pub fn token_from_request<'a>(
    query_token: Option<&'a str>,
    headers: &'a HeaderMap,
    cookie_name: &str,
) -> Option<(&'a str, TokenSource)> {
    if let Some(t) = query_token.filter(|t| !t.is_empty()) {
        return Some((t, TokenSource::Query));
    }
    if let Some(t) = offered_subprotocols(headers)
        .find_map(|p| p.strip_prefix(BEARER_SUBPROTOCOL_PREFIX))
        .filter(|t| !t.is_empty())
    {
        return Some((t, TokenSource::Subprotocol));
    }
    if let Some(t) = cookie(headers, cookie_name) {
        return Some((t, TokenSource::Cookie));
    }
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| (t, TokenSource::Bearer))
}

/// Whether the client offered the `chatd` subprotocol (required beside a token one).
pub fn offers_chatd(headers: &HeaderMap) -> bool {
    offered_subprotocols(headers).any(|p| p == SUBPROTOCOL)
}

/// Every subprotocol the client offered (`Sec-WebSocket-Protocol`, comma-separated, maybe
/// in several header lines).
fn offered_subprotocols(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, v)| *n == name && !v.is_empty())
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_sources_in_order() {
        let mut headers = HeaderMap::new();
        headers.insert("cookie", "a=b; chatd_token=fromcookie".parse().unwrap());
        headers.insert("authorization", "Bearer frombearer".parse().unwrap());
        fn from<'a>(q: Option<&'a str>, h: &'a HeaderMap) -> Option<(&'a str, TokenSource)> {
            token_from_request(q, h, "chatd_token")
        }
        assert_eq!(from(Some("q"), &headers), Some(("q", TokenSource::Query)));
        assert_eq!(
            from(None, &headers),
            Some(("fromcookie", TokenSource::Cookie))
        );
        // Another cookie name: the chatd_token cookie is not read.
        assert_eq!(
            token_from_request(None, &headers, "idp_session"),
            Some(("frombearer", TokenSource::Bearer))
        );
        headers.insert(
            "sec-websocket-protocol",
            "chatd, bearer.a.b.c".parse().unwrap(),
        );
        assert_eq!(
            from(None, &headers),
            Some(("a.b.c", TokenSource::Subprotocol))
        );
        assert!(offers_chatd(&headers));
        headers.remove("sec-websocket-protocol");
        headers.remove("cookie");
        assert_eq!(
            from(None, &headers),
            Some(("frombearer", TokenSource::Bearer))
        );
        assert!(!offers_chatd(&headers));
        assert_eq!(from(None, &HeaderMap::new()), None);
    }

    #[test]
    fn subprotocols_across_header_lines() {
        let mut headers = HeaderMap::new();
        headers.append("sec-websocket-protocol", "bearer.tok".parse().unwrap());
        headers.append("sec-websocket-protocol", " chatd ".parse().unwrap());
        assert!(offers_chatd(&headers));
        assert_eq!(
            token_from_request(None, &headers, "c"),
            Some(("tok", TokenSource::Subprotocol))
        );
        headers.insert("sec-websocket-protocol", "bearer.".parse().unwrap());
        assert_eq!(token_from_request(None, &headers, "c"), None);
    }
}
