//! PostgreSQL down when chatd starts: chatd waits for it instead of exiting (issue 37: a
//! node restarted during a database outage exited with "migration failed", and stayed
//! down after the database came back).

use chatd_test_harness::postgres::Postgres;
use tokio::net::TcpListener;

use crate::support::spawn_app;

#[tokio::test]
async fn chatd_started_while_postgres_is_down_waits_for_it() {
    let mut pg = Postgres::start().await.unwrap();
    pg.create_database("late").await.unwrap();
    pg.stop().await;
    // The database's port while it is down: a connection there is dropped unanswered.
    let down = TcpListener::bind(("127.0.0.1", pg.port())).await.unwrap();
    let url = pg.url("late");
    let database = async {
        // chatd's first try finds the database down...
        let (socket, _) = down.accept().await.unwrap();
        drop((socket, down));
        // ...and then it comes back.
        pg.start_again().await.unwrap();
    };
    let (app, ()) = tokio::join!(spawn_app(|c| c.store.url = url), database);

    let body = app.readyz().await;
    assert_eq!(body["checks"]["store"], "ok", "{body}");
    // Its migrations ran on the database that came back.
    let applied = pg
        .psql(
            "late",
            "SELECT count(*) FROM _sqlx_migrations WHERE success",
        )
        .await
        .unwrap();
    assert_ne!(applied.trim(), "0", "{applied}");
}
