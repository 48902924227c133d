//! Redis tests, against real `redis-server` processes the tests start (standalone, Cluster,
//! Sentinel; `scripts/test.sh` runs them again on valkey-server with the filter `redis::`):
//! `store` (the store and its scripts), `faults` (what failures cost under load), `cluster`, `cluster_reshard` (a
//! `redis_hash_tag: domain` slot moved under load),
//! `exact` (admitted ≤ limit and counted exactly under clock skew, failovers and dropped
//! connections), `sentinel`, `tls_acl` (TLS and ACL users, not on Valkey), `ops` (an outage shown in metrics,
//! health kept up). Envoy in front of Redis-backed servers is in `envoy::redis`.

mod cluster;
mod cluster_reshard;
mod exact;
mod faults;
mod ops;
mod sentinel;
mod store;
mod tls_acl;
