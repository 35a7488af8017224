-- Small values chatd seals with a user's server key (routine runs and their drive, the
-- wrapped data keys that open them) when the cache is in process memory: kept here, they
-- survive a restart. Names carry the owner's hash tag; values are sealed, never plaintext.
CREATE TABLE sealed_values (
    name TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sealed_values_expiry ON sealed_values (expires_at);
