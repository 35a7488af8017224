//! `key_check`: the user's key check value lives in the permanent store, once per user (the
//! first one sent is kept; chatd never reads it). A device signing in sends its own and gets
//! the stored one back: if that does not open with its key, its passphrase is not the user's
//! and it stops before writing anything.

use std::time::Duration;

use chatd_protocol::{KeyCheck, KeyCheckStored, MAX_KEY_CHECK_CHARS, ServerMessage};

use super::Session;
use crate::cache::backend::keys;
use crate::store::StoreError;

/// Kept as long as the store keeps anything (a value must have an expiry).
const KEEP: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Session {
    pub(super) async fn key_check(&self, m: KeyCheck) {
        if m.encrypted_check.is_empty() || m.encrypted_check.len() > MAX_KEY_CHECK_CHARS {
            return self.invalid(
                format!("encrypted_check must be 1 to {MAX_KEY_CHECK_CHARS} characters"),
                None,
            );
        }
        let name = format!("{}:key-check", keys::tag(&self.user_hash()));
        let stored = self
            .app
            .store
            .value_claim(&name, m.encrypted_check.into_bytes(), KEEP)
            .await;
        let text = stored.and_then(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| StoreError::Corrupt("a stored key check value is not text".into()))
        });
        match text {
            Ok(encrypted_check) => {
                self.reply(ServerMessage::KeyCheck(KeyCheckStored { encrypted_check }))
            }
            Err(e) => self.store_failed(e, None, None),
        }
    }
}
