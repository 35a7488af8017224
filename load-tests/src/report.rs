//! The output of a scenario: `report.json` (machine, commit, versions, parameters, every
//! percentile), PNG charts, and a one-screen text summary (`summary.txt`, also printed).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub struct Report {
    pub scenario: &'static str,
    pub params: Value,
    pub results: Value,
    pub summary: Vec<String>,
    pub charts: Vec<crate::charts::Chart>,
}

impl Report {
    pub fn new(scenario: &'static str, params: Value) -> Self {
        Self {
            scenario,
            params,
            results: json!({}),
            summary: Vec::new(),
            charts: Vec::new(),
        }
    }

    pub fn line(&mut self, s: impl Into<String>) {
        let s = s.into();
        println!("{s}");
        self.summary.push(s);
    }

    /// Writes `DIR/<scenario>/report.json`, `summary.txt` and the charts; returns the
    /// directory.
    pub fn write(&self, out: &Path) -> anyhow::Result<PathBuf> {
        let dir = out.join(self.scenario);
        std::fs::create_dir_all(&dir)?;
        let mut charts = Vec::new();
        for c in &self.charts {
            let path = dir.join(format!("{}.png", c.name));
            match crate::charts::render(c, &path) {
                Ok(()) => charts.push(path.display().to_string()),
                Err(e) => eprintln!("chart {} not rendered: {e}", c.name),
            }
        }
        let report = json!({
            "scenario": self.scenario,
            "unix_time": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "machine": machine(),
            "commit": commit(),
            "versions": versions(),
            "params": self.params,
            "results": self.results,
            "charts": charts,
            "summary": self.summary,
        });
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(&report)?,
        )?;
        std::fs::write(dir.join("summary.txt"), self.summary.join("\n") + "\n")?;
        println!("report: {}", dir.join("report.json").display());
        Ok(dir)
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn machine() -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown")
        .to_string();
    let mem_kib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "mem_gib": mem_kib as f64 / 1024.0 / 1024.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "loadavg_at_start": read("/proc/loadavg").trim(),
        "open_files_limit": open_files_limit(),
    })
}

pub fn open_files_limit() -> u64 {
    read("/proc/self/limits")
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

fn command_output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub fn commit() -> String {
    let hash = command_output("git", &["rev-parse", "--short=12", "HEAD"]);
    let dirty =
        !command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty && hash != "unknown" {
        format!("{hash}-dirty")
    } else {
        hash
    }
}

fn versions() -> Value {
    json!({
        "chatd_load": env!("CARGO_PKG_VERSION"),
        "rustc": command_output("rustc", &["--version"]),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
    })
}
