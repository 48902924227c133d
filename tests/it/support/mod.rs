//! Shared helpers of the integration tests, one module per concern. Most tests `use
//! support::*`: the in-process server, the request/answer vocabulary and the conformance runner
//! are re-exported here.
//!
//! The store is a parameter ([`StoreKind`]) so the same conformance tables run against every
//! backend: the in-memory store, and Redis (standalone or Cluster) at a URL the test started
//! ([`redis`]). [`envoy`] puts a real Envoy in front of the server for the end-to-end tests
//! (`envoy/`).

pub mod certs;
pub mod dsl;
pub mod envoy;
pub mod http;
pub mod poll;
pub mod process;
pub mod prom_text;
pub mod raw;
pub mod redis;
pub mod runner;
pub mod seeds;
pub mod server;

pub use dsl::*;
pub use http::http_get;
pub use process::Binary;
pub use runner::*;
pub use server::*;
