//! The one place the two SQL backends differ: which pool a statement runs on. Both speak
//! the same SQL (`$N` parameters, `ON CONFLICT … DO UPDATE`, `RETURNING`; no
//! backend-specific functions), so a statement is written once as a backend-neutral
//! [`Query`] (text plus [`Arg`]s) and bound to SQLite or PostgreSQL only when it runs, on a
//! [`Pool`] or inside a [`Tx`]; its rows come back as a [`Row`] read by column index.
//! Nothing here knows a table; the table files (`chats`, `messages`, `embeds`,
//! `user_state`, `values`) hold the statements.

use std::borrow::Cow;

use sqlx::{PgPool, Postgres, Row as _, Sqlite, SqlitePool};

use super::StoreError;

/// Most ids bound in one `IN (...)` list.
pub const MAX_IN: usize = 500;

/// A connection pool of either backend.
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A transaction of either backend; dropped without [`Tx::commit`] it rolls back.
pub enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

/// Where a statement runs: a pool or an open transaction.
pub enum On<'e> {
    SqlitePool(&'e SqlitePool),
    Sqlite(&'e mut sqlx::SqliteConnection),
    PostgresPool(&'e PgPool),
    Postgres(&'e mut sqlx::PgConnection),
}

impl Pool {
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        Ok(match self {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }
}

impl Tx {
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(t) => t.commit().await?,
            Tx::Postgres(t) => t.commit().await?,
        }
        Ok(())
    }
}

impl<'e> From<&'e Pool> for On<'e> {
    fn from(pool: &'e Pool) -> Self {
        match pool {
            Pool::Sqlite(p) => On::SqlitePool(p),
            Pool::Postgres(p) => On::PostgresPool(p),
        }
    }
}

impl<'e> From<&'e mut Tx> for On<'e> {
    fn from(tx: &'e mut Tx) -> Self {
        match tx {
            Tx::Sqlite(t) => On::Sqlite(t),
            Tx::Postgres(t) => On::Postgres(t),
        }
    }
}

/// A bound value; the kinds the store's columns use.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Text(Option<&'a str>),
    Int(i64),
    Bool(bool),
    Bytes(&'a [u8]),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(Some(v.as_str()))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Arg::Text(v)
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(v)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Arg::Bytes(v)
    }
}

/// One statement: its text (`$1`, `$2`, … in bind order) and its values.
pub struct Query<'a> {
    sql: Cow<'a, str>,
    args: Vec<Arg<'a>>,
}

/// Shorthand for [`Query::new`].
pub fn query<'a>(sql: impl Into<Cow<'a, str>>) -> Query<'a> {
    Query::new(sql)
}

impl<'a> Query<'a> {
    pub fn new(sql: impl Into<Cow<'a, str>>) -> Self {
        Self {
            sql: sql.into(),
            args: Vec::new(),
        }
    }

    pub fn bind(mut self, value: impl Into<Arg<'a>>) -> Self {
        self.args.push(value.into());
        self
    }

    /// `{head}$1 AND {column} IN ($2, …){tail}` with the owner as `$1`: a statement over
    /// the owner's rows among at most [`MAX_IN`] ids (the one place that builds such a list).
    pub fn owned_in(
        head: &str,
        owner: &'a str,
        column: &str,
        ids: impl IntoIterator<Item = &'a str>,
        tail: &str,
    ) -> Self {
        let mut q = Query::new(String::new()).bind(owner);
        let mut list = Vec::new();
        for id in ids {
            q = q.bind(id);
            list.push(format!("${}", q.args.len()));
        }
        q.sql = format!("{head}$1 AND {column} IN ({}){tail}", list.join(", ")).into();
        q
    }

    /// Runs the statement; the number of rows it changed.
    pub async fn execute(&self, on: impl Into<On<'_>>) -> Result<u64, StoreError> {
        Ok(match on.into() {
            On::SqlitePool(p) => self.sqlite().execute(p).await?.rows_affected(),
            On::Sqlite(c) => self.sqlite().execute(c).await?.rows_affected(),
            On::PostgresPool(p) => self.postgres().execute(p).await?.rows_affected(),
            On::Postgres(c) => self.postgres().execute(c).await?.rows_affected(),
        })
    }

    pub async fn fetch_all(&self, on: impl Into<On<'_>>) -> Result<Vec<Row>, StoreError> {
        Ok(match on.into() {
            On::SqlitePool(p) => wrap(self.sqlite().fetch_all(p).await?, Row::Sqlite),
            On::Sqlite(c) => wrap(self.sqlite().fetch_all(c).await?, Row::Sqlite),
            On::PostgresPool(p) => wrap(self.postgres().fetch_all(p).await?, Row::Postgres),
            On::Postgres(c) => wrap(self.postgres().fetch_all(c).await?, Row::Postgres),
        })
    }

    pub async fn fetch_optional(&self, on: impl Into<On<'_>>) -> Result<Option<Row>, StoreError> {
        Ok(match on.into() {
            On::SqlitePool(p) => self.sqlite().fetch_optional(p).await?.map(Row::Sqlite),
            On::Sqlite(c) => self.sqlite().fetch_optional(c).await?.map(Row::Sqlite),
            On::PostgresPool(p) => self.postgres().fetch_optional(p).await?.map(Row::Postgres),
            On::Postgres(c) => self.postgres().fetch_optional(c).await?.map(Row::Postgres),
        })
    }

    /// The one row the statement returns; `NotFound` when it returns none.
    pub async fn fetch_one(&self, on: impl Into<On<'_>>) -> Result<Row, StoreError> {
        self.fetch_optional(on).await?.ok_or(StoreError::NotFound)
    }

    fn sqlite(&self) -> sqlx::query::Query<'_, Sqlite, sqlx::sqlite::SqliteArguments<'_>> {
        bind_all(sqlx::query(&self.sql), &self.args)
    }

    fn postgres(&self) -> sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments> {
        bind_all(sqlx::query(&self.sql), &self.args)
    }
}

fn wrap<R>(rows: Vec<R>, f: fn(R) -> Row) -> Vec<Row> {
    rows.into_iter().map(f).collect()
}

/// Binds the values in order; the one generic step, over what both backends encode.
fn bind_all<'q, DB>(
    mut q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    args: &'q [Arg<'q>],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: sqlx::Database,
    Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for arg in args {
        q = match *arg {
            Arg::Text(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
            Arg::Bool(v) => q.bind(v),
            Arg::Bytes(v) => q.bind(v),
        };
    }
    q
}

/// A result row of either backend, read by column index.
pub enum Row {
    Sqlite(sqlx::sqlite::SqliteRow),
    Postgres(sqlx::postgres::PgRow),
}

impl Row {
    pub fn get<T>(&self, index: usize) -> Result<T, StoreError>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        Ok(match self {
            Row::Sqlite(r) => r.try_get(index)?,
            Row::Postgres(r) => r.try_get(index)?,
        })
    }
}

/// A stored count or version as the API's unsigned type (a negative value reads as 0).
pub fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// An API count or version as a column value (saturating).
pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A JSON list column (absent or unreadable: empty).
pub fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// A JSON body column.
pub fn decode<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(corrupt)
}

pub fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(corrupt)
}

/// A stored value that does not read back.
pub fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}
