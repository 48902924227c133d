//! A client of sluice's gRPC API, without Envoy: calls
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` with the generated types in
//! `sluice::proto` and prints the answer.
//!
//! ```text
//! cargo run --example rls_client -- [--addr URL] [--hits N] [--repeat N] DOMAIN DESCRIPTOR...
//! ```
//!
//! Each DESCRIPTOR is one descriptor of the request, its entries `key=value` joined by commas,
//! in order: `client_id=batch-importer,path=/upload` is the descriptor
//! `[client_id=batch-importer, path=/upload]`. With the sample config in `config/` served by
//! `cargo run -- serve --config config/`:
//!
//! ```text
//! $ cargo run --example rls_client -- --repeat 6 edge login_attempt=alice
//! OK          [login_attempt=alice] OK remaining 4 of 5/MINUTE, reset in 42.117s
//! ...
//! OVER_LIMIT  [login_attempt=alice] OVER_LIMIT remaining 0 of 5/MINUTE, reset in 42.101s
//! ```
//!
//! Any gRPC client does the same: build a `RateLimitRequest` (domain, descriptors, optionally
//! `hits_addend`), call `should_rate_limit`, read `overall_code` and one status per descriptor.

use clap::Parser;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::{rate_limit::Unit, Code, DescriptorStatus};
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

#[derive(Parser)]
#[command(about = "Ask sluice (or any Envoy RLS v3 server) whether a request is within its limits")]
struct Args {
    /// The server's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    /// Hits this request counts for (the request's `hits_addend`; 0 means 1).
    #[arg(long, default_value_t = 0)]
    hits: u32,
    /// Send the request this many times.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// The rate limit domain (a sluice config file's `domain:`).
    domain: String,
    /// One descriptor: `key=value` entries joined by commas.
    #[arg(required = true, value_parser = parse_descriptor)]
    descriptors: Vec<RateLimitDescriptor>,
}

/// `k1=v1,k2=v2` -> a descriptor with those entries, in order.
fn parse_descriptor(s: &str) -> Result<RateLimitDescriptor, String> {
    let entries = s
        .split(',')
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("entry {kv:?} is not key=value"))?;
            Ok(Entry {
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(RateLimitDescriptor {
        entries,
        ..Default::default()
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut client = RateLimitServiceClient::connect(args.addr.clone()).await?;
    let request = RateLimitRequest {
        domain: args.domain.clone(),
        descriptors: args.descriptors.clone(),
        hits_addend: args.hits,
    };
    for _ in 0..args.repeat {
        let answer = client
            .should_rate_limit(request.clone())
            .await?
            .into_inner();
        let overall = Code::try_from(answer.overall_code).unwrap_or(Code::Unknown);
        for (i, (descriptor, status)) in args.descriptors.iter().zip(&answer.statuses).enumerate() {
            // The overall code once, then aligned descriptor lines.
            let first = if i == 0 { overall.as_str_name() } else { "" };
            println!("{first:<11} {} {}", show(descriptor), describe(status));
        }
        for header in &answer.response_headers_to_add {
            println!("{:<11} header {}: {}", "", header.key, header.value);
        }
    }
    Ok(())
}

/// `[k1=v1, k2=v2]`
fn show(d: &RateLimitDescriptor) -> String {
    let entries: Vec<String> = d
        .entries
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                String::from_utf8_lossy(&e.key),
                String::from_utf8_lossy(&e.value)
            )
        })
        .collect();
    format!("[{}]", entries.join(", "))
}

/// A descriptor status as one line: code, what is left of which limit, and when it resets.
fn describe(s: &DescriptorStatus) -> String {
    let code = Code::try_from(s.code)
        .unwrap_or(Code::Unknown)
        .as_str_name();
    match &s.current_limit {
        // No rule applied (or an `unlimited` one: remaining is then u32::MAX).
        None if s.limit_remaining == u32::MAX => format!("{code} unlimited"),
        None => format!("{code} no limit applies"),
        Some(limit) => {
            let unit = Unit::try_from(limit.unit).unwrap_or(Unit::Unknown);
            let name = if limit.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", limit.name)
            };
            let reset = s
                .duration_until_reset
                .as_ref()
                .map(|d| format!(", reset in {}.{:03}s", d.seconds, d.nanos / 1_000_000))
                .unwrap_or_default();
            format!(
                "{code} remaining {} of {}/{}{name}{reset}",
                s.limit_remaining,
                limit.requests_per_unit,
                unit.as_str_name()
            )
        }
    }
}
