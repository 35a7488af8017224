//! The PostgreSQL store: a connection pool; versioned migrations run at start-up (sqlx
//! records applied versions in `_sqlx_migrations`, so a restart applies nothing twice).
//! No filter of present chats: several nodes write it.

use sqlx::postgres::PgPoolOptions;

use super::db::Pool;
use super::sql::SqlStore;
use super::{ACQUIRE_TIMEOUT, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connects to `url` (`postgres://...`) and migrates the database.
pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(url)
        .await?;
    MIGRATOR.run(&pool).await?;
    Ok(SqlStore::new(Pool::Postgres(pool), None))
}
