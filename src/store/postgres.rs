//! The PostgreSQL store: a connection pool; versioned migrations run at start-up (sqlx
//! records applied versions in `_sqlx_migrations`, so a restart applies nothing twice).

use sqlx::postgres::PgPoolOptions;

use super::ACQUIRE_TIMEOUT;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

pub struct PostgresStore {
    pool: sqlx::PgPool,
    /// None: several nodes write the store (see `present`).
    present: Option<super::present::PresentChats>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://...`) and migrates the database.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(url)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Self {
            pool,
            present: None,
        })
    }
}

super::sql::impl_store!(PostgresStore, sqlx::Postgres, "postgres");
super::values::impl_values!(PostgresStore);
