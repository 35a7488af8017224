//! The embedded store: one SQLite file (WAL journal, `synchronous = NORMAL`, foreign keys
//! on, a busy timeout so writers queue instead of failing), with the filter of the chats
//! it may hold (`present`), since this process is its only writer.

use std::str::FromStr;
use std::time::Duration;

use futures_util::TryStreamExt;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::db::Pool;
use super::present::PresentChats;
use super::sql::SqlStore;
use super::{ACQUIRE_TIMEOUT, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Opens (creating if missing) the database at `url` (`sqlite://PATH`) and migrates it.
pub async fn open(url: &str) -> Result<SqlStore, StoreError> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5));
    if let Some(dir) = options.get_filename().parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", dir.display())))?;
    }
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options)
        .await?;
    MIGRATOR.run(&pool).await?;
    let present = PresentChats::new();
    let mut stored = sqlx::query_scalar::<_, String>("SELECT chat_id FROM chats").fetch(&pool);
    while let Some(id) = stored.try_next().await? {
        present.note_id(&id);
    }
    drop(stored);
    Ok(SqlStore::new(Pool::Sqlite(pool), Some(present)))
}
