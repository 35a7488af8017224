//! A small TCP proxy in front of Redis, one per chatd node (the node's `redis_url` points
//! at it), so the nemesis can cut one node off Redis and restore it: a cut drops every
//! connection through the proxy and refuses new ones (accepted and closed at once) until
//! restored.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    /// Cancelled to drop the connections open now; replaced on every cut.
    links: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl Proxy {
    /// Listens on a free port and forwards to `upstream`; runs on `tasks`.
    pub async fn start(upstream: SocketAddr, tasks: &mut JoinSet<()>) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            addr: listener.local_addr()?,
            cut: Arc::new(AtomicBool::new(false)),
            links: Arc::new(Mutex::new(CancellationToken::new())),
            stop: CancellationToken::new(),
        };
        let (cut, links, stop) = (proxy.cut.clone(), proxy.links.clone(), proxy.stop.clone());
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => break,
                    a = listener.accept() => a,
                    Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                };
                let Ok((client, _)) = accepted else { continue };
                if cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let token = links.lock().await.clone();
                conns.spawn(forward(client, upstream, token));
            }
            conns.shutdown().await;
        });
        Ok(proxy)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Drops every connection and refuses new ones.
    pub async fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let mut links = self.links.lock().await;
        links.cancel();
        *links = CancellationToken::new();
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, token: CancellationToken) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        () = token.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn forwards_bytes_drops_them_on_a_cut_and_forwards_again_once_restored() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).await.is_ok() {
                    let _ = s.write_all(&buf).await;
                }
                // Held open until the proxy drops it.
                let _ = s.read(&mut buf).await;
            }
        });
        let proxy = Proxy::start(upstream, &mut tasks).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr).await.unwrap();
        a.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        a.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");

        proxy.cut().await;
        assert_eq!(a.read(&mut buf).await.unwrap_or(0), 0, "the cut closes it");
        let mut b = TcpStream::connect(proxy.addr).await.unwrap();
        let _ = b.write_all(b"ping").await;
        assert_eq!(b.read(&mut buf).await.unwrap_or(0), 0, "refused while cut");

        proxy.restore();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        c.write_all(b"pong").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }
}
