//! Sealed small values with an expiry, by name: where what chatd itself seals (routine runs
//! and their drive, the wrapped data keys that open them) lives when the cache is in
//! process memory, so that it survives a restart. Names are chatd's own (each carries the
//! owner's hash tag, never client input); values are sealed before they get here.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::db::query;
use super::sql::SqlStore;
use super::{Store, StoreError};
use crate::crypto::keyring::{StoreUnavailable, WrappedKeyStore};

pub trait SealedValues: Send + Sync {
    /// Sets `name` to `value` for `ttl`.
    fn value_put<'a>(
        &'a self,
        name: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The value of `name`, unless it expired.
    fn value_get<'a>(&'a self, name: &'a str)
    -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    fn value_delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The unexpired names that contain `infix`, each with its expiry (milliseconds since
    /// the epoch). `infix` is chatd's own constant, never client input.
    fn value_names<'a>(
        &'a self,
        infix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>>;

    /// Sets `name` to `value` for `ttl` unless it holds an unexpired value; returns the
    /// value it holds afterwards (`value` when this call set it).
    fn value_claim<'a>(
        &'a self,
        name: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, StoreError>>;
}

/// Milliseconds since the epoch `ttl` from now.
pub fn expiry(ttl: Duration) -> i64 {
    now_millis().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

pub fn now_millis() -> i64 {
    crate::clock::unix_millis()
}

/// The same SQL for SQLite and PostgreSQL. Expired rows are never read; a put removes
/// them now and then (one put in 64).
impl SealedValues for SqlStore {
    fn value_put<'a>(
        &'a self,
        name: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if rand::random::<u8>() < 4 {
                query("DELETE FROM sealed_values WHERE expires_at <= $1")
                    .bind(now_millis())
                    .execute(&self.pool)
                    .await?;
            }
            query(
                "INSERT INTO sealed_values (name, value, expires_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at",
            )
            .bind(name)
            .bind(value.as_slice())
            .bind(expiry(ttl))
            .execute(&self.pool)
            .await?;
            Ok(())
        })
    }

    fn value_get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let row = query("SELECT value FROM sealed_values WHERE name = $1 AND expires_at > $2")
                .bind(name)
                .bind(now_millis())
                .fetch_optional(&self.pool)
                .await?;
            row.map(|row| row.get(0)).transpose()
        })
    }

    fn value_delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            query("DELETE FROM sealed_values WHERE name = $1")
                .bind(name)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
    }

    fn value_names<'a>(
        &'a self,
        infix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(async move {
            let rows = query(
                "SELECT name, expires_at FROM sealed_values \
                 WHERE expires_at > $1 AND name LIKE '%' || $2 || '%'",
            )
            .bind(now_millis())
            .bind(infix)
            .fetch_all(&self.pool)
            .await?;
            rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
        })
    }

    fn value_claim<'a>(
        &'a self,
        name: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, StoreError>> {
        Box::pin(async move {
            // One statement: an expired holder is replaced, a live one kept.
            let row = query(
                "INSERT INTO sealed_values (name, value, expires_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at \
                 WHERE sealed_values.expires_at <= $4 \
                 RETURNING value",
            )
            .bind(name)
            .bind(value.as_slice())
            .bind(expiry(ttl))
            .bind(now_millis())
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = row {
                return row.get(0);
            }
            let held = query("SELECT value FROM sealed_values WHERE name = $1")
                .bind(name)
                .fetch_one(&self.pool)
                .await?;
            held.get(0)
        })
    }
}

/// The wrapped data keys in the store (see [`crate::crypto::keyring`]).
pub struct StoreWrappedKeys(pub Arc<dyn Store>);

impl WrappedKeyStore for StoreWrappedKeys {
    fn get_wrapped<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreUnavailable>> {
        Box::pin(async move {
            self.0
                .value_get(name)
                .await
                .map_err(|e| StoreUnavailable(e.to_string()))
        })
    }

    fn put_wrapped<'a>(
        &'a self,
        name: &'a str,
        wrapped: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreUnavailable>> {
        Box::pin(async move {
            self.0
                .value_put(name, wrapped, ttl)
                .await
                .map_err(|e| StoreUnavailable(e.to_string()))
        })
    }
}
