//! Shadow comparisons, the proxy side of their reporting: per (minute, rule) sums of the pairs a
//! proxy compared, sent with the usage batches (`UsageBatch.shadows`) so they share their
//! exactly-once delivery. Only counts and sums travel, never a body.

use crate::v1;

/// Upper bounds (ms) of the latency histogram buckets; one more bucket counts what is slower.
pub const SHADOW_LATENCY_BOUNDS_MS: [u64; 24] = [
    5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000, 7_500,
    10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
];

/// Buckets of a latency histogram: the bounds and the overflow.
pub const SHADOW_HIST_BUCKETS: usize = SHADOW_LATENCY_BOUNDS_MS.len() + 1;

/// The bucket counting a latency of `ms`.
pub fn latency_bucket(ms: u64) -> usize {
    SHADOW_LATENCY_BOUNDS_MS.partition_point(|bound| *bound < ms)
}

/// A latency histogram.
pub type Histogram = [u64; SHADOW_HIST_BUCKETS];

/// What one proxy compared for one rule in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShadowCounts {
    pub pairs: u64,
    pub live_ok: u64,
    pub shadow_ok: u64,
    pub live_total_ms: Histogram,
    pub live_first_byte_ms: Histogram,
    pub shadow_total_ms: Histogram,
    pub shadow_first_byte_ms: Histogram,
    pub live_input_tokens: u64,
    pub live_output_tokens: u64,
    pub shadow_input_tokens: u64,
    pub shadow_output_tokens: u64,
    pub live_cost_pico_usd: u64,
    pub shadow_cost_pico_usd: u64,
    pub live_unpriced: u64,
    pub shadow_unpriced: u64,
    pub compared: u64,
    pub same_finish_reason: u64,
    pub same_tool_names: u64,
    pub shadow_tool_args_valid: u64,
    pub json_mode_asked: u64,
    pub shadow_json_valid: u64,
    pub length_ratio_milli_sum: u64,
    pub similarity_milli_sum: u64,
}

fn add_hist(into: &mut Histogram, from: &Histogram) {
    for (a, b) in into.iter_mut().zip(from) {
        *a = a.saturating_add(*b);
    }
}

impl ShadowCounts {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &ShadowCounts) {
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut self.pairs, other.pairs);
        sum(&mut self.live_ok, other.live_ok);
        sum(&mut self.shadow_ok, other.shadow_ok);
        add_hist(&mut self.live_total_ms, &other.live_total_ms);
        add_hist(&mut self.live_first_byte_ms, &other.live_first_byte_ms);
        add_hist(&mut self.shadow_total_ms, &other.shadow_total_ms);
        add_hist(&mut self.shadow_first_byte_ms, &other.shadow_first_byte_ms);
        sum(&mut self.live_input_tokens, other.live_input_tokens);
        sum(&mut self.live_output_tokens, other.live_output_tokens);
        sum(&mut self.shadow_input_tokens, other.shadow_input_tokens);
        sum(&mut self.shadow_output_tokens, other.shadow_output_tokens);
        sum(&mut self.live_cost_pico_usd, other.live_cost_pico_usd);
        sum(&mut self.shadow_cost_pico_usd, other.shadow_cost_pico_usd);
        sum(&mut self.live_unpriced, other.live_unpriced);
        sum(&mut self.shadow_unpriced, other.shadow_unpriced);
        sum(&mut self.compared, other.compared);
        sum(&mut self.same_finish_reason, other.same_finish_reason);
        sum(&mut self.same_tool_names, other.same_tool_names);
        sum(
            &mut self.shadow_tool_args_valid,
            other.shadow_tool_args_valid,
        );
        sum(&mut self.json_mode_asked, other.json_mode_asked);
        sum(&mut self.shadow_json_valid, other.shadow_json_valid);
        sum(
            &mut self.length_ratio_milli_sum,
            other.length_ratio_milli_sum,
        );
        sum(&mut self.similarity_milli_sum, other.similarity_milli_sum);
    }

    /// The wire record of these counts for `rule` in the minute starting at `bucket`.
    pub fn to_record(&self, bucket: i64, rule: i64) -> v1::ShadowRecord {
        v1::ShadowRecord {
            bucket_start_unix_s: bucket,
            rule_id: rule,
            pairs: self.pairs,
            live_ok: self.live_ok,
            shadow_ok: self.shadow_ok,
            live_total_ms_hist: self.live_total_ms.to_vec(),
            live_first_byte_ms_hist: self.live_first_byte_ms.to_vec(),
            shadow_total_ms_hist: self.shadow_total_ms.to_vec(),
            shadow_first_byte_ms_hist: self.shadow_first_byte_ms.to_vec(),
            live_input_tokens: self.live_input_tokens,
            live_output_tokens: self.live_output_tokens,
            shadow_input_tokens: self.shadow_input_tokens,
            shadow_output_tokens: self.shadow_output_tokens,
            live_cost_pico_usd: self.live_cost_pico_usd,
            shadow_cost_pico_usd: self.shadow_cost_pico_usd,
            live_unpriced: self.live_unpriced,
            shadow_unpriced: self.shadow_unpriced,
            compared: self.compared,
            same_finish_reason: self.same_finish_reason,
            same_tool_names: self.same_tool_names,
            shadow_tool_args_valid: self.shadow_tool_args_valid,
            json_mode_asked: self.json_mode_asked,
            shadow_json_valid: self.shadow_json_valid,
            length_ratio_milli_sum: self.length_ratio_milli_sum,
            similarity_milli_sum: self.similarity_milli_sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_the_bucket_of_their_upper_bound() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(5), 0);
        assert_eq!(latency_bucket(6), 1);
        assert_eq!(latency_bucket(120_000), SHADOW_HIST_BUCKETS - 2);
        assert_eq!(latency_bucket(u64::MAX), SHADOW_HIST_BUCKETS - 1);
    }
}
