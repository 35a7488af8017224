-- chatd permanent store (PostgreSQL). Every encrypted_* column holds client ciphertext that
-- chatd never reads. Every row carries its owner; every query filters on it.
CREATE TABLE chats (
    chat_id TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    encrypted_title TEXT,
    encrypted_icon TEXT,
    encrypted_category TEXT,
    encrypted_chat_key TEXT,
    encrypted_chat_summary TEXT,
    encrypted_chat_tags TEXT,
    encrypted_follow_up_suggestions TEXT,
    encrypted_new_chat_suggestions TEXT,
    encrypted_top_recommended_apps_for_chat TEXT,
    encrypted_quick_tip_slugs TEXT,
    encrypted_share_cta_text TEXT,
    rejected_suggestion_hashes TEXT,
    messages_v BIGINT NOT NULL DEFAULT 0,
    title_v BIGINT NOT NULL DEFAULT 0,
    last_edited_overall_timestamp BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX chats_owner_recent ON chats (owner, last_edited_overall_timestamp DESC, chat_id);

CREATE TABLE messages (
    seq BIGSERIAL PRIMARY KEY,
    message_id TEXT NOT NULL UNIQUE,
    chat_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX messages_owner_chat ON messages (owner, chat_id, created_at, seq);

CREATE TABLE embeds (
    embed_id TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    hashed_chat_id TEXT,
    version_number BIGINT NOT NULL DEFAULT 0,
    body TEXT NOT NULL
);
CREATE INDEX embeds_owner_chat ON embeds (owner, hashed_chat_id);

CREATE TABLE embed_keys (
    owner TEXT NOT NULL,
    hashed_embed_id TEXT NOT NULL,
    key_type TEXT NOT NULL,
    hashed_chat_id TEXT NOT NULL DEFAULT '',
    encrypted_embed_key TEXT NOT NULL,
    created_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, hashed_embed_id, key_type, hashed_chat_id)
);
