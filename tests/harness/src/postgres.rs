//! A throwaway PostgreSQL cluster: `initdb` into a temp dir, `postgres` on a free port
//! (fsync off), killed on drop. Running as root, both run as the `postgres` user (PostgreSQL
//! refuses root) through `setpriv`, which execs in place so the child is postgres itself.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use crate::process::{find_binary, port_open, wait_until};

const HINT: &str = "apt-get install postgresql";
/// The superuser `initdb` creates (trust authentication on 127.0.0.1 only).
const SUPERUSER: &str = "chatd";

pub struct Postgres {
    port: u16,
    bin_dir: PathBuf,
    child: Option<Child>,
    run_as: Option<String>,
    _dir: tempfile::TempDir,
}

/// Debian keeps the server binaries outside PATH.
fn pg_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Postgres {
    pub async fn start() -> anyhow::Result<Postgres> {
        let initdb = find_binary("initdb", &pg_dirs(), HINT)?;
        let bin_dir = std::fs::canonicalize(&initdb)?
            .parent()
            .map(PathBuf::from)
            .context("initdb has no parent directory")?;
        let dir = tempfile::tempdir()?;
        let run_as = is_root().then(|| "postgres".to_string());
        if let Some(user) = &run_as {
            let status = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(dir.path())
                .status()
                .await?;
            if !status.success() {
                bail!("cannot chown the PostgreSQL temp dir to `{user}` (does the user exist?)");
            }
        }
        let mut pg = Postgres {
            port: crate::free_port(),
            bin_dir,
            child: None,
            run_as,
            _dir: dir,
        };
        let data = pg._dir.path().join("data");
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .await
            .context("running initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        pg.serve().await?;
        Ok(pg)
    }

    /// Starts the server on the cluster's data directory and port, and waits until it
    /// answers a query. Its log goes to `postgres.log` beside the data; a server that exits
    /// while starting fails at once, with the end of that log.
    async fn serve(&mut self) -> anyhow::Result<()> {
        let log_path = self._dir.path().join("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .context("opening the PostgreSQL log")?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self._dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-k")
            .arg(self._dir.path())
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("starting postgres")?;
        self.child = Some(child);
        let port = self.port;
        let deadline = tokio::time::Instant::now() + crate::process::START_DEADLINE;
        while !port_open(port).await {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                bail!("postgres exited while starting ({status}): {:?}", tail);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "postgres was not listening within {:?}",
                    crate::process::START_DEADLINE
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        // Accepting TCP precedes accepting logins: ready once a query answers (a query, not
        // a `createdb`: an attempt the server finished but the client saw fail would make
        // every later one fail with "already exists").
        let me = &*self;
        wait_until("postgres logins", || async move {
            me.psql("postgres", "SELECT 1").await.is_ok()
        })
        .await
    }

    /// A crash and a restart: SIGKILLs the postmaster (the caller kills its backends too,
    /// as a machine crash would), then starts it again on the same data and port; it
    /// recovers from its WAL.
    pub async fn crash_and_restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.start_again().await
    }

    /// SIGKILLs the postmaster and leaves the database down (its port free) until
    /// [`Postgres::start_again`].
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the stopped server again on the same data and port. Retries while the old
    /// processes still hold the shared memory.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        let mut last = None;
        for _ in 0..20 {
            match self.serve().await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.stop().await;
                    last = Some(e);
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("postgres did not restart")))
    }

    /// A PostgreSQL binary, run as the `postgres` user when we are root.
    fn command(&self, name: &str) -> Command {
        let bin = self.bin_dir.join(name);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={user}"))
                    .arg(format!("--regid={user}"))
                    .arg("--init-groups")
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates an empty database (each test gets its own).
    pub async fn create_database(&self, name: &str) -> anyhow::Result<()> {
        let out = self
            .command("createdb")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
            ])
            .arg(name)
            .output()
            .await
            .context("running createdb")?;
        if !out.status.success() {
            bail!("createdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Runs one SQL statement with `psql` and returns its unaligned, tuples-only output.
    pub async fn psql(&self, db: &str, sql: &str) -> anyhow::Result<String> {
        let out = self
            .command("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
            ])
            .args(["-d", db, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .await
            .context("running psql")?;
        if !out.status.success() {
            bail!("psql failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
