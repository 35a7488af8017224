//! Percentiles of measured durations.

use std::time::Duration;

pub struct Summary {
    pub n: usize,
    pub p50: Duration,
    pub p90: Duration,
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
        p99: at(0.99),
        max: samples.last().copied().unwrap_or_default(),
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.1}µs p90={:.1}µs p99={:.1}µs max={:.1}µs",
            self.n,
            self.p50.as_secs_f64() * 1e6,
            self.p90.as_secs_f64() * 1e6,
            self.p99.as_secs_f64() * 1e6,
            self.max.as_secs_f64() * 1e6
        )
    }
}
