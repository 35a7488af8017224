//! The PostgreSQL store: a connection pool; versioned migrations run at start-up (sqlx
//! records applied versions in `_sqlx_migrations`, so a restart applies nothing twice).
//! No filter of present chats: several nodes write it.
//!
//! A database that is down when chatd starts (restarting beside it, or started after it)
//! is waited for, up to [`START_PATIENCE`]: a node restarted during a database outage used
//! to exit at once ("migration failed"), and stayed down after the database came back
//! (issue 37, chaos). An error a retry cannot mend (a refused login, a bad migration)
//! ends the start at once.

use std::time::Duration;

use sqlx::migrate::MigrateError;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::db::Pool;
use super::sql::SqlStore;
use super::{ACQUIRE_TIMEOUT, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// How long start-up waits for the database to accept connections and migrations.
const START_PATIENCE: Duration = Duration::from_secs(60);
/// The first pause between tries; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(4);

/// Connects to `url` (`postgres://...`) and migrates the database.
pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    let mut pause = FIRST_PAUSE;
    loop {
        let e = match connect_and_migrate(url).await {
            Ok(pool) => return Ok(SqlStore::new(Pool::Postgres(pool), None)),
            Err(e) => e,
        };
        let now = tokio::time::Instant::now();
        if !e.passes() || now + pause >= deadline {
            return Err(e.into());
        }
        tracing::warn!(
            error = %e,
            retry_in_ms = pause.as_millis() as u64,
            "PostgreSQL cannot be reached yet; trying again"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

async fn connect_and_migrate(url: &str) -> Result<PgPool, Opening> {
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(url)
        .await
        .map_err(Opening::Connect)?;
    MIGRATOR.run(&pool).await.map_err(Opening::Migrate)?;
    Ok(pool)
}

/// Why the store did not open.
#[derive(Debug, thiserror::Error)]
enum Opening {
    #[error("{0}")]
    Connect(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(MigrateError),
}

impl Opening {
    /// Whether the database may be reachable on a later try: it refused or dropped the
    /// connection, or said it is starting or shutting down (SQLSTATE class 57P).
    fn passes(&self) -> bool {
        let e = match self {
            Opening::Connect(e)
            | Opening::Migrate(MigrateError::Execute(e))
            | Opening::Migrate(MigrateError::ExecuteMigration(e, _)) => e,
            Opening::Migrate(_) => return false,
        };
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P")),
            _ => false,
        }
    }
}

impl From<Opening> for StoreError {
    fn from(e: Opening) -> Self {
        match e {
            Opening::Connect(e) => e.into(),
            Opening::Migrate(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_tried_again_a_bad_url_or_migration_is_not() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(Opening::Connect(sqlx::Error::Io(refused)).passes());
        assert!(Opening::Connect(sqlx::Error::PoolTimedOut).passes());
        assert!(!Opening::Connect(sqlx::Error::Configuration("bad url".into())).passes());
        assert!(!Opening::Migrate(MigrateError::VersionMissing(3)).passes());
    }
}
