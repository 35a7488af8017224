//! Bounded `IN (...)` lists of ids, always under the rows' owner.

/// Most ids bound in one `IN (...)` list.
pub const MAX_IN: usize = 500;

/// `{head}<owner> AND {column} IN (<ids>){tail}`: a query over the owner's rows among at
/// most [`MAX_IN`] ids (the one place that builds such a list).
pub fn owned_in<'a, DB, T>(
    head: &str,
    owner: &'a str,
    column: &str,
    ids: impl IntoIterator<Item = T>,
    tail: &str,
) -> sqlx::QueryBuilder<'a, DB>
where
    DB: sqlx::Database,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    T: 'a + sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::QueryBuilder::new(head);
    q.push_bind(owner);
    q.push(" AND ");
    q.push(column);
    q.push(" IN (");
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(id);
    }
    q.push(")");
    q.push(tail);
    q
}
