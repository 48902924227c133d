//! A client of sluice's native API (`sluice.v1.RateLimiter`) through `sluice::client`: the
//! reservation lifecycle of an LLM gateway, which knows a call's token count only afterwards.
//! It reserves an estimate, does the "work", commits the actual count (giving back the rest,
//! or charging an overrun as debt), and checks what is left.
//!
//! ```text
//! cargo run --example native_client -- [--addr URL] [--ttl SECS] [--cancel]
//!     DOMAIN DESCRIPTOR ESTIMATE ACTUAL
//! ```
//!
//! DESCRIPTOR is `key=value` entries joined by commas. With a domain that has
//! `allow_reservations: true` (the sample config's `llm`, served by
//! `cargo run -- serve --config config/`):
//!
//! ```text
//! $ cargo run --example native_client -- llm tenant=acme 2000 1234
//! reserved    2000 for [tenant=acme]: remaining 98000 of 100000 per 3600s (tokens_per_tenant)
//! committed   1234
//! now         remaining 98766
//! ```

use std::time::Duration;

use clap::Parser;
use sluice::client::{Client, Descriptor, Reserved};

#[derive(Parser)]
#[command(about = "Reserve quota in sluice, then commit what was used (or cancel)")]
struct Args {
    /// The server's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    /// How long the reservation is held before it counts as used.
    #[arg(long, default_value_t = 60)]
    ttl: u64,
    /// Cancel instead of committing.
    #[arg(long)]
    cancel: bool,
    /// The rate limit domain (a sluice config file's `domain:`).
    domain: String,
    /// The descriptor: `key=value` entries joined by commas.
    descriptor: String,
    /// Hits to reserve.
    estimate: u64,
    /// Hits actually used (committed).
    actual: u64,
}

fn descriptor(s: &str, hits: u64) -> Result<Descriptor, String> {
    let entries = s
        .split(',')
        .map(|kv| {
            kv.split_once('=')
                .ok_or_else(|| format!("entry {kv:?} is not key=value"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Descriptor::new(entries).hits(hits))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut sluice = Client::connect(args.addr.clone()).await?;
    let d = descriptor(&args.descriptor, args.estimate)?;
    let reservation = match sluice
        .reserve(&args.domain, [d], Duration::from_secs(args.ttl))
        .await?
    {
        Reserved::Granted(r) => r,
        Reserved::Rejected(answer) => {
            let s = &answer.statuses[0];
            let wait = s.retry_after.as_ref().map_or(0, |d| d.seconds);
            println!("rejected    over the limit; retry in {wait}s");
            std::process::exit(2);
        }
    };
    let s = &reservation.answer().statuses[0];
    let limit = s
        .limit
        .as_ref()
        .map(|l| {
            let window = l.window.as_ref().map_or(0, |w| w.seconds);
            format!(" of {} per {window}s ({})", l.requests, l.name)
        })
        .unwrap_or_default();
    println!(
        "reserved    {} for [{}]: remaining {}{limit}",
        args.estimate, args.descriptor, s.remaining
    );
    // ... the work whose cost is known only afterwards ...
    if args.cancel {
        reservation.cancel().await?;
        println!("cancelled");
    } else {
        reservation.commit(args.actual).await?;
        println!("committed   {}", args.actual);
    }
    let look = descriptor(&args.descriptor, 0)?;
    let now = sluice.check(&args.domain, [look]).await?;
    println!("now         remaining {}", now.statuses[0].remaining);
    Ok(())
}
