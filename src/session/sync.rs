//! Phased sync (`phased_sync_request`): phase 1 (the last opened chat's metadata, then the
//! content of up to 10 chats: that one and the most recent), phase 2 (metadata of up to 100
//! chats), phase 3 (the rest, 10 chats per `background_message_sync`, only when asked for
//! with `phase3`: `all` is phases 1 and 2, as the reference client expects; it pages the
//! rest with `load_more_chats` and friends, see `paging.rs`), then `phased_sync_complete`. Chats the client has
//! at the same or newer `messages_v` and `title_v` are skipped, and so are embeds it lists.
//! The store is read page by page, so a large user is never loaded at once.
//!
//! Phase 1 reads the chats' messages from the sync cache when it holds a current copy
//! (`sync/cache.rs` owns its life: kept current by stored messages, consumed and cleared by
//! a finished sync, `all` or `phase3`).
//!
//! Syncs run on the connection's sync worker (see `sync_worker.rs`), one after another, so
//! the connection's read loop never waits for one.

mod cache;

use std::collections::{BTreeMap, HashMap, HashSet};

use chatd_protocol::{
    BackgroundMessageSync, ChatContent, ChatDetails, ChatId, ClientVersions, EmbedId, EmbedKey,
    EncryptedMessage, Phase1LastChatReady, Phase1bChatContentReady, Phase2ChatsReady,
    PhasedSyncComplete, PhasedSyncRequest, ServerMessage, StoredEmbed, SyncPhase,
};

use super::Session;
use crate::clock::unix_now as now;
use crate::store::{ChatCursor, StoreError, hash_id};

pub(super) use cache::CacheUse;

/// Chats whose content phase 1 sends (and phase 3 sends per batch).
pub const CONTENT_BATCH: u32 = 10;
/// Chats whose metadata phase 2 sends.
pub const METADATA_LIMIT: u32 = 100;

/// What the client says it has: chats at their versions, and embeds.
#[derive(Default)]
pub(super) struct Delta {
    chats: HashMap<ChatId, ClientVersions>,
    embeds: HashSet<EmbedId>,
}

impl Delta {
    /// The client's chats (an id sent alone has no versions) and embeds, as `req` lists them.
    fn of(req: &PhasedSyncRequest) -> Self {
        let mut chats: HashMap<ChatId, ClientVersions> = req
            .client_chat_ids
            .iter()
            .map(|c| (c.clone(), ClientVersions::default()))
            .collect();
        chats.extend(req.client_chat_versions.clone());
        Delta {
            chats,
            embeds: req.client_embed_ids.iter().cloned().collect(),
        }
    }

    /// True when the client already has this chat at the same or newer versions.
    fn up_to_date(&self, chat: &ChatDetails) -> bool {
        self.chats.get(&chat.chat_id).is_some_and(|v| {
            v.messages_v.unwrap_or(0) >= chat.versions.messages_v
                && v.title_v.unwrap_or(0) >= chat.versions.title_v
        })
    }
}

impl Session {
    pub(super) async fn phased_sync(&self, req: PhasedSyncRequest) {
        if let Err(e) = self.run_sync(&req).await {
            self.store_failed(e, None, None);
            return;
        }
        self.reply(ServerMessage::PhasedSyncComplete(PhasedSyncComplete {
            phase: req.phase,
            timestamp: now(),
        }));
    }

    async fn run_sync(&self, req: &PhasedSyncRequest) -> Result<(), StoreError> {
        let delta = Delta::of(req);
        let (p1, p2, p3) = match req.phase {
            SyncPhase::Phase1 => (true, false, false),
            SyncPhase::Phase2 => (false, true, false),
            SyncPhase::Phase3 => (false, false, true),
            SyncPhase::All => (true, true, false),
        };
        // `all` and `phase3` finish a device's sync, which consumes the sync cache: `all`
        // warms nothing it would clear at its end; a phase 1 on its own warms what it reads
        // for the phases its client asks for next.
        let finishes = matches!(req.phase, SyncPhase::All | SyncPhase::Phase3);
        let phase1_cache = match finishes {
            true => CacheUse::Read,
            false => CacheUse::ReadAndWarm,
        };
        let recent = self
            .app
            .store
            .chats_page(&self.device.user, None, CONTENT_BATCH)
            .await?;
        if p1 {
            self.phase1(&recent, &delta, phase1_cache).await?;
        }
        if p2 {
            self.phase2(&delta).await?;
        }
        if p3 {
            self.phase3(&recent, &delta).await?;
        }
        if finishes {
            self.clear_sync_cache().await;
        }
        Ok(())
    }

    /// The last opened chat's metadata, then the content of up to 10 chats: that one and
    /// the most recent (`recent`), those the client has at their versions left out.
    async fn phase1(
        &self,
        recent: &[ChatDetails],
        delta: &Delta,
        cache: CacheUse,
    ) -> Result<(), StoreError> {
        // The chat last opened on any device, else the last edited.
        let opened = self.app.store.last_opened(&self.device.user).await?;
        let last = opened.as_ref().or(recent.first());
        self.reply(ServerMessage::Phase1LastChatReady(Box::new(
            Phase1LastChatReady {
                chat_id: last.map(|c| c.chat_id.clone()),
                chat_details: last.cloned(),
                phase: "phase1".into(),
                already_synced: last.is_some_and(|c| delta.up_to_date(c)),
            },
        )));
        let opened_first = opened.iter().chain(
            recent
                .iter()
                .filter(|c| opened.as_ref().is_none_or(|o| o.chat_id != c.chat_id)),
        );
        let wanted: Vec<&ChatDetails> = opened_first
            .take(CONTENT_BATCH as usize)
            .filter(|c| !delta.up_to_date(c))
            .collect();
        let chats = self.content(&wanted, cache).await?;
        let (embeds, embed_keys) = self.embeds_for(&wanted, delta).await?;
        self.reply(ServerMessage::Phase1bChatContentReady(Box::new(
            Phase1bChatContentReady {
                chats,
                embeds,
                embed_keys,
            },
        )));
        Ok(())
    }

