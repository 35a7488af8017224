//! A TCP listener that accepts connections and never answers: a dependency that is
//! "up" at the TCP level but hangs every request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

pub struct Blackhole {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Blackhole {
    pub async fn start() -> anyhow::Result<Blackhole> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let (count, token) = (accepted.clone(), stop.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    conn = listener.accept() => {
                        if let Ok((socket, _)) = conn {
                            count.fetch_add(1, Ordering::SeqCst);
                            held.push(socket);
                        }
                    }
                }
            }
        });
        Ok(Blackhole {
            port,
            accepted,
            stop,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
