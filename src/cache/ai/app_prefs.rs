//! The user's app preferences (`set_app_preferences`): sealed with the user's key, bound to
//! the purpose, kept for `cache.ai_ttl` from the last time the client sent them (clients
//! send them after connecting), shared by every node through the cache backend.

use chatd_protocol::AppPreferencesSet;

use super::super::backend::keys;
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

/// The scope the sealed value is bound to (there is one per user).
const SCOPE: &str = "app_preferences";

impl AiCache {
    /// The user's app preferences; `None` when none are kept (never sent, expired, or a
    /// value that does not open).
    pub async fn app_preferences(
        &self,
        user: &UserHash,
    ) -> Result<Option<AppPreferencesSet>, CacheFault> {
        let key = keys::app_preferences(user);
        let plain = (self.get_sealed(user, SCOPE, Purpose::AppPreferences, &key)).await?;
        Ok(plain.and_then(|p| serde_json::from_slice(&p).ok()))
    }

    pub async fn set_app_preferences(
        &self,
        user: &UserHash,
        prefs: &AppPreferencesSet,
    ) -> Result<(), CacheFault> {
        let plain = serde_json::to_vec(prefs).unwrap_or_default();
        let key = keys::app_preferences(user);
        (self.put_sealed(user, SCOPE, Purpose::AppPreferences, &key, &plain)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserId;

    #[tokio::test]
    async fn preferences_round_trip_sealed_and_per_user() {
        let cache = AiCache::in_memory(3);
        let a = UserHash::of(&UserId::parse("a").unwrap());
        let b = UserHash::of(&UserId::parse("b").unwrap());
        assert_eq!(cache.app_preferences(&a).await.unwrap(), None);
        let prefs = AppPreferencesSet {
            disabled_apps: vec!["travelapp".into()],
            disabled_skills: vec!["web-read".into()],
        };
        cache.set_app_preferences(&a, &prefs).await.unwrap();
        assert_eq!(cache.app_preferences(&a).await.unwrap(), Some(prefs));
        assert_eq!(cache.app_preferences(&b).await.unwrap(), None);
        let sealed = cache
            .backend()
            .kv_get(&keys::app_preferences(&a))
            .await
            .unwrap()
            .unwrap();
        assert!(
            !sealed.windows(9).any(|w| w == b"travelapp"),
            "sealed at rest"
        );
        // Moved under another user's key, it does not open.
        cache
            .backend()
            .kv_put(
                &keys::app_preferences(&b),
                sealed,
                std::time::Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert_eq!(cache.app_preferences(&b).await.unwrap(), None);
    }
}