    /// The metadata of up to 100 chats, those the client has at their versions left out.
    async fn phase2(&self, delta: &Delta) -> Result<(), StoreError> {
        let user = &self.device.user;
        let store = &self.app.store;
        let page = store.chats_page(user, None, METADATA_LIMIT).await?;
        let total = store.count_chats(user).await?;
        let chats: Vec<ChatDetails> = page.into_iter().filter(|c| !delta.up_to_date(c)).collect();
        self.reply(ServerMessage::Phase2ChatsReady(Box::new(
            Phase2ChatsReady {
                chat_count: chats.len() as u64,
                chats,
                total_chat_count: total,
                phase: "phase2".into(),
            },
        )));
        Ok(())
    }

    /// Every chat after phase 1's, 10 per batch, reading one page ahead to mark the last.
    async fn phase3(&self, recent: &[ChatDetails], delta: &Delta) -> Result<(), StoreError> {
        let user = &self.device.user;
        let store = &self.app.store;
        let mut batch_number = 0u64;
        let mut page = if recent.len() < CONTENT_BATCH as usize {
            Vec::new()
        } else {
            let cursor = recent.last().map(ChatCursor::after);
            store
                .chats_page(user, cursor.as_ref(), CONTENT_BATCH)
                .await?
        };
        loop {
            let next = if page.len() < CONTENT_BATCH as usize {
                Vec::new()
            } else {
                let cursor = page.last().map(ChatCursor::after);
                store
                    .chats_page(user, cursor.as_ref(), CONTENT_BATCH)
                    .await?
            };
            let is_last_batch = next.is_empty();
            let wanted: Vec<&ChatDetails> = page.iter().filter(|c| !delta.up_to_date(c)).collect();
            if !wanted.is_empty() || is_last_batch {
                batch_number += 1;
                let chats = self.content(&wanted, CacheUse::Bypass).await?;
                let (embeds, embed_keys) = self.embeds_for(&wanted, delta).await?;
                self.reply(ServerMessage::BackgroundMessageSync(Box::new(
                    BackgroundMessageSync {
                        chats,
                        batch_number,
                        is_last_batch,
                        embeds,
                        embed_keys,
                    },
                )));
            }
            if is_last_batch {
                return Ok(());
            }
            page = next;
        }
    }

    /// The chats' messages: from the sync cache when `cache` reads it and its copy is
    /// current, else from the store (then written to the cache with `ReadAndWarm`).
    pub(super) async fn content(
        &self,
        chats: &[&ChatDetails],
        cache: CacheUse,
    ) -> Result<Vec<ChatContent>, StoreError> {
        let mut found: BTreeMap<ChatId, Vec<EncryptedMessage>> = BTreeMap::new();
        let mut missing = Vec::new();
        for chat in chats {
            if cache != CacheUse::Bypass
                && let Some(messages) = self.cached(&chat.chat_id, chat.versions.messages_v).await
            {
                found.insert(chat.chat_id.clone(), messages);
                continue;
            }
            missing.push(chat.chat_id.clone());
        }
        if !missing.is_empty() {
            let mut loaded: BTreeMap<ChatId, Vec<EncryptedMessage>> =
                missing.iter().map(|c| (c.clone(), Vec::new())).collect();
            for (chat, message) in self.app.store.messages(&self.device.user, &missing).await? {
                loaded.entry(chat).or_default().push(message);
            }
            for (chat, messages) in loaded {
                if cache == CacheUse::ReadAndWarm {
                    let version = chats
                        .iter()
                        .find(|c| c.chat_id == chat)
                        .map_or(0, |c| c.versions.messages_v);
                    self.warm(&chat, &messages, version).await;
                }
                found.insert(chat, messages);
            }
        }
        Ok(chats
            .iter()
            .map(|c| {
                let messages = found.remove(&c.chat_id).unwrap_or_default();
                ChatContent {
                    chat_id: c.chat_id.clone(),
                    server_message_count: messages.len() as u64,
                    messages,
                    versions: c.versions,
                }
            })
            .collect())
    }

    /// The chats' embeds the client does not list, and their keys.
    pub(super) async fn embeds_for(
        &self,
        chats: &[&ChatDetails],
        delta: &Delta,
    ) -> Result<(Vec<StoredEmbed>, Vec<EmbedKey>), StoreError> {
        if chats.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let hashed: Vec<String> = chats
            .iter()
            .flat_map(|c| [hash_id(c.chat_id.as_str()), c.chat_id.as_str().to_string()])
            .collect();
        let user = &self.device.user;
        let embeds: Vec<StoredEmbed> = self
            .app
            .store
            .embeds_for_chats(user, &hashed)
            .await?
            .into_iter()
            .filter(|e| !delta.embeds.contains(&e.embed_id))
            .collect();
        if embeds.is_empty() {
            return Ok((embeds, Vec::new()));
        }
        let ids: Vec<String> = embeds
            .iter()
            .map(|e| hash_id(e.embed_id.as_str()))
            .collect();
        let keys = self.app.store.embed_keys(user, &ids).await?;
        Ok((embeds, keys))
    }
}
