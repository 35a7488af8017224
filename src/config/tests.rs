use super::*;

#[test]
fn defaults_load_and_validate() {
    let c = Config::defaults().unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8787");
    assert_eq!(c.server.data_dir, PathBuf::from("./data"));
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
fn store_url_defaults_to_sqlite_in_the_data_dir_and_is_validated() {
    let mut c = Config::defaults().unwrap();
    assert_eq!(c.store.url, "");
    assert_eq!(c.store_url(), "sqlite://./data/chatd.db");
    c.store.url = "postgres://chatd@db/chatd".into();
    c.validate().unwrap();
    assert_eq!(c.store_url(), "postgres://chatd@db/chatd");
    c.store.url = "mysql://nope".into();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("store.url"), "{err}");
}
