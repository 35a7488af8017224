//! Background validation of the links in streamed answers, and their repair.
//!
//! Each completed paragraph of an answer is handed to its [`AnswerLinks`], which queues
//! the paragraph's markdown links (outside code) on the shared [`LinkChecker`] without
//! waiting. When the answer ends, [`AnswerLinks::repair`] waits (bounded) for those checks
//! and replaces every broken link by a search link on its own text.
//!
//! The checker: a global and a per-host concurrency limit, HEAD then a ranged GET when the
//! HEAD is refused, the headers of a current browser (rotated per check), redirects
//! followed by hand (each hop guarded), a per-URL deadline, results cached per URL
//! (definite ones for `links.cache_ttl`, inconclusive ones for at most
//! [`INCONCLUSIVE_TTL`]; concurrent checks of one URL shared), and the SSRF guard
//! ([`crate::net_guard`]).
//!
//! A link is broken only on a definite answer: 404 or 410 after redirects, a name that
//! does not resolve, a refused connection (or a malformed URL). Anything else that is not a
//! success (401, 403, 429, other 4xx, 5xx, timeouts, TLS errors) is inconclusive and the
//! link stays: a site behind bot protection must not lose its good links. The rule per
//! status and error is in [`check`].

mod browser;
mod check;
pub mod extract;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use secrecy::ExposeSecret;
use tokio::sync::{OnceCell, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::LinksConfig;
use crate::metrics::Metrics;
use crate::net_guard::{Guard, GuardedResolver};
use crate::pipeline::answer::ParagraphHook;
use check::Probe;

/// How long repair waits beyond `links.timeout` for checks still queued.
const REPAIR_GRACE: Duration = Duration::from_secs(1);

/// Distinct links checked per answer; further ones are left as they are.
pub const MAX_LINKS_PER_ANSWER: usize = 100;

/// Longest reuse of an inconclusive result (less when `links.cache_ttl` is shorter): a
/// rate limit or an outage passes, and the next answer's check may get a definite answer.
pub const INCONCLUSIVE_TTL: Duration = Duration::from_secs(60);

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx, or a 3xx left after redirects.
    Valid,
    /// 404 or 410, a name that does not resolve, a refused connection, a malformed URL:
    /// replaced.
    Broken,
    /// 401, 403, 429, other 4xx, 5xx, timeout, TLS or other connection failure, too many
    /// redirects: left alone, and reused for a shorter time.
    Inconclusive,
    /// The address guard refused the target: left alone, never contacted.
    Skipped,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("links.proxy: {0}")]
    Proxy(reqwest::Error),
    #[error("link checker HTTP client: {0}")]
    Client(reqwest::Error),
}

/// One URL's cached (or in-flight) result.
struct Slot {
    verdict: Arc<OnceCell<Verdict>>,
    created: Instant,
}

/// The shared checker (one per app).
pub struct LinkChecker {
    config: LinksConfig,
    client: reqwest::Client,
    guard: Guard,
    global: Semaphore,
    hosts: DashMap<String, Arc<Semaphore>>,
    cache: Mutex<HashMap<String, Slot>>,
    metrics: Arc<Metrics>,
    /// The browser headers of the next check.
    browsers: browser::Rotation,
    /// Fires at shutdown: running checks end as inconclusive.
    shutdown: CancellationToken,
}

impl LinkChecker {
    pub fn new(
        config: &LinksConfig,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Result<Self, LinkError> {
        let guard = Guard {
            allow_private: config.allow_private_targets,
        };
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .pool_max_idle_per_host(0);
        builder = match &config.proxy {
            Some(proxy) => builder.proxy(
                reqwest::Proxy::all(proxy.expose_secret().trim()).map_err(LinkError::Proxy)?,
            ),
            // No environment proxies either: the guarded resolver must see the target.
            None => builder.no_proxy().dns_resolver(GuardedResolver(guard)),
        };
        Ok(Self {
            client: builder.build().map_err(LinkError::Client)?,
            guard,
            global: Semaphore::new(config.concurrency),
            hosts: DashMap::new(),
            cache: Mutex::new(HashMap::new()),
            metrics,
            browsers: browser::Rotation::default(),
            shutdown,
            config: config.clone(),
        })
    }

    pub fn config(&self) -> &LinksConfig {
        &self.config
    }

    /// A new answer's link tracker.
    pub fn answer(self: &Arc<Self>) -> AnswerLinks {
        AnswerLinks {
            checker: self.clone(),
            batch: Mutex::new(Batch::default()),
        }
    }

    /// The verdict for `raw` (as written in the answer): cached (see [`reuse_for`]), and one
    /// check at a time per URL.
    pub async fn check(&self, raw: &str) -> Verdict {
        let Some(url) = check::normalize(raw) else {
            self.metrics.links_broken.inc();
            return Verdict::Broken;
        };
        let cell = self.slot(url.as_str());
        *cell.get_or_init(|| self.check_uncached(url)).await
    }

    fn slot(&self, key: &str) -> Arc<OnceCell<Verdict>> {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ttl = self.config.cache_ttl;
        let fresh = |slot: &Slot| match slot.verdict.get() {
            None => true,
            Some(v) => slot.created.elapsed() < reuse_for(*v, ttl),
        };
        if let Some(slot) = cache.get(key)
            && fresh(slot)
        {
            return slot.verdict.clone();
        }
        if cache.len() >= self.config.cache_max_entries {
            cache.retain(|_, s| fresh(s));
            if cache.len() >= self.config.cache_max_entries {
                cache.clear();
            }
        }
        let verdict = Arc::new(OnceCell::new());
        cache.insert(
            key.to_string(),
            Slot {
                verdict: verdict.clone(),
                created: Instant::now(),
            },
        );
        verdict
    }

    async fn check_uncached(&self, url: reqwest::Url) -> Verdict {
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let per_host = self
            .hosts
            .entry(host.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.per_host_concurrency)))
            .clone();
        let verdict = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => Verdict::Inconclusive,
            v = self.limited(&per_host, url) => v,
        };
        drop(per_host);
        self.hosts
            .remove_if(&host, |_, s| Arc::strong_count(s) == 1);
        let m = &self.metrics;
        match verdict {
            Verdict::Broken => m.links_broken.inc(),
            Verdict::Inconclusive => m.links_temporary.inc(),
            Verdict::Skipped => m.links_skipped.inc(),
            Verdict::Valid => 0,
        };
        if verdict != Verdict::Skipped {
            m.links_checked.inc();
        }
        verdict
    }

    /// Runs the probe under the per-host and global limits and the per-URL deadline.
    async fn limited(&self, per_host: &Semaphore, url: reqwest::Url) -> Verdict {
        let (Ok(_host), Ok(_global)) = (per_host.acquire().await, self.global.acquire().await)
        else {
            return Verdict::Inconclusive;
        };
        let started = Instant::now();
        let probe = Probe {
            client: &self.client,
            guard: self.guard,
            proxied: self.config.proxy.is_some(),
            max_redirects: self.config.max_redirects,
            browser: self.browsers.next(),
        };
        let verdict = tokio::time::timeout(self.config.timeout, probe.run(url))
            .await
            .unwrap_or(Verdict::Inconclusive);
        if verdict != Verdict::Skipped {
            self.metrics
                .link_check_seconds
                .observe(started.elapsed().as_secs_f64());
        }
        verdict
    }
}

