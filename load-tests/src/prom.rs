//! A small reader of Prometheus / OpenMetrics text (`name{labels} value` lines), for the
//! figures a scenario reads from chatd's `GET /metrics`. A metric that is not there is
//! `None`, never an error: the scenarios print "n/a" for it. A series of a declared metric
//! (`# TYPE name ...`) that was never touched (a label set appears on first use) is 0.

use std::net::SocketAddr;

/// One sample line.
#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// A scrape of `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
    /// Metric names declared by `# TYPE` lines.
    families: Vec<String>,
}

/// A histogram's `_sum`, `_count` and cumulative `_bucket`s (upper bound, count), sorted.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    pub sum: f64,
    pub count: f64,
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The mean (`sum / count`), if anything was observed.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The quantile `q`, interpolated linearly inside its bucket (0 is the first bucket's
    /// lower bound); in the `+Inf` bucket, the highest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 || self.buckets.is_empty() {
            return None;
        }
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cum) in &self.buckets {
            if cum >= rank && cum > below {
                if le.is_infinite() {
                    return Some(lower);
                }
                return Some(lower + (le - lower) * (rank - below) / (cum - below));
            }
            if le.is_finite() {
                lower = le;
            }
            below = cum;
        }
        Some(lower)
    }

    /// `self - before` (what was observed between two scrapes).
    pub fn since(&self, before: &Histogram) -> Histogram {
        Histogram {
            sum: self.sum - before.sum,
            count: self.count - before.count,
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| {
                    let b = before
                        .buckets
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0.0, |(_, c)| *c);
                    (le, c - b)
                })
                .collect(),
        }
    }
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        Scrape {
            samples: text.lines().filter_map(parse_line).collect(),
            families: text
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_string)
                .collect(),
        }
    }

    /// Whether the sample name `name` belongs to a metric the scrape declares.
    fn declared(&self, name: &str) -> bool {
        self.families.iter().any(|f| {
            name.strip_prefix(f.as_str()).is_some_and(|rest| {
                ["", "_total", "_sum", "_count", "_bucket", "_created"].contains(&rest)
            })
        })
    }

    /// The sum of the samples named `name` that carry every label of `labels` (0 for a
    /// declared metric without such a sample).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self.declared(name).then_some(0.0);
        for s in self.samples.iter().filter(|s| s.name == name) {
            if labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            {
                *found.get_or_insert(0.0) += s.value;
            }
        }
        found
    }

    /// The histogram `name` (its `_sum`, `_count`, `_bucket` series) with `labels`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Option<Histogram> {
        let sum = self.value(&format!("{name}_sum"), labels)?;
        let count = self.value(&format!("{name}_count"), labels)?;
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for s in self.samples.iter().filter(|s| s.name == bucket) {
            if !labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            {
                continue;
            }
            let Some(le) = s
                .labels
                .iter()
                .find(|(k, _)| k == "le")
                .and_then(|(_, v)| parse_value(v))
            else {
                continue;
            };
            match buckets.iter_mut().find(|(l, _)| *l == le) {
                Some(b) => b.1 += s.value,
                None => buckets.push((le, s.value)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some(Histogram {
            sum,
            count,
            buckets,
        })
    }
}

/// A counter's increase between two scrapes; a series missing from a scrape that worked
/// counts as 0 (label sets appear on first use), a failed scrape makes it unknown.
pub fn delta(
    before: Option<&Scrape>,
    after: Option<&Scrape>,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let (before, after) = (before?, after?);
    let a = after.value(name, labels)?;
    Some(a - before.value(name, labels).unwrap_or(0.0))
}

/// A histogram's observations between two scrapes (see [`delta`]).
pub fn histogram_delta(
    before: Option<&Scrape>,
    after: Option<&Scrape>,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<Histogram> {
    let (before, after) = (before?, after?);
    let a = after.histogram(name, labels)?;
    Some(match before.histogram(name, labels) {
        Some(b) => a.since(&b),
        None => a,
    })
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => v.parse().ok(),
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(body)?;
        labels = parsed;
        rest = after;
    }
    // The value; a timestamp or an exemplar (` # {...} v`) may follow.
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// `a="x",b="y\"z"}` → the labels and what follows the closing brace.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut labels = Vec::new();
    loop {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        if *b.get(i)? == b'}' {
            return Some((labels, &s[i + 1..]));
        }
        let eq = i + s[i..].find('=')?;
        let key = s[i..eq].trim().to_string();
        i = eq + 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let mut value = String::new();
        loop {
            let c = s[i..].chars().next()?;
            i += c.len_utf8();
            match c {
                '\\' => {
                    let e = s[i..].chars().next()?;
                    i += e.len_utf8();
                    value.push(if e == 'n' { '\n' } else { e });
                }
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((key, value));
    }
}

/// `GET http://addr/metrics`, parsed; `None` when it cannot be read.
pub async fn scrape(addr: SocketAddr) -> Option<Scrape> {
    let resp = reqwest::get(format!("http://{addr}/metrics")).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(Scrape::parse(&resp.text().await.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP chatd_speculative_main_calls Main calls.
# TYPE chatd_speculative_main_calls counter
chatd_speculative_main_calls_total{outcome="used"} 7
chatd_speculative_main_calls_total{outcome="wasted"} 3
chatd_main_call_input_tokens_total 1000
# TYPE chatd_main_call_decision_seconds histogram
chatd_main_call_decision_seconds_sum 2.0
chatd_main_call_decision_seconds_count 10
chatd_main_call_decision_seconds_bucket{le="0.1"} 0
chatd_main_call_decision_seconds_bucket{le="0.2"} 4
chatd_main_call_decision_seconds_bucket{le="0.4"} 10
chatd_main_call_decision_seconds_bucket{le="+Inf"} 10
chatd_turn_first_token_seconds_count{speculation="used",x="a\"b,c"} 5
# EOF
"#;

    #[test]
    fn reads_counters_labels_and_histograms() {
        let s = Scrape::parse(TEXT);
        assert_eq!(
            s.value("chatd_speculative_main_calls_total", &[("outcome", "used")]),
            Some(7.0)
        );
        assert_eq!(
            s.value("chatd_speculative_main_calls_total", &[]),
            Some(10.0)
        );
        assert_eq!(s.value("chatd_nothing_total", &[]), None);
        // Declared, that label set never used.
        assert_eq!(
            s.value(
                "chatd_speculative_main_calls_total",
                &[("outcome", "started")]
            ),
            Some(0.0)
        );
        assert_eq!(
            s.value(
                "chatd_turn_first_token_seconds_count",
                &[("speculation", "used"), ("x", "a\"b,c")]
            ),
            Some(5.0)
        );
        let h = s
            .histogram("chatd_main_call_decision_seconds", &[])
            .unwrap();
        assert_eq!(h.mean(), Some(0.2));
        // Rank 5 of 10: one of the six in (0.2, 0.4].
        let p50 = h.quantile(0.5).unwrap();
        assert!((p50 - (0.2 + 0.2 / 6.0)).abs() < 1e-9, "{p50}");
        let empty = Scrape::parse("");
        assert!(
            delta(
                Some(&empty),
                Some(&s),
                "chatd_main_call_input_tokens_total",
                &[]
            ) == Some(1000.0)
        );
        assert!(delta(None, Some(&s), "chatd_main_call_input_tokens_total", &[]).is_none());
        let d =
            histogram_delta(Some(&s), Some(&s), "chatd_main_call_decision_seconds", &[]).unwrap();
        assert_eq!(d.count, 0.0);
        assert_eq!(d.quantile(0.5), None);
    }
}
