//! The integration tests: one crate, one module per topic, sharing `support` (one binary to
//! link instead of one per topic). Run one topic with `cargo test --test it redis::store::`.
//! Redis tests are under `redis/`, Envoy end-to-end tests under `envoy/`.

mod support;

mod admin_api;
mod algorithms;
mod bench_rlqs;
mod bench_tool;
mod concurrency;
mod config_errors;
mod conformance;
mod connections;
mod costly_matching;
mod drop_in_env;
mod envoy;
mod fuzz_replay;
mod grpc_first_bytes;
mod grpc_threads;
mod grpc_tls;
mod health_drain;
mod helpers_once;
mod hostile;
mod house;
mod house_names;
mod http_bodies;
mod in_flight;
mod long_inputs;
mod memory_rss;
mod metrics;
mod native_api;
mod overload;
mod raw_bytes;
mod readme;
mod redis;
mod reflection;
mod reload;
mod reload_unchanged;
mod rlqs;
mod slow_clients;
mod telemetry;
mod trust;
mod xds;