/// How long a verdict is reused: `cache_ttl` for definite ones (and the guard's refusals),
/// at most [`INCONCLUSIVE_TTL`] for inconclusive ones.
fn reuse_for(verdict: Verdict, cache_ttl: Duration) -> Duration {
    match verdict {
        Verdict::Inconclusive => cache_ttl.min(INCONCLUSIVE_TTL),
        Verdict::Valid | Verdict::Broken | Verdict::Skipped => cache_ttl,
    }
}

/// The links of one answer: checks queued per paragraph, awaited by `repair`.
pub struct AnswerLinks {
    checker: Arc<LinkChecker>,
    batch: Mutex<Batch>,
}

#[derive(Default)]
struct Batch {
    in_fence: bool,
    queued: HashSet<String>,
    /// Owned checks: dropping the answer (a cancelled turn) aborts them.
    checks: JoinSet<(String, Verdict)>,
}

impl ParagraphHook for AnswerLinks {
    fn paragraph(&self, text: &str) {
        let mut batch = self
            .batch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Batch {
            in_fence,
            queued,
            checks,
        } = &mut *batch;
        for link in extract::links(text, in_fence) {
            if queued.len() >= MAX_LINKS_PER_ANSWER {
                break;
            }
            if !queued.insert(link.url.to_string()) {
                continue;
            }
            let checker = self.checker.clone();
            let raw = link.url.to_string();
            checks.spawn(async move {
                let verdict = checker.check(&raw).await;
                (raw, verdict)
            });
        }
    }
}

/// A corrected answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub text: String,
    /// (link text, original URL) of every replaced link, in order.
    pub replaced: Vec<(String, String)>,
}

impl AnswerLinks {
    /// Waits for this answer's checks (at most `links.timeout` + 1 s; unfinished ones
    /// count as inconclusive), then replaces the broken links in `text`. `None`: nothing to
    /// change, or `cancel` fired while waiting.
    pub async fn repair(self, text: &str, cancel: &CancellationToken) -> Option<Repair> {
        let mut checks = std::mem::take(
            &mut self
                .batch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .checks,
        );
        if checks.is_empty() {
            return None;
        }
        let mut broken = HashSet::new();
        let collect = async {
            while let Some(done) = checks.join_next().await {
                if let Ok((url, Verdict::Broken)) = done {
                    broken.insert(url);
                }
            }
        };
        let wait = self.checker.config.timeout + REPAIR_GRACE;
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            _ = tokio::time::timeout(wait, collect) => {}
        }
        if broken.is_empty() {
            return None;
        }
        let (fixed, replaced) =
            extract::replace_broken(text, &self.checker.config.search_url_template, |url| {
                broken.contains(url)
            });
        if replaced.is_empty() {
            return None;
        }
        self.checker
            .metrics
            .links_replaced
            .inc_by(replaced.len() as u64);
        Some(Repair {
            text: fixed,
            replaced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inconclusive_results_are_reused_for_less_time() {
        let ttl = Duration::from_secs(600);
        for v in [Verdict::Valid, Verdict::Broken, Verdict::Skipped] {
            assert_eq!(reuse_for(v, ttl), ttl, "{v:?}");
        }
        assert_eq!(reuse_for(Verdict::Inconclusive, ttl), INCONCLUSIVE_TTL);
        let short = Duration::from_secs(5);
        assert_eq!(reuse_for(Verdict::Inconclusive, short), short);
    }
}
