//! The keyring's seals, bindings and key caching, and values that stay openable when the
//! store of wrapped keys lost them.

use super::*;
use crate::auth::UserId;
use crate::crypto::LocalKeyProvider;

/// Wrapped keys in a map (TTLs ignored).
#[derive(Default)]
struct MapStore(DashMap<String, Vec<u8>>);

impl WrappedKeyStore for MapStore {
    fn get_wrapped<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreUnavailable>> {
        Box::pin(async move { Ok(self.0.get(name).map(|v| v.clone())) })
    }
    fn put_wrapped<'a>(
        &'a self,
        name: &'a str,
        wrapped: Vec<u8>,
        _: Duration,
    ) -> BoxFuture<'a, Result<(), StoreUnavailable>> {
        self.0.insert(name.to_string(), wrapped);
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(start_paused = true)]
async fn values_stay_openable_on_a_node_when_the_store_lost_the_wrapped_key() {
    let provider: Arc<dyn KeyProvider> =
        Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([3u8; 32])));
    let store = Arc::new(MapStore::default());
    let here = Keyring::new(provider.clone(), store.clone(), Duration::from_secs(900));
    let there = Keyring::new(provider, store.clone(), Duration::from_secs(900));
    let a = UserHash::of(&UserId::parse("alice").unwrap());
    here.seal(&a, "c", Purpose::AiMessage, b"warm")
        .await
        .unwrap();
    // The store comes back empty; `here` still seals with the key in memory.
    store.0.clear();
    let plain = here
        .seal(&a, "c", Purpose::TurnLog, b"stored")
        .await
        .unwrap();
    let portable = here
        .seal_portable(&a, "bus", Purpose::BusFrame, b"frame")
        .await
        .unwrap();
    // A portable value opens anywhere; a plain one only once its key is back.
    assert_eq!(
        there
            .open(&a, "bus", Purpose::BusFrame, &portable)
            .await
            .unwrap(),
        b"frame"
    );
    let other = Keyring::new(
        Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([3u8; 32]))),
        store.clone(),
        Duration::from_secs(900),
    );
    assert!(matches!(
        other.open(&a, "c", Purpose::TurnLog, &plain).await,
        Err(OpenError::Failed)
    ));
    // The key in use is written again within REWRITE_EVERY.
    tokio::time::advance(REWRITE_EVERY).await;
    here.seal(&a, "c", Purpose::TurnLog, b"later")
        .await
        .unwrap();
    assert_eq!(
        other.open(&a, "c", Purpose::TurnLog, &plain).await.unwrap(),
        b"stored"
    );
    // A portable value whose wrapped key was swapped does not open.
    let mut forged = portable.clone();
    let at = 1 + KEY_ID_LEN + 2;
    forged[at] ^= 1;
    let fresh = Keyring::new(
        Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([3u8; 32]))),
        Arc::new(MapStore::default()),
        Duration::from_secs(900),
    );
    assert!(matches!(
        fresh.open(&a, "bus", Purpose::BusFrame, &forged).await,
        Err(OpenError::Failed)
    ));
    assert!(matches!(
        fresh
            .open(&a, "bus", Purpose::BusFrame, &portable[..20])
            .await,
        Err(OpenError::Failed)
    ));
}

fn ring(ttl: Duration) -> Keyring {
    let provider = Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([3u8; 32])));
    Keyring::new(provider, Arc::new(MapStore::default()), ttl)
}

#[tokio::test]
async fn seal_open_and_bindings() {
    let ring = ring(Duration::from_secs(60));
    let a = UserHash::of(&UserId::parse("alice").unwrap());
    let b = UserHash::of(&UserId::parse("bob").unwrap());
    let sealed = ring
        .seal(&a, "chat1", Purpose::AiMessage, b"secret text")
        .await
        .unwrap();
    assert_eq!(
        ring.open(&a, "chat1", Purpose::AiMessage, &sealed)
            .await
            .unwrap(),
        b"secret text"
    );
    assert!(matches!(
        ring.open(&a, "chat2", Purpose::AiMessage, &sealed).await,
        Err(OpenError::Failed)
    ));
    assert!(matches!(
        ring.open(&a, "chat1", Purpose::Embed, &sealed).await,
        Err(OpenError::Failed)
    ));
    assert!(matches!(
        ring.open(&b, "chat1", Purpose::AiMessage, &sealed).await,
        Err(OpenError::Failed)
    ));
    // One key-service call for the data key; opening uses the cached key.
    assert_eq!(ring.provider().calls(), 1);
    ring.seal(&a, "chat1", Purpose::AiMessage, b"more")
        .await
        .unwrap();
    assert_eq!(ring.provider().calls(), 1);
    // After forgetting, the wrapped key is unwrapped once from the backend.
    ring.forget_keys();
    assert_eq!(
        ring.open(&a, "chat1", Purpose::AiMessage, &sealed)
            .await
            .unwrap(),
        b"secret text"
    );
    assert_eq!(ring.provider().calls(), 2);
}
