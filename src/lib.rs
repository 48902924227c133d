//! sluice: a rate-limit service speaking the Envoy Rate Limit Service (RLS) v3 gRPC API.
//!
//! The crate is a library with a thin binary (`src/main.rs`) so that tests and the benchmark
//! tool drive the same code the server runs. See ARCHITECTURE.md for the map.

// The layout of the RLS handler's future nests the store stack (Fallback<LocalCache<Redis>>)
// deeper than rustc's default query depth allows in release builds.
#![recursion_limit = "256"]
// `pub` means the library's public surface (what main.rs, sluice-bench, the examples and the
// integration tests use); everything else is `pub(crate)` or narrower, so dead code shows.
#![deny(unreachable_pub)]

pub mod algorithm;
pub mod app;
pub(crate) mod background;
pub mod client;
pub mod clock;
pub mod config;
pub mod dry_run;
pub mod excerpt;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub(crate) mod grpc_threads;
pub mod limiter;
pub mod metrics;
pub mod model;
pub mod proto;
pub mod quiet;
pub mod rules;
pub mod secret;
pub mod service;
pub mod settings;
pub(crate) mod stats;
pub(crate) mod statsd;
pub mod store;
pub(crate) mod tasks;
pub(crate) mod watch;
