//! The headers a link check sends: those of a current desktop browser, from a small set
//! rotated per check, so sites behind bot protection answer a check as they would answer
//! the reader who clicks the link. Owns nothing else (no client, no classification).
//!
//! The versions age: refresh [`PROFILES`] with the browsers' releases (a version far behind
//! the current one is itself a bot signal).

use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::RequestBuilder;
use reqwest::header::{ACCEPT, ACCEPT_LANGUAGE, CONNECTION, USER_AGENT};

/// One browser's request headers (each browser's own `Accept` and `Accept-Language`, so
/// the set is consistent with the `User-Agent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub user_agent: &'static str,
    pub accept: &'static str,
    pub accept_language: &'static str,
}

const CHROME_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
                             image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";
const GECKO_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// Current desktop Chrome (Windows, macOS), Firefox and Safari (late 2026).
pub const PROFILES: [Profile; 4] = [
    Profile {
        user_agent: "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                     (KHTML, like Gecko) Chrome/152.0.0.0 Safari/537.36",
        accept: CHROME_ACCEPT,
        accept_language: "en-US,en;q=0.9",
    },
    Profile {
        user_agent: "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:155.0) Gecko/20100101 \
                     Firefox/155.0",
        accept: GECKO_ACCEPT,
        accept_language: "en-US,en;q=0.5",
    },
    Profile {
        user_agent: "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 \
                     (KHTML, like Gecko) Version/26.4 Safari/605.1.15",
        accept: GECKO_ACCEPT,
        accept_language: "en-US,en;q=0.9",
    },
    Profile {
        user_agent: "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 \
                     (KHTML, like Gecko) Chrome/152.0.0.0 Safari/537.36",
        accept: CHROME_ACCEPT,
        accept_language: "en-US,en;q=0.9",
    },
];

/// Hands out [`PROFILES`] in turn: one per check (every hop and the GET fallback of a
/// check use the same one, as one browser would).
#[derive(Debug, Default)]
pub struct Rotation {
    next: AtomicUsize,
}

impl Rotation {
    pub fn next(&self) -> Profile {
        // Relaxed: the counter only spreads checks over the profiles, it orders nothing.
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        PROFILES[i % PROFILES.len()]
    }
}

impl Profile {
    /// `request` with this browser's headers, and `Connection: close` (a check makes one
    /// request per connection).
    pub fn apply(&self, request: RequestBuilder) -> RequestBuilder {
        request
            .header(USER_AGENT, self.user_agent)
            .header(ACCEPT, self.accept)
            .header(ACCEPT_LANGUAGE, self.accept_language)
            .header(CONNECTION, "close")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rotation_visits_every_profile_in_turn() {
        let rotation = Rotation::default();
        let seen: Vec<Profile> = (0..PROFILES.len() * 2).map(|_| rotation.next()).collect();
        assert_eq!(seen[..PROFILES.len()], PROFILES);
        assert_eq!(seen[PROFILES.len()..], PROFILES);
    }

    #[test]
    fn profiles_look_like_browsers() {
        for p in PROFILES {
            assert!(
                p.user_agent.starts_with("Mozilla/5.0 ("),
                "{}",
                p.user_agent
            );
            assert!(!p.user_agent.contains("  "), "{}", p.user_agent);
            for bot in ["compatible", "bot", "chatd", "http"] {
                assert!(
                    !p.user_agent.to_lowercase().contains(bot),
                    "{}",
                    p.user_agent
                );
            }
            assert!(p.accept.starts_with("text/html,"));
            assert!(!p.accept.contains(' '), "{}", p.accept);
            assert!(p.accept_language.starts_with("en-US,"));
        }
    }
}
