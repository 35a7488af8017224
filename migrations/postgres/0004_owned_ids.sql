-- Message and embed ids belong to their owner: one user storing an id first never blocks
-- another's write of the same id. Messages are unique per owner and chat, embeds per owner.
ALTER TABLE messages DROP CONSTRAINT messages_message_id_key;
ALTER TABLE messages ADD CONSTRAINT messages_owned_id UNIQUE (owner, chat_id, message_id);
ALTER TABLE embeds DROP CONSTRAINT embeds_pkey;
ALTER TABLE embeds ADD PRIMARY KEY (owner, embed_id);
