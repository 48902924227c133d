//! Command-line settings of the Rate Limit Quota Service (flattened into `sluice serve`): the
//! assignments' time to live and the bounds on stream state. README.md ("RLQS") and
//! SECURITY.md explain them.

use std::time::Duration;

use clap::Args;

use crate::rules::duration::parse as parse_duration;

#[derive(Debug, Clone, Args)]
pub struct RlqsArgs {
    /// Time to live of every RLQS assignment (whole seconds, at least 1): Envoy falls back to
    /// its `expired_assignment_behavior` this long after it last heard from sluice. Keep it
    /// above the filter's `reporting_interval`, which is when sluice renews it.
    #[arg(long, env = "SLUICE_RLQS_ASSIGNMENT_TTL", default_value = "10s", value_parser = parse_ttl)]
    pub rlqs_assignment_ttl: Duration,

    /// Most RLQS streams open at once (one per Envoy and filter config); one more is refused
    /// with RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_RLQS_MAX_STREAMS", default_value_t = 10_000)]
    pub rlqs_max_streams: usize,

    /// Most buckets one RLQS stream may report; a report naming one more ends the stream with
    /// RESOURCE_EXHAUSTED.
    #[arg(
        long,
        env = "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM",
        default_value_t = 1_000
    )]
    pub rlqs_max_buckets_per_stream: usize,

    /// Largest encoded usage report, in bytes; a larger one ends the stream (OUT_OF_RANGE).
    #[arg(
        long,
        env = "SLUICE_RLQS_MAX_REPORT_BYTES",
        default_value_t = 1_048_576
    )]
    pub rlqs_max_report_bytes: usize,

    /// Most bytes one RLQS stream's buckets may hold (ids, storage keys and demand entries, as
    /// allocated, and buffers the size of its largest report and answer); a report whose new
    /// buckets need more ends the stream with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        env = "SLUICE_RLQS_MAX_BYTES_PER_STREAM",
        default_value_t = 16 * 1024 * 1024
    )]
    pub rlqs_max_bytes_per_stream: usize,

    /// Most bytes the buckets of all RLQS streams together may hold (counted as for
    /// --rlqs-max-bytes-per-stream); a report whose new buckets need more ends its stream with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_RLQS_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub rlqs_max_bytes: usize,
}

/// A duration of whole seconds, at least one: Envoy reads only the seconds of a TTL.
fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        return Err(format!(
            "{s}: an assignment TTL must be whole seconds, at least 1s (Envoy reads only its seconds)"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_whole_seconds() {
        assert_eq!(parse_ttl("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_ttl("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_ttl("1.5s").unwrap_err().contains("whole seconds"));
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("soon").is_err());
    }
}
