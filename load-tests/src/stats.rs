//! Percentiles of measured durations.

use std::time::Duration;

pub struct Summary {
    pub n: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
}

pub fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).copied().unwrap_or_default()
    };
    Summary {
        n: samples.len(),
        p50: at(0.50),
        p90: at(0.90),
        p95: at(0.95),
        p99: at(0.99),
        max: samples.last().copied().unwrap_or_default(),
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.1}µs p90={:.1}µs p95={:.1}µs p99={:.1}µs max={:.1}µs",
            self.n,
            self.p50.as_secs_f64() * 1e6,
            self.p90.as_secs_f64() * 1e6,
            self.p95.as_secs_f64() * 1e6,
            self.p99.as_secs_f64() * 1e6,
            self.max.as_secs_f64() * 1e6
        )
    }
}

/// An HDR histogram of durations in nanoseconds (1 ns .. 10 min, 3 significant digits).
#[derive(Clone)]
pub struct Hist(hdrhistogram::Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    pub fn new() -> Self {
        Hist(
            hdrhistogram::Histogram::new_with_bounds(1, 600_000_000_000, 3)
                .expect("valid histogram bounds"),
        )
    }

    pub fn record(&mut self, d: Duration) {
        let ns = (d.as_nanos() as u64).clamp(1, 600_000_000_000);
        let _ = self.0.record(ns);
    }

    pub fn add(&mut self, other: &Hist) {
        let _ = self.0.add(&other.0);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// The value at quantile `q`, in microseconds.
    pub fn us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    /// `{n, p50_us, p90_us, p99_us, p999_us, max_us, mean_us}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.len(),
            "p50_us": self.us(0.5),
            "p90_us": self.us(0.9),
            "p99_us": self.us(0.99),
            "p999_us": self.us(0.999),
            "max_us": if self.0.is_empty() { 0.0 } else { self.0.max() as f64 / 1000.0 },
            "mean_us": self.0.mean() / 1000.0,
        })
    }

    /// (value in µs, cumulative fraction) points for a CDF chart.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        if self.0.is_empty() {
            return Vec::new();
        }
        (0..=200)
            .map(|i| {
                let q = i as f64 / 200.0;
                (self.us(q), q)
            })
            .collect()
    }
}

/// The median of a list of values (0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
