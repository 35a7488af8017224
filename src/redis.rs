//! The shared Redis connection of the turn store: one Redis server (a connection manager
//! that reconnects by itself) or a Redis Cluster (the crate's cluster client, which follows
//! the slots), behind one [`ConnectionLike`], with our own deadline around every call.
//! Keys that one script touches together carry one hash tag, so they live in one slot.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::OnceCell;

/// A connection to one Redis server or to a Redis Cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// How to reach Redis; connects on first use (a Redis that is down at start-up shows in
/// `/readyz`, and the node starts anyway).
pub struct Redis {
    url: String,
    cluster: bool,
    pub timeout: Duration,
    conn: OnceCell<RedisConn>,
}

impl Redis {
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> Result<Self, RedisError> {
        ::redis::Client::open(url).map_err(|e| RedisError::Unavailable(e.to_string()))?;
        Ok(Self {
            url: url.to_string(),
            cluster,
            timeout,
            conn: OnceCell::new(),
        })
    }

    /// The connection (made on first use; both kinds reconnect by themselves afterwards).
    pub async fn conn(&self) -> Result<RedisConn, RedisError> {
        let made = self
            .conn
            .get_or_try_init(|| async {
                let connect = async {
                    if self.cluster {
                        let client = ClusterClient::builder([self.url.as_str()])
                            .connection_timeout(self.timeout)
                            .response_timeout(self.timeout)
                            .build()?;
                        Ok(RedisConn::Cluster(client.get_async_connection().await?))
                    } else {
                        let client = ::redis::Client::open(self.url.as_str())?;
                        let config = ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(self.timeout))
                            .set_response_timeout(Some(self.timeout))
                            .set_number_of_retries(1)
                            .set_max_delay(Duration::from_millis(500));
                        Ok(RedisConn::Single(ConnectionManager::new_lazy_with_config(
                            client, config,
                        )?))
                    }
                };
                match tokio::time::timeout(self.timeout, connect).await {
                    Err(_) => Err(RedisError::Timeout(self.timeout)),
                    Ok(Err(e)) => Err(RedisError::Unavailable(redis_message(&e))),
                    Ok(Ok(c)) => Ok(c),
                }
            })
            .await?;
        Ok(made.clone())
    }

    /// Runs one call with the deadline.
    pub async fn run<T>(
        &self,
        f: impl std::future::Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T, RedisError> {
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(RedisError::Timeout(self.timeout)),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(RedisError::Unavailable(redis_message(&e))),
        }
    }
}

fn redis_message(e: &::redis::RedisError) -> String {
    e.to_string()
}
