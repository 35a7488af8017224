use super::*;

#[test]
fn defaults_load_and_validate() {
    let c = Config::defaults().unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8787");
    // The user's data directory, not one relative to the working directory.
    assert!(c.server.data_dir.is_absolute() || c.server.data_dir == Path::new("./data"));
    assert!(c.server.data_dir.ends_with("chatd") || c.server.data_dir == Path::new("./data"));
    assert_eq!(c.llm.provider, LlmProvider::Simulated);
    assert!(c.is_embedded());
}

#[test]
fn file_overrides_and_unknown_keys_are_errors() {
    let dir = std::env::temp_dir().join(format!("chatd-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "[server]\nlisten = \"127.0.0.1:9999\"\n").unwrap();
    let c = Config::load(Some(&good)).unwrap();
    assert_eq!(c.server.listen.port(), 9999);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[server]\nlisten_typo = 1\n").unwrap();
    let err = Config::load(Some(&bad)).unwrap_err().to_string();
    assert!(err.contains("listen_typo"), "{err}");

    let invalid = dir.join("invalid.toml");
    std::fs::write(&invalid, "[server]\nmax_frame_bytes = 10\n").unwrap();
    let err = Config::load(Some(&invalid)).unwrap_err().to_string();
    assert!(err.contains("server.max_frame_bytes"), "{err}");

    assert!(matches!(
        Config::load(Some(&dir.join("missing.toml"))),
        Err(ConfigError::MissingFile(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn secrets_are_redacted_in_debug() {
    let mut c = Config::defaults().unwrap();
    c.llm.api_key = Some(SecretString::from("sk-very-secret"));
    assert!(!format!("{c:?}").contains("sk-very-secret"));
}

#[test]
fn links_defaults_and_validation() {
    let c = Config::defaults().unwrap();
    assert!(c.links.enabled);
    assert!(!c.links.allow_private_targets);
    assert_eq!(c.links.timeout, Duration::from_secs(8));
    assert_eq!(
        c.links.search_url_template,
        "https://search.brave.com/search?q={query}"
    );
    assert!(c.links.proxy.is_none());
    let rejects = |edit: fn(&mut LinksConfig), key: &str| {
        let mut c = Config::defaults().unwrap();
        edit(&mut c.links);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    };
    rejects(|l| l.timeout = Duration::ZERO, "links.timeout");
    rejects(
        |l| l.search_url_template = "https://s.example/?q=".into(),
        "links.search_url_template",
    );
    rejects(|l| l.concurrency = 0, "links.concurrency");
    rejects(|l| l.per_host_concurrency = 0, "links.per_host_concurrency");
    rejects(
        |l| l.proxy = Some(SecretString::from("ftp://p.example")),
        "links.proxy",
    );
    let mut c = Config::defaults().unwrap();
    c.links.proxy = Some(SecretString::from("http://user:hunter2@p.example:3128"));
    c.validate().unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn store_url_defaults_to_sqlite_in_the_data_dir_and_is_validated() {
    let mut c = Config::defaults().unwrap();
    assert_eq!(c.store.url, "");
    c.server.data_dir = PathBuf::from("/srv/chatd");
    assert_eq!(c.store_url(), "sqlite:///srv/chatd/chatd.db");
    c.store.url = "postgres://chatd@db/chatd".into();
    c.validate().unwrap();
    assert_eq!(c.store_url(), "postgres://chatd@db/chatd");
    c.store.url = "mysql://nope".into();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("store.url"), "{err}");
}

#[test]
fn cluster_mode_refuses_what_nodes_would_not_share_naming_the_key() {
    let mut c = Config::defaults().unwrap();
    assert!(!c.cluster.enabled);
    assert_eq!(c.cluster.lease, Duration::from_secs(10));
    assert_eq!(c.cluster.resume_window, Duration::from_secs(600));
    c.cluster.enabled = true;
    let key_of = |c: &Config| match c.validate() {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(key_of(&c), "cache.backend");
    c.cache.backend = CacheBackendKind::Redis;
    assert_eq!(key_of(&c), "store.url");
    c.store.url = "postgres://chatd@db/chatd".into();
    assert_eq!(key_of(&c), "auth.secret");
    c.auth.secret = Some("shared".to_string().into());
    // Keys: a generated local master key differs per node. (CHATD_MASTER_KEY is not set
    // in tests.)
    assert_eq!(key_of(&c), "keys.provider");
    c.keys.local_master_key_file = Some("/etc/chatd/master_key".into());
    c.validate().unwrap();
    c.cluster.node_id = "bad node".into();
    assert_eq!(key_of(&c), "cluster.node_id");
    c.cluster.node_id = "node-1".into();
    assert_eq!(c.cluster.node().as_str(), "node-1");
    c.cluster.lease = Duration::from_millis(10);
    assert_eq!(key_of(&c), "cluster.lease");
}

#[test]
fn oidc_sign_in_needs_issuer_and_audience() {
    let key_of = |edit: &dyn Fn(&mut Config)| {
        let mut c = Config::defaults().unwrap();
        edit(&mut c);
        match c.validate() {
            Ok(()) => None,
            Err(ConfigError::Invalid { key, .. }) => Some(key),
            Err(e) => panic!("{e}"),
        }
    };
    let c = Config::defaults().unwrap();
    assert_eq!(c.auth.cookie_name, "chatd_token");
    assert_eq!(c.auth.user_claim, "sub");
    assert!(c.auth.jwks_url.is_empty());
    let url = |c: &mut Config| c.auth.jwks_url = "https://idp.example/jwks.json".into();
    assert_eq!(key_of(&|c| url(c)), Some("auth.issuer"));
    assert_eq!(
        key_of(&|c| {
            url(c);
            c.auth.issuer = "https://idp.example".into();
        }),
        Some("auth.audience")
    );
    assert_eq!(
        key_of(&|c| {
            url(c);
            c.auth.issuer = "https://idp.example".into();
            c.auth.audience = "chatd".into();
        }),
        None
    );
    assert_eq!(
        key_of(&|c| c.auth.issuer = "https://idp.example".into()),
        Some("auth.jwks_url")
    );
    // The page's client: its ID token is the session token, so it is the audience.
    let provider = |c: &mut Config| {
        url(c);
        c.auth.issuer = "https://idp.example".into();
        c.auth.audience = "chatd".into();
    };
    assert_eq!(c.auth.page_scopes, "openid");
    assert_eq!(
        key_of(&|c| {
            provider(c);
            c.auth.page_client_id = "chatd".into();
        }),
        None
    );
    assert_eq!(
        key_of(&|c| {
            provider(c);
            c.auth.page_client_id = "another-app".into();
        }),
        Some("auth.page_client_id")
    );
    assert_eq!(
        key_of(&|c| {
            provider(c);
            c.auth.page_scopes = "profile".into();
        }),
        Some("auth.page_scopes")
    );
    assert_eq!(
        key_of(&|c| c.auth.page_client_id = "chatd".into()),
        Some("auth.jwks_url")
    );
    assert_eq!(
        key_of(&|c| c.auth.jwks_url = "ftp://idp.example".into()),
        Some("auth.jwks_url")
    );
    assert_eq!(
        key_of(&|c| c.auth.cookie_name = "a b".into()),
        Some("auth.cookie_name")
    );
    assert_eq!(
        key_of(&|c| c.auth.user_claim = " ".into()),
        Some("auth.user_claim")
    );
}

#[test]
fn carried_summaries_are_on_by_default_and_bounded() {
    let c = Config::defaults().unwrap();
    assert!(c.pipeline.carry_summary);
    assert_eq!(c.pipeline.recent_summaries, 3);
    assert_eq!(c.pipeline.summary_max_tokens, 300);
    let rejects = |edit: fn(&mut PipelineConfig), key: &str| {
        let mut c = Config::defaults().unwrap();
        edit(&mut c.pipeline);
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    };
    rejects(|p| p.recent_summaries = 4, "pipeline.recent_summaries");
    rejects(|p| p.summary_max_tokens = 0, "pipeline.summary_max_tokens");
}
