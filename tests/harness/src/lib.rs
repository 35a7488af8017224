//! chatd's test harness: real services on free ports, stopped on drop, and test clients.
//! - [`redis::RedisServer`]: `redis-server` without persistence
//! - [`redis_cluster::RedisCluster`]: a Redis Cluster of N masters on loopback
//! - [`openbao::OpenBao`]: `bao server -dev` with transit enabled
//! - [`postgres::Postgres`]: a throwaway PostgreSQL cluster (`initdb` + `postgres`)
//! - [`blackhole::Blackhole`]: accepts TCP and never answers
//! - [`fake_idp::FakeIdp`]: an OpenID Connect provider's JWK set (rotatable) and its signing keys
//! - [`fake_llm::FakeLlm`]: an OpenAI-compatible streaming HTTP server with scripted replies
//! - [`fake_skill::FakeSkill`]: remote skills, web pages and a search API, scripted
//! - [`ws_client::WsClient`]: a typed WebSocket client on `chatd-protocol`
//! - [`chatd_proc::ChatdProcess`]: the chatd binary on a free port with a test's config
//!
//! A missing binary is an error with an install hint, never a skipped test.
//!
//! Background tasks here (accept loops, log readers) are owned by the service value: each
//! stops on its cancellation token or when its child process exits, both tied to `Drop`.
#![allow(clippy::disallowed_methods)]

pub mod blackhole;
pub mod chatd_proc;
pub mod fake_idp;
pub mod fake_llm;
pub mod fake_skill;
pub mod openbao;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod redis_cluster;
pub mod ws_client;

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}
