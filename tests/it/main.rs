//! The integration tests: one crate, one module per topic, sharing `support` (one binary to
//! link instead of one per topic). Run one topic with `cargo test --test it redis_store::`.

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
mod envoy_algorithms;
mod envoy_concurrency;
mod envoy_failure_modes;
mod envoy_http;
mod envoy_ietf_headers;
mod envoy_redis;
mod fuzz_replay;
mod grpc_threads;
mod grpc_tls;
mod health_drain;
mod hostile;
mod in_flight;
mod memory_rss;
mod metrics;
mod native_api;
mod ops_redis;
mod overload;
mod raw_bytes;
mod redis_cluster;
mod redis_faults;
mod redis_sentinel;
mod redis_store;
mod redis_tls_acl;
mod reflection;
mod reload;
mod reload_unchanged;
mod rlqs;
mod slow_clients;
mod telemetry;
mod trust;
