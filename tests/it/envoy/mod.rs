//! End-to-end tests with a real Envoy 1.40 in front of sluice (`support::envoy` starts it):
//! `http` (the RLS filter's features), `algorithms`, `concurrency`, `ietf_headers`,
//! `failure_modes` (the filter's and the store's failure policies), `redis` (two instances on
//! one Redis behind one Envoy: here because the subject is the deployment; the `redis::` filter
//! of the Valkey rerun still matches `envoy::redis::`), `gateway` (started as Envoy Gateway
//! starts envoyproxy/ratelimit). The RLQS filter's tests are in `rlqs::envoy`.

mod algorithms;
mod concurrency;
mod failure_modes;
mod gateway;
mod http;
mod ietf_headers;
mod redis;
