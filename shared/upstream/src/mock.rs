//! A `provider: mock` channel's options. They travel in its `base_url`
//! (`mock://sim?latency_ms=20&failure_rate=0.3`) so that snapshots from the control plane carry
//! them too, with no extra field. The data plane's in-process mock answers requests with them;
//! the probe ([`crate::probe`]) answers a mock channel's probe with the same failure rule.

use std::time::Duration;

use http::StatusCode;
use serde::Deserialize;
use switchyard_engine::RandomSource;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockOptions {
    /// Time before the response starts.
    pub latency_ms: u64,
    /// Share of requests (0..=1) answered with `failure_status`.
    pub failure_rate: f64,
    pub failure_status: u16,
    /// Content chunks of a streamed answer.
    pub stream_chunks: usize,
    /// Gap between streamed chunks.
    pub chunk_gap_ms: u64,
    /// The assistant's answer.
    pub content: Option<String>,
}

impl Default for MockOptions {
    fn default() -> MockOptions {
        MockOptions {
            latency_ms: 0,
            failure_rate: 0.0,
            failure_status: 500,
            stream_chunks: 4,
            chunk_gap_ms: 0,
            content: None,
        }
    }
}

impl MockOptions {
    pub fn to_url(&self) -> String {
        let mut url = format!(
            "mock://sim?latency_ms={}&failure_rate={}&failure_status={}&stream_chunks={}&chunk_gap_ms={}",
            self.latency_ms,
            self.failure_rate,
            self.failure_status,
            self.stream_chunks,
            self.chunk_gap_ms
        );
        if let Some(content) = &self.content {
            url.push_str("&content=");
            url.push_str(&percent_encode(content));
        }
        url
    }

    /// The simulated failure of one request, if this draw fails: `failure_rate` of the draws
    /// answer `failure_status`. Both the data plane's answers and the probes use this rule.
    pub fn draw_failure(&self, rng: &mut impl RandomSource) -> Option<StatusCode> {
        if self.failure_rate > 0.0 && rng.next_f64() < self.failure_rate {
            Some(StatusCode::from_u16(self.failure_status).unwrap_or(StatusCode::BAD_GATEWAY))
        } else {
            None
        }
    }

    /// Time before a simulated answer starts.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }

    pub fn from_url(url: &str) -> Result<MockOptions, String> {
        let rest = url
            .strip_prefix("mock://")
            .ok_or_else(|| format!("a mock channel's base_url starts with mock://, got {url:?}"))?;
        let query = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
        let mut options = MockOptions::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad =
                |_: std::num::ParseIntError| format!("mock option {key}: bad value {value:?}");
            match key {
                "latency_ms" => options.latency_ms = value.parse().map_err(bad)?,
                "failure_rate" => {
                    options.failure_rate = value
                        .parse()
                        .map_err(|_| format!("mock option {key}: bad value {value:?}"))?
                }
                "failure_status" => options.failure_status = value.parse().map_err(bad)?,
                "stream_chunks" => options.stream_chunks = value.parse().map_err(bad)?,
                "chunk_gap_ms" => options.chunk_gap_ms = value.parse().map_err(bad)?,
                "content" => options.content = Some(percent_decode(value)),
                _ => return Err(format!("unknown mock option {key:?}")),
            }
        }
        if !(0.0..=1.0).contains(&options.failure_rate) {
            return Err("mock option failure_rate must be between 0 and 1".to_owned());
        }
        if StatusCode::from_u16(options.failure_status).is_err() {
            return Err("mock option failure_status is not an HTTP status".to_owned());
        }
        Ok(options)
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match decoded {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_through_the_url() {
        let options = MockOptions {
            latency_ms: 20,
            failure_rate: 0.25,
            failure_status: 503,
            stream_chunks: 6,
            chunk_gap_ms: 15,
            content: Some("hi there & bye".into()),
        };
        assert_eq!(MockOptions::from_url(&options.to_url()), Ok(options));
        assert_eq!(
            MockOptions::from_url("mock://sim"),
            Ok(MockOptions::default())
        );
        assert!(MockOptions::from_url("mock://sim?failure_rate=2").is_err());
        assert!(MockOptions::from_url("mock://sim?colour=red").is_err());
    }

    #[test]
    fn failures_are_drawn_at_the_failure_rate() {
        let mut rng = switchyard_engine::SplitMix64::new(7);
        let never = MockOptions::default();
        assert!((0..100).all(|_| never.draw_failure(&mut rng).is_none()));
        let always = MockOptions::from_url("mock://sim?failure_rate=1&failure_status=503").unwrap();
        assert!((0..100)
            .all(|_| always.draw_failure(&mut rng) == Some(StatusCode::SERVICE_UNAVAILABLE)));
    }

    /// A source that draws the same number every time.
    struct Fixed(f64);

    impl RandomSource for Fixed {
        fn next_u64(&mut self) -> u64 {
            0 // Not called: `next_f64` is overridden.
        }

        fn next_f64(&mut self) -> f64 {
            self.0
        }
    }

    #[test]
    fn a_draw_fails_only_below_the_failure_rate() {
        let half = MockOptions::from_url("mock://sim?failure_rate=0.5&failure_status=500").unwrap();
        assert_eq!(
            half.draw_failure(&mut Fixed(0.49)),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(
            half.draw_failure(&mut Fixed(0.5)),
            None,
            "at the rate: no failure"
        );
        assert_eq!(half.draw_failure(&mut Fixed(0.9)), None);
    }

    #[test]
    fn the_content_is_percent_encoded_except_unreserved_characters() {
        let options = MockOptions {
            content: Some("Az09-_.~ é&".into()),
            ..MockOptions::default()
        };
        assert!(
            options.to_url().ends_with("&content=Az09-_.~%20%C3%A9%26"),
            "{}",
            options.to_url()
        );
    }
}
