//! The embeds of the AI cache: what a client sent (or that it lacked one when asked),
//! kept per user under the embed id with the owner and version in clear and the rest
//! sealed with the owner's key, bound to the embed, and indexed under the chat.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chatd_protocol::{ChatId, ClientEmbed, EmbedId};
use serde::{Deserialize, Serialize};

use super::super::backend::CacheError;
use super::{AiCache, CacheFault};
use crate::crypto::{Purpose, UserHash};

/// An embed as cached for the model: its type, TOON content and version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedEmbed {
    pub embed_type: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    pub version_number: u64,
}

/// The status of an embed the client was asked for and did not have.
const UNAVAILABLE: &str = "unavailable";

/// SHA-256 (hex) over an embed's type, a zero byte and its content: the `content_hash`
/// chatd sends with an embed and checks when the client stores or re-sends it.
pub fn content_hash(embed_type: &str, content: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(embed_type.as_bytes());
    h.update([0u8]);
    h.update(content.as_bytes());
    hex::encode(h.finalize())
}

impl CachedEmbed {
    pub fn content_hash(&self) -> String {
        content_hash(&self.embed_type, &self.content)
    }

    /// The client was asked for this embed and did not have it (not asked again; any copy
    /// the client sends later replaces it, whatever its version).
    pub fn is_unavailable(&self) -> bool {
        self.status.as_deref() == Some(UNAVAILABLE)
    }
}

/// The stored form of an embed: owner and version in clear (hashed owner, a number),
/// everything else sealed.
#[derive(Serialize, Deserialize)]
struct EmbedEnvelope {
    owner: String,
    version: u64,
    sealed: String,
}

/// Outcome of caching a client-sent embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedWrite {
    Stored,
    /// The cached copy has the same or a newer version.
    Unchanged,
    /// The cached entry under the user's embed id names another owner (embed ids are per
    /// user in the cache, so only a misplaced or tampered entry does).
    Foreign,
}

impl AiCache {
    /// Caches a client-sent embed under the chat: skipped when the cached version is the
    /// same or newer, refused when the id belongs to another user.
    pub async fn put_embed(
        &self,
        user: &UserHash,
        chat: &ChatId,
        embed: &ClientEmbed,
    ) -> Result<EmbedWrite, CacheFault> {
        if let Some(existing) = self.envelope(user, &embed.embed_id).await? {
            if existing.owner != user.as_str() {
                return Ok(EmbedWrite::Foreign);
            }
            // A copy sealed under a key that no longer opens is replaced whatever its version.
            let opens = self.open_envelope(user, &embed.embed_id, &existing).await?;
            if opens.is_some_and(|e| !e.is_unavailable())
                && existing.version >= embed.version_number
            {
                return Ok(EmbedWrite::Unchanged);
            }
        }
        let cached = CachedEmbed {
            embed_type: embed.embed_type.clone(),
            content: embed.content.clone(),
            status: embed.status.clone(),
            version_number: embed.version_number,
        };
        let plain = zeroize::Zeroizing::new(
            serde_json::to_vec(&cached).map_err(|e| CacheError::Protocol(e.to_string()))?,
        );
        let sealed = self
            .keyring
            .seal(user, embed.embed_id.as_str(), Purpose::Embed, &plain)
            .await?;
        let envelope = EmbedEnvelope {
            owner: user.as_str().to_string(),
            version: embed.version_number,
            sealed: B64.encode(sealed),
        };
        let bytes =
            serde_json::to_vec(&envelope).map_err(|e| CacheError::Protocol(e.to_string()))?;
        self.backend
            .embed_put(user, chat, &embed.embed_id, bytes, self.policy.ttl)
            .await?;
        Ok(EmbedWrite::Stored)
    }

    /// The user's embed, if cached and it opens (another user's embed is `None`).
    /// Records that the client lacks this embed too (see [`CachedEmbed::is_unavailable`]).
    pub async fn mark_unavailable(
        &self,
        user: &UserHash,
        chat: &ChatId,
        embed: &EmbedId,
    ) -> Result<EmbedWrite, CacheFault> {
        let tombstone = ClientEmbed {
            embed_id: embed.clone(),
            embed_type: UNAVAILABLE.into(),
            content: String::new(),
            status: Some(UNAVAILABLE.into()),
            version_number: 0,
            content_hash: None,
        };
        self.put_embed(user, chat, &tombstone).await
    }

    pub async fn get_embed(
        &self,
        user: &UserHash,
        embed: &EmbedId,
    ) -> Result<Option<CachedEmbed>, CacheFault> {
        match self.envelope(user, embed).await? {
            Some(env) if env.owner == user.as_str() => self.open_envelope(user, embed, &env).await,
            _ => Ok(None),
        }
    }

    async fn envelope(
        &self,
        user: &UserHash,
        embed: &EmbedId,
    ) -> Result<Option<EmbedEnvelope>, CacheFault> {
        let Some(bytes) = self.backend.embed_get(user, embed).await? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(&bytes).ok())
    }

    async fn open_envelope(
        &self,
        user: &UserHash,
        embed: &EmbedId,
        env: &EmbedEnvelope,
    ) -> Result<Option<CachedEmbed>, CacheFault> {
        let Ok(sealed) = B64.decode(&env.sealed) else {
            return Ok(None);
        };
        let plain = (self.open_sealed(user, embed.as_str(), Purpose::Embed, &sealed)).await?;
        Ok(plain.and_then(|p| serde_json::from_slice(&p).ok()))
    }
}
