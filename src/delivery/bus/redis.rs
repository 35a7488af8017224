//! The bus on Redis pub/sub: a channel per user (`{u:<hash>}:frames`) and per node
//! (`{n:<node>}:control`), `PUBLISH`/`SUBSCRIBE` on one server and sharded pub/sub
//! (`SPUBLISH`/`SSUBSCRIBE`, each channel in its slot) on a Redis Cluster. One RESP3
//! subscriber connection per node delivers pushes to an owned receive loop; when it drops,
//! the loop pings until Redis answers again, subscribes to every channel it holds and
//! reports `Reconnected`. Publications go through a second connection.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Bus, BusError, Received};
use crate::crypto::UserHash;
use crate::ids::NodeId;
use crate::redis::{Redis, RedisConn, RedisError};

/// How often a dropped subscriber tries Redis again.
const RETRY: Duration = Duration::from_millis(250);

fn user_channel(user: &UserHash) -> String {
    format!("{{u:{}}}:frames", user.as_str())
}
fn node_channel(node: &NodeId) -> String {
    format!("{{n:{node}}}:control")
}

impl From<RedisError> for BusError {
    fn from(e: RedisError) -> Self {
        match e {
            RedisError::Timeout(d) => BusError::Timeout(d),
            RedisError::Unavailable(m) => BusError::Unavailable(m),
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> BusError {
    BusError::Unavailable(e.to_string())
}

/// The subscriber connection.
#[derive(Clone)]
enum Subscriber {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

pub struct RedisBus {
    publisher: Redis,
    subscriber: Subscriber,
    cluster: bool,
    timeout: Duration,
    /// Channels held, restored after a reconnect. A std Mutex: read or changed in one step.
    channels: Mutex<HashSet<String>>,
    /// The subscriber is connected and every held channel subscribed.
    up: AtomicBool,
}

impl RedisBus {
    /// Connects the publisher lazily and the subscriber at once (`cluster`: `url` is a
    /// seed node of a Redis Cluster); the receive loop runs on `tracker` until `cancel`.
    pub async fn connect(
        url: &str,
        cluster: bool,
        node: &NodeId,
        sender: mpsc::Sender<Received>,
        timeout: Duration,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, BusError> {
        let (push_tx, push_rx) = mpsc::unbounded_channel::<PushInfo>();
        let subscriber = if cluster {
            let client = ClusterClient::builder([url])
                .use_protocol(ProtocolVersion::RESP3)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .push_sender(push_tx)
                .build()
                .map_err(unavailable)?;
            let connect = client.get_async_connection();
            let conn = tokio::time::timeout(timeout, connect)
                .await
                .map_err(|_| BusError::Timeout(timeout))?
                .map_err(unavailable)?;
            Subscriber::Cluster(conn)
        } else {
            let info = url.into_connection_info().map_err(unavailable)?;
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            let client =
                ::redis::Client::open(info.set_redis_settings(settings)).map_err(unavailable)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500))
                .set_push_sender(push_tx);
            let conn =
                ConnectionManager::new_lazy_with_config(client, config).map_err(unavailable)?;
            Subscriber::Single(conn)
        };
        let bus = Arc::new(Self {
            publisher: Redis::new(url, cluster, timeout)?,
            subscriber,
            cluster,
            timeout,
            channels: Mutex::new(HashSet::from([node_channel(node)])),
            up: AtomicBool::new(false),
        });
        tracker.spawn(receive(bus.clone(), push_rx, sender, cancel));
        Ok(bus)
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn command(&self, name: &str, channel: &str) -> Result<(), BusError> {
        let call = async {
            match self.subscriber.clone() {
                Subscriber::Single(mut c) => match name {
                    "subscribe" => c.subscribe(channel).await,
                    _ => c.unsubscribe(channel).await,
                },
                Subscriber::Cluster(mut c) => match name {
                    "subscribe" => c.ssubscribe(channel).await,
                    _ => c.sunsubscribe(channel).await,
                },
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(BusError::Timeout(self.timeout)),
            Ok(r) => r.map_err(unavailable),
        }
    }

    /// Subscribes to every held channel (after a connect or a reconnect); the first
    /// SUBSCRIBE is the check that Redis answers again.
    async fn restore(&self) -> Result<(), BusError> {
        let channels: Vec<String> = self.channels().iter().cloned().collect();
        for channel in channels {
            self.command("subscribe", &channel).await?;
        }
        Ok(())
    }

    async fn publish_to(&self, channel: String, payload: Vec<u8>) -> Result<(), BusError> {
        let mut conn: RedisConn = self.publisher.conn().await?;
        let command = if self.cluster { "SPUBLISH" } else { "PUBLISH" };
        let mut cmd = ::redis::cmd(command);
        cmd.arg(channel).arg(payload);
        self.publisher.run(cmd.query_async::<()>(&mut conn)).await?;
        Ok(())
    }
}

/// A push's channel and payload, for messages.
fn message(push: PushInfo) -> Option<(String, Vec<u8>)> {
    if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
        return None;
    }
    let mut data = push.data.into_iter();
    let channel = match data.next()? {
        Value::BulkString(b) => String::from_utf8(b).ok()?,
        Value::SimpleString(s) => s,
        _ => return None,
    };
    let payload = match data.next()? {
        Value::BulkString(b) => b,
        _ => return None,
    };
    Some((channel, payload))
}

/// What a channel's message is for this node.
fn received(channel: &str, payload: Vec<u8>) -> Option<Received> {
    if let Some(rest) = channel.strip_prefix("{u:") {
        let hash = rest.strip_suffix("}:frames")?;
        return Some(Received::User {
            user: UserHash::from_hex(hash)?,
            payload,
        });
    }
    channel
        .starts_with("{n:")
        .then_some(Received::Node { payload })
}

/// Hands pushes to the node; when the subscriber is down, tries again every `RETRY`,
/// restores the subscriptions and reports `Reconnected`.
async fn receive(
    bus: Arc<RedisBus>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    sender: mpsc::Sender<Received>,
    cancel: CancellationToken,
) {
    let mut connected_once = false;
    // When the subscriber was found down (unix ms), for the catch-up after it is back.
    let mut down_since: Option<i64> = None;
    // One timer for the whole loop: pushes arriving in between do not postpone a retry.
    let mut retry = tokio::time::interval(RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let down = !bus.up.load(Ordering::Acquire);
        if down && down_since.is_none() {
            down_since = Some(crate::clock::unix_millis());
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            push = pushes.recv() => {
                let Some(push) = push else { return };
                if push.kind == PushKind::Disconnection {
                    tracing::warn!("bus subscriber disconnected; reconnecting");
                    bus.up.store(false, Ordering::Release);
                    down_since.get_or_insert_with(crate::clock::unix_millis);
                } else if let Some((channel, payload)) = message(push)
                    && let Some(r) = received(&channel, payload)
                    && sender.send(r).await.is_err()
                {
                    return;
                }
            }
            _ = retry.tick(), if down => {
                match bus.restore().await {
                    Ok(()) => {
                        bus.up.store(true, Ordering::Release);
                        let down_since_ms = down_since.take().unwrap_or_else(crate::clock::unix_millis);
                        if connected_once {
                            tracing::info!("bus subscriber reconnected");
                            let back = Received::Reconnected { down_since_ms };
                            let _ = sender.send(back).await;
                        }
                        connected_once = true;
                    }
                    Err(e) => tracing::debug!(error = %e, "bus subscriber still down"),
                }
            }
        }
    }
}

type Res<'a> = BoxFuture<'a, Result<(), BusError>>;

impl Bus for RedisBus {
    fn publish<'a>(&'a self, user: &'a UserHash, payload: Vec<u8>) -> Res<'a> {
        Box::pin(self.publish_to(user_channel(user), payload))
    }

    fn publish_node<'a>(&'a self, node: &'a NodeId, payload: Vec<u8>) -> Res<'a> {
        Box::pin(self.publish_to(node_channel(node), payload))
    }

    fn subscribe<'a>(&'a self, user: &'a UserHash) -> Res<'a> {
        Box::pin(async move {
            let channel = user_channel(user);
            self.channels().insert(channel.clone());
            // Subscribed now even while the receive loop has not (re)connected yet, so no
            // frame published after this returns is missed; the loop's restore repeats it.
            let done = self.command("subscribe", &channel).await;
            if done.is_err() {
                self.up.store(false, Ordering::Release);
            }
            done
        })
    }

    fn unsubscribe<'a>(&'a self, user: &'a UserHash) -> Res<'a> {
        Box::pin(async move {
            let channel = user_channel(user);
            self.channels().remove(&channel);
            if !self.up.load(Ordering::Acquire) {
                return Ok(());
            }
            self.command("unsubscribe", &channel).await
        })
    }

    /// Up while the subscriber holds every channel (a dropped connection is reported by
    /// the connection itself and clears it).
    fn ping(&self) -> Res<'_> {
        Box::pin(async move {
            if !self.up.load(Ordering::Acquire) {
                return Err(BusError::Unavailable(
                    "the bus subscriber is not connected".into(),
                ));
            }
            Ok(())
        })
    }
}
