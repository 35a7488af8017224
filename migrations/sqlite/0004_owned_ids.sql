-- Message and embed ids belong to their owner: one user storing an id first never blocks
-- another's write of the same id. Messages are unique per owner and chat, embeds per owner.
CREATE TABLE messages_owned (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (owner, chat_id, message_id)
);
INSERT INTO messages_owned (seq, message_id, chat_id, owner, role, created_at, body)
    SELECT seq, message_id, chat_id, owner, role, created_at, body FROM messages;
DROP TABLE messages;
ALTER TABLE messages_owned RENAME TO messages;
CREATE INDEX messages_owner_chat ON messages (owner, chat_id, created_at, seq);

CREATE TABLE embeds_owned (
    embed_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    hashed_chat_id TEXT,
    version_number INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    PRIMARY KEY (owner, embed_id)
);
INSERT INTO embeds_owned (embed_id, owner, hashed_chat_id, version_number, body)
    SELECT embed_id, owner, hashed_chat_id, version_number, body FROM embeds;
DROP TABLE embeds;
ALTER TABLE embeds_owned RENAME TO embeds;
CREATE INDEX embeds_owner_chat ON embeds (owner, hashed_chat_id);
