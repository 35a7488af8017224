-- The chat each user last opened (set_active_chat): phase 1 of the login sync shows it.
-- A chat id only; the chat itself is read through `chats` (owner-checked), so a deleted
-- chat is simply not found.
CREATE TABLE user_state (
    owner TEXT PRIMARY KEY NOT NULL,
    last_opened_chat TEXT
);
