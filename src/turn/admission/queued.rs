//! Work waiting in a chat's queue, as sealed into the turn store: a user message or a
//! skill's follow-up message, and whose it is (the node that takes over a lost turn runs
//! the queue for that user). Sealed with the owner's key, bound to the chat, in cluster
//! mode; plain JSON in embedded mode (the store is inside this process).

use chatd_protocol::ChatId;

use super::super::Inbound;
use crate::crypto::{Keyring, Purpose, SealError, UserHash};
use crate::inbound::FollowUp;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Work {
    Message(Box<Inbound>),
    FollowUp(FollowUp),
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Queued {
    pub user: String,
    pub work: Work,
}

impl Queued {
    pub async fn seal(
        &self,
        keyring: Option<&Keyring>,
        owner: &UserHash,
        chat: &ChatId,
    ) -> Result<Vec<u8>, SealError> {
        let plain = serde_json::to_vec(self).unwrap_or_default();
        Ok(match keyring {
            Some(k) => {
                k.seal(owner, chat.as_str(), Purpose::QueuedMessage, &plain)
                    .await?
            }
            None => plain,
        })
    }

    /// `None` when the value does not open (another key, tampered) or does not parse.
    pub async fn open(
        keyring: Option<&Keyring>,
        owner: &UserHash,
        chat: &ChatId,
        sealed: &[u8],
    ) -> Option<Self> {
        let plain = match keyring {
            Some(k) => k
                .open(owner, chat.as_str(), Purpose::QueuedMessage, sealed)
                .await
                .ok()?,
            None => sealed.to_vec(),
        };
        serde_json::from_slice(&plain).ok()
    }
}
