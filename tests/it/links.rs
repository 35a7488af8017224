//! Link validation end to end: the fake LLM answers with links to a local HTTP server that
//! plays every kind of site; broken links (404/410, unresolvable names, refused
//! connections) come back as search links before the final frame, inconclusive ones (bot
//! walls, 401/403/429, 5xx) stay, the AI cache keeps the corrected answer, and the SSRF
//! guard keeps private targets uncontacted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use chatd::config::Config;
use chatd_protocol::{AiMessageUpdate, ClientMessage, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;
use tokio::sync::{Notify, watch};

use crate::support::{TestApp, conversation, spawn_app, use_llm, user_message};

/// A local site: every path is a behaviour; requests are counted per (method, path) and
/// logged with their headers and the status they got.
struct Site {
    addr: SocketAddr,
    shared: Arc<SiteState>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct SiteState {
    hits: Mutex<HashMap<(String, String), usize>>,
    hit: Notify,
    release: watch::Sender<bool>,
    /// Requests to `/hold/*` in progress, and the most seen at once.
    in_flight: Mutex<(usize, usize)>,
    log: Mutex<Vec<Seen>>,
}

/// One request the site answered.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    headers: HeaderMap,
    status: StatusCode,
}

impl Seen {
    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

impl Site {
    async fn start() -> Site {
        let shared = Arc::new(SiteState::default());
        let app = Router::new().fallback(serve).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Site {
            addr,
            shared,
            server,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self, method: &str, path: &str) -> usize {
        let hits = self.shared.hits.lock().unwrap();
        hits.get(&(method.to_string(), path.to_string()))
            .copied()
            .unwrap_or(0)
    }

    fn total_hits(&self) -> usize {
        self.shared.hits.lock().unwrap().values().sum()
    }

    /// The requests to `path` the site answered, in order.
    fn seen(&self, path: &str) -> Vec<Seen> {
        let log = self.shared.log.lock().unwrap();
        log.iter().filter(|s| s.path == path).cloned().collect()
    }

    /// Waits until `path` was requested at least once.
    async fn wait_for_hit(&self, path: &str) {
        let wait = async {
            loop {
                let seen = self.shared.hit.notified();
                if self.hits("HEAD", path) > 0 {
                    return;
                }
                seen.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(15), wait)
            .await
            .expect("the site saw no request in time");
    }

    /// Waits until `n` requests to `/hold/*` are in progress at once.
    async fn wait_in_flight(&self, n: usize) {
        let wait = async {
            loop {
                let seen = self.shared.hit.notified();
                if self.shared.in_flight.lock().unwrap().0 >= n {
                    return;
                }
                seen.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(15), wait)
            .await
            .expect("fewer requests in flight than expected");
    }

    fn max_in_flight(&self) -> usize {
        self.shared.in_flight.lock().unwrap().1
    }

    fn release(&self) {
        self.shared.release.send_replace(true);
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(
    State(site): State<Arc<SiteState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path().to_string();
    *site
        .hits
        .lock()
        .unwrap()
        .entry((method.to_string(), path.clone()))
        .or_default() += 1;
    let response = respond(&site, &method, &path, &headers).await;
    site.log.lock().unwrap().push(Seen {
        method,
        path,
        headers,
        status: response.status(),
    });
    response
}

/// What a desktop browser sends, as a bot wall would judge it.
fn browser_like(headers: &HeaderMap) -> bool {
    let get = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let agent = get(header::USER_AGENT);
    agent.starts_with("Mozilla/5.0 (")
        && !agent.contains("compatible")
        && get(header::ACCEPT).starts_with("text/html")
        && !get(header::ACCEPT_LANGUAGE).is_empty()
}

/// A ranged GET gets the range it asked for (206); any other GET the whole page.
fn page(headers: &HeaderMap) -> Response {
    let body = "x".repeat(64 * 1024);
    match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some("bytes=0-4095") => (
            StatusCode::PARTIAL_CONTENT,
            [(
                header::CONTENT_RANGE,
                format!("bytes 0-4095/{}", body.len()),
            )],
            body[..4096].to_string(),
        )
            .into_response(),
        _ => (StatusCode::OK, body).into_response(),
    }
}

async fn respond(site: &SiteState, method: &Method, path: &str, headers: &HeaderMap) -> Response {
    let head = method == Method::HEAD;
    if path.starts_with("/hold/") {
        {
            let mut f = site.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        site.hit.notify_waiters();
        let mut rx = site.release.subscribe();
        let _ = rx.wait_for(|r| *r).await;
        site.in_flight.lock().unwrap().0 -= 1;
        return StatusCode::NOT_FOUND.into_response();
    }
    site.hit.notify_waiters();
    if path.starts_with("/bot-wall") {
        return match browser_like(headers) {
            true => StatusCode::OK.into_response(),
            false => StatusCode::FORBIDDEN.into_response(),
        };
    }
    match path {
        "/ok" | "/ok-twice" => StatusCode::OK.into_response(),
        "/missing" => StatusCode::NOT_FOUND.into_response(),
        "/forbidden" => StatusCode::FORBIDDEN.into_response(),
        "/nohead" if head => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        "/nohead" => (StatusCode::OK, "x".repeat(64 * 1024)).into_response(),
        "/unauthorized" => StatusCode::UNAUTHORIZED.into_response(),
        "/rate-limited" => StatusCode::TOO_MANY_REQUESTS.into_response(),
        "/legal" => StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS.into_response(),
        "/bad-request" => StatusCode::BAD_REQUEST.into_response(),
        "/unavailable" => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        "/gone" => StatusCode::GONE.into_response(),
        "/to-gone" => {
            (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, "/gone")]).into_response()
        }
        "/to-nowhere" => (
            StatusCode::FOUND,
            [(header::LOCATION, "http://nowhere.invalid/page")],
        )
            .into_response(),
        "/head-refused" if head => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        "/head-not-implemented" if head => StatusCode::NOT_IMPLEMENTED.into_response(),
        "/head-forbidden" if head => StatusCode::FORBIDDEN.into_response(),
        "/head-refused" | "/head-not-implemented" | "/head-forbidden" => page(headers),
        "/head-refused-gone" if head => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        "/head-refused-gone" => StatusCode::GONE.into_response(),
        "/error" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "/slow" => std::future::pending().await,
        "/moved" => (StatusCode::FOUND, [(header::LOCATION, "/missing")]).into_response(),
        "/to-metadata" => (
            StatusCode::FOUND,
            [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
        )
            .into_response(),
        "/held" => {
            let mut rx = site.release.subscribe();
            let _ = rx.wait_for(|r| *r).await;
            StatusCode::NOT_FOUND.into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn text(chunks: &[&str]) -> Reply {
    Reply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

fn links_on(config: &mut Config, allow_private: bool) {
    config.links.enabled = true;
    config.links.allow_private_targets = allow_private;
    config.links.timeout = Duration::from_secs(1);
}

fn search(q: &str) -> String {
    format!("https://search.brave.com/search?q={q}")
}

/// Every `ai_message_update` of one answer, up to and including the final one.
async fn updates(ws: &mut WsClient) -> Vec<AiMessageUpdate> {
    let mut out = Vec::new();
    loop {
        if let ServerMessage::AiMessageUpdate(u) = ws.recv().await {
            let last = u.is_final_chunk;
            out.push(u);
            if last {
                return out;
            }
        }
    }
}

#[tokio::test]
async fn broken_links_are_replaced_before_the_final_frame_and_cached() {
    let site = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let u = |p: &str| site.url(p);
    let answer = [
        format!(
            "Try [fine]({}) and [gone page]({}#top), not [meta]({}).\n\n",
            u("/ok-twice"),
            u("/missing"),
            u("/to-metadata")
        ),
        format!(
            "More: [secret]({}), [no head]({}), [flaky]({}), [slow]({}), [moved]({}), [bad](http://exa mple.com/x).\n\n",
            u("/forbidden"),
            u("/nohead"),
            u("/error"),
            u("/slow"),
            u("/moved")
        ),
        format!(
            "```\n[code]({})\n```\n\nInline `[code]({})` and [fine again]({}).",
            u("/in-code"),
            u("/inline"),
            u("/ok-twice")
        ),
    ];
    let chunks: Vec<&str> = answer.iter().map(String::as_str).collect();
    fake.push(text(&chunks));
    let again = format!("Again [fine]({}).", u("/ok-twice"));
    fake.push(text(&[&again]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, true);
        c.links.report_replaced = true;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-l").await;
    ws.send(&user_message("chat-l", "m1", "links please")).await;
    let frames = updates(&mut ws).await;

    let original = answer.concat();
    // `secret` (403) is inconclusive: it stays.
    let expected = original
        .replace(
            &format!("[gone page]({}#top)", u("/missing")),
            &format!("[gone page]({})", search("gone+page")),
        )
        .replace(
            &format!("[moved]({})", u("/moved")),
            &format!("[moved]({})", search("moved")),
        )
        .replace(
            "[bad](http://exa mple.com/x)",
            &format!("[bad]({})", search("bad")),
        );
    assert_ne!(expected, original);

    // Sequences increase; the streamed frames carry the original text, then one corrected
    // frame, then the final frame with the corrected text.
    for pair in frames.windows(2) {
        assert!(
            pair[1].sequence > pair[0].sequence,
            "sequences must increase"
        );
    }
    let n = frames.len();
    assert!(n >= 3, "{frames:?}");
    assert_eq!(frames[n - 3].full_content_so_far, original);
    let corrected = &frames[n - 2];
    assert!(!corrected.is_final_chunk);
    assert_eq!(corrected.full_content_so_far, expected);
    let last = &frames[n - 1];
    assert_eq!(last.full_content_so_far, expected);
    assert_eq!(last.sequence, corrected.sequence + 1);
    let replaced: Vec<(&str, &str)> = last
        .replaced_links
        .iter()
        .map(|r| (r.text.as_str(), r.url.as_str()))
        .collect();
    let missing = format!("{}#top", u("/missing"));
    let moved = u("/moved");
    assert_eq!(
        replaced,
        vec![
            ("gone page", missing.as_str()),
            ("moved", moved.as_str()),
            ("bad", "http://exa mple.com/x"),
        ]
    );

    // HEAD first, GET only after 405; the same link once; code never checked.
    assert_eq!(site.hits("HEAD", "/ok-twice"), 1);
    assert_eq!(site.hits("GET", "/ok-twice"), 0);
    assert_eq!(site.hits("HEAD", "/nohead"), 1);
    assert_eq!(site.hits("GET", "/nohead"), 1);
    assert_eq!(site.hits("HEAD", "/moved"), 1);
    assert_eq!(
        site.hits("HEAD", "/missing"),
        2,
        "direct and via the redirect"
    );
    // A redirect hop to a metadata address is refused (even with private targets allowed).
    assert_eq!(site.hits("HEAD", "/to-metadata"), 1);
    let metrics = app.state.metrics.render();
    assert!(
        metrics.contains("chatd_links_skipped_ssrf_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("chatd_links_replaced_total 3"),
        "{metrics}"
    );
    assert_eq!(site.hits("HEAD", "/in-code"), 0);
    assert_eq!(site.hits("HEAD", "/inline"), 0);

    // The next turn's history holds the corrected answer (from the AI cache).
    ws.send(&user_message("chat-l", "m2", "thanks")).await;
    let second = updates(&mut ws).await;
    assert_eq!(second.last().unwrap().full_content_so_far, again);
    assert_eq!(
        site.hits("HEAD", "/ok-twice"),
        1,
        "a result is reused by the next answer"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let history = conversation(&requests[1]);
    assert!(
        history
            .iter()
            .any(|(role, content)| role == "assistant" && content == &expected),
        "{history:?}"
    );
    assert!(
        !history.iter().any(|(_, content)| content == &original),
        "the uncorrected answer must not be cached"
    );
}

#[tokio::test]
async fn streaming_does_not_wait_for_link_checks() {
    let site = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let first = format!("See [held]({}).\n\n", site.url("/held"));
    fake.push(text(&[&first, "And the rest."]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, true);
        c.links.timeout = Duration::from_secs(10);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-h").await;
    ws.send(&user_message("chat-h", "m1", "hold on")).await;
    // The first paragraph's frame arrives while its link's check is still held open.
    let frame = ws
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(frame.full_content_so_far, first);
    assert!(!frame.is_final_chunk);
    site.wait_for_hit("/held").await;
    site.release();
    let frames = updates(&mut ws).await;
    let last = frames.last().unwrap();
    assert_eq!(
        last.full_content_so_far,
        format!("See [held]({}).\n\nAnd the rest.", search("held"))
    );
    assert!(
        last.replaced_links.is_empty(),
        "not reported unless configured"
    );
}

#[tokio::test]
async fn the_ssrf_guard_never_contacts_private_targets() {
    let site = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let port = site.addr.port();
    let answer = format!(
        "[a](http://127.0.0.1:{port}/missing) [b](http://localhost:{port}/missing) \
         [c](http://10.0.0.1:{port}/missing) [d](http://169.254.169.254/latest/meta-data/) \
         [e](http://[::1]:{port}/missing) [f](http://2130706433:{port}/ok)"
    );
    fake.push(text(&[&answer]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, false);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-s").await;
    ws.send(&user_message("chat-s", "m1", "private links"))
        .await;
    let frames = updates(&mut ws).await;
    let last = frames.last().unwrap();
    assert_eq!(
        last.full_content_so_far, answer,
        "refused links stay as they are"
    );
    assert!(frames.iter().all(|f| f.full_content_so_far == answer));
    assert_eq!(site.total_hits(), 0, "the guard let a request through");
    let metrics = app.state.metrics.render();
    assert!(
        metrics.contains("chatd_links_skipped_ssrf_total 6"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_cancelled_turn_is_not_repaired() {
    let site = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    let first = format!("See [gone]({}).\n\n", site.url("/missing"));
    fake.push(Reply::Stall {
        chunks: vec![first.clone()],
        gate: gate.clone(),
        then: Box::new(text(&["Never sent."])),
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, true);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-c").await;
    ws.send(&user_message("chat-c", "m1", "cancel me")).await;
    let frame = ws
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(frame.full_content_so_far, first);
    // The link was found broken before the cancel.
    site.wait_for_hit("/missing").await;
    ws.send(&ClientMessage::CancelAiTask(chatd_protocol::CancelAiTask {
        task_id: frame.task_id.clone(),
        chat_id: None,
    }))
    .await;
    let frames = updates(&mut ws).await;
    let last = frames.last().unwrap();
    assert!(last.interrupted_by_revocation);
    assert_eq!(last.full_content_so_far, first);
    assert!(frames.iter().all(|f| f.full_content_so_far == first));
    gate.release();
}

#[tokio::test]
async fn checks_go_through_the_configured_proxy_and_stay_guarded() {
    // The local site doubles as a forward proxy: it answers absolute-form requests itself.
    let proxy = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let answer = "[gone](http://127.0.0.1:9/missing) and [local](http://localhost:9/ok)";
    fake.push(text(&[answer]));
    fake.push(text(&[answer]));
    let proxied = |allow_private: bool| {
        let base = fake.base_url();
        let url = proxy.url("");
        move |c: &mut Config| {
            use_llm(c, base);
            links_on(c, allow_private);
            c.links.proxy = Some(url.into());
        }
    };

    // Private targets allowed: both checks reach the target through the proxy.
    let app = spawn_app(proxied(true)).await;
    let mut ws = app.connect_showing("alice", "chat-p").await;
    ws.send(&user_message("chat-p", "m1", "via proxy")).await;
    let frames = updates(&mut ws).await;
    assert_eq!(
        frames.last().unwrap().full_content_so_far,
        format!(
            "[gone]({}) and [local](http://localhost:9/ok)",
            search("gone")
        )
    );
    assert_eq!(proxy.hits("HEAD", "/missing"), 1);
    assert_eq!(proxy.hits("HEAD", "/ok"), 1);
    drop(ws);
    app.shutdown().await.unwrap();

    // Not allowed: targets are resolved and refused before the proxy is asked.
    let app = spawn_app(proxied(false)).await;
    let mut ws = app.connect_showing("alice", "chat-p").await;
    ws.send(&user_message("chat-p", "m2", "via proxy again"))
        .await;
    let frames = updates(&mut ws).await;
    assert_eq!(frames.last().unwrap().full_content_so_far, answer);
    assert_eq!(proxy.total_hits(), 2, "no new request reached the proxy");
}

#[tokio::test]
async fn checks_of_one_host_respect_the_per_host_limit() {
    let site = Site::start().await;
    let fake = FakeLlm::start().await.unwrap();
    let answer: String = (1..=5)
        .map(|i| format!("[l{i}]({}) ", site.url(&format!("/hold/{i}"))))
        .collect();
    let answer = answer.trim_end().to_string();
    fake.push(text(&[&answer]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, true);
        c.links.timeout = Duration::from_secs(10);
        c.links.per_host_concurrency = 2;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-ph").await;
    ws.send(&user_message("chat-ph", "m1", "many links")).await;
    // Two checks are held open at once; a third would have to pass the per-host limit.
    site.wait_in_flight(2).await;
    site.release();
    let frames = updates(&mut ws).await;
    let expected: String = (1..=5)
        .map(|i| format!("[l{i}]({}) ", search(&format!("l{i}"))))
        .collect();
    assert_eq!(
        frames.last().unwrap().full_content_so_far,
        expected.trim_end()
    );
    assert_eq!(site.max_in_flight(), 2);
}

/// `answer` with each of `broken` (link text, path on `site`) replaced by its search link.
fn repaired(answer: &str, site: &Site, broken: &[(&str, &str)]) -> String {
    broken
        .iter()
        .fold(answer.to_string(), |text, (label, path)| {
            text.replace(
                &format!("[{label}]({})", site.url(path)),
                &format!("[{label}]({})", search(&label.replace(' ', "+"))),
            )
        })
}

/// Links of an answer checked by an app with a generous deadline (no test path hangs):
/// the app, its model (kept for postprocessing) and the answer's last frame.
async fn check_answer(answer: &str, chat: &str) -> (TestApp, FakeLlm, AiMessageUpdate) {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(text(&[answer]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        links_on(c, true);
        c.links.timeout = Duration::from_secs(10);
        c.links.report_replaced = true;
    })
    .await;
    let mut ws = app.connect_showing("alice", chat).await;
    ws.send(&user_message(chat, "m1", "links please")).await;
    let last = updates(&mut ws).await.pop().unwrap();
    (app, fake, last)
}

#[tokio::test]
async fn links_behind_bot_protection_or_with_inconclusive_answers_stay() {
    let site = Site::start().await;
    let u = |p: &str| site.url(p);
    let answer = format!(
        "Walled [docs]({}) and [blog]({}), [private]({}), [members]({}), [busy]({}), \
         [elsewhere]({}), [odd]({}), [down]({}); [missing]({}), [gone]({}), [moved away]({}).",
        u("/bot-wall/docs"),
        u("/bot-wall/blog"),
        u("/forbidden"),
        u("/unauthorized"),
        u("/rate-limited"),
        u("/legal"),
        u("/bad-request"),
        u("/unavailable"),
        u("/missing"),
        u("/gone"),
        u("/to-gone"),
    );
    let (app, _model, last) = check_answer(&answer, "chat-bw").await;

    // Only 404, 410 and a redirect to a 410 are replaced.
    let broken = [
        ("missing", "/missing"),
        ("gone", "/gone"),
        ("moved away", "/to-gone"),
    ];
    assert_eq!(last.full_content_so_far, repaired(&answer, &site, &broken));
    assert_eq!(last.replaced_links.len(), 3, "{:?}", last.replaced_links);

    // The bot wall let the checks in: they came with a browser's headers.
    for path in ["/bot-wall/docs", "/bot-wall/blog"] {
        let seen = site.seen(path);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(
            (&seen[0].method, seen[0].status),
            (&Method::HEAD, StatusCode::OK)
        );
        assert_eq!(seen[0].header(header::CONNECTION), "close");
    }
    // A 403 to HEAD is asked again with a ranged GET; 401 and 429 are not.
    let forbidden: Vec<_> = site
        .seen("/forbidden")
        .iter()
        .map(|s| (s.method.clone(), s.header(header::RANGE).to_string()))
        .collect();
    assert_eq!(
        forbidden,
        vec![
            (Method::HEAD, String::new()),
            (Method::GET, "bytes=0-4095".to_string())
        ]
    );
    assert_eq!(site.hits("GET", "/unauthorized"), 0);
    assert_eq!(site.hits("GET", "/rate-limited"), 0);
    // Two valid (the walled pages), six inconclusive, three broken.
    let metrics = app.state.metrics.render();
    for line in [
        "chatd_links_checked_total 11",
        "chatd_links_temporary_total 6",
        "chatd_links_broken_total 3",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
}

#[tokio::test]
async fn a_refused_head_falls_back_to_a_ranged_get() {
    let site = Site::start().await;
    let u = |p: &str| site.url(p);
    let answer = format!(
        "[no head]({}), [no head either]({}), [head walled]({}), [gone for get]({}).",
        u("/head-refused"),
        u("/head-not-implemented"),
        u("/head-forbidden"),
        u("/head-refused-gone"),
    );
    let (app, _model, last) = check_answer(&answer, "chat-hr").await;

    // The GET decides: three pages are there, one is gone.
    assert_eq!(
        last.full_content_so_far,
        repaired(&answer, &site, &[("gone for get", "/head-refused-gone")])
    );
    for path in [
        "/head-refused",
        "/head-not-implemented",
        "/head-forbidden",
        "/head-refused-gone",
    ] {
        let seen = site.seen(path);
        let methods: Vec<&Method> = seen.iter().map(|s| &s.method).collect();
        assert_eq!(methods, [&Method::HEAD, &Method::GET], "{path}");
        let get = &seen[1];
        assert_eq!(get.header(header::RANGE), "bytes=0-4095", "{path}");
        assert!(browser_like(&get.headers), "{path}: {:?}", get.headers);
        // One check, one browser: the fallback speaks as the HEAD did.
        assert_eq!(
            get.header(header::USER_AGENT),
            seen[0].header(header::USER_AGENT),
            "{path}"
        );
    }
    assert_eq!(
        site.seen("/head-refused")[1].status,
        StatusCode::PARTIAL_CONTENT
    );
    let metrics = app.state.metrics.render();
    assert!(
        metrics.contains("chatd_links_temporary_total 0"),
        "{metrics}"
    );
    assert!(metrics.contains("chatd_links_broken_total 1"), "{metrics}");
}

#[tokio::test]
async fn unresolvable_names_and_refused_connections_are_broken() {
    let site = Site::start().await;
    // A port nothing listens on any more.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    // RFC 6761: names under `.invalid` never resolve.
    let nowhere = "http://chatd-link-check.invalid/page";
    let refused = format!("http://127.0.0.1:{port}/page");
    let answer = format!(
        "[nowhere]({nowhere}), [closed]({refused}), [sent nowhere]({}), [fine]({}).",
        site.url("/to-nowhere"),
        site.url("/ok"),
    );
    let (app, _model, last) = check_answer(&answer, "chat-nx").await;

    let expected = answer
        .replace(
            &format!("[nowhere]({nowhere})"),
            &format!("[nowhere]({})", search("nowhere")),
        )
        .replace(
            &format!("[closed]({refused})"),
            &format!("[closed]({})", search("closed")),
        );
    let expected = repaired(&expected, &site, &[("sent nowhere", "/to-nowhere")]);
    assert_eq!(last.full_content_so_far, expected);
    let metrics = app.state.metrics.render();
    assert!(metrics.contains("chatd_links_broken_total 3"), "{metrics}");
    assert!(
        metrics.contains("chatd_links_temporary_total 0"),
        "{metrics}"
    );
}
