//! Compiles the protos in `proto/` (the wire-compatible Envoy RLS and RLQS copies and sluice's
//! own `sluice.v1`, and the xDS config source's ADS and `RateLimitConfig`) with protox (pure Rust, no protoc) and writes the descriptor set next to the
//! generated code for gRPC reflection (of the served APIs only).

use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
        "proto/sluice/v1/ratelimiter.proto",
    ];
    // What sluice is a client of: generated, but not advertised by reflection.
    let xds = [
        "proto/envoy/service/discovery/v3/discovery.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let served = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("rls_descriptor.bin"),
        prost::Message::encode_to_vec(&served),
    )?;
    let fds = protox::compile(protos.iter().chain(&xds), ["proto"])?;
    tonic_prost_build::configure()
        // A bucket id is matched as its entries sorted by key: a sorted map gives that order.
        .btree_map(".envoy.service.rate_limit_quota.v3.BucketId.bucket")
        // prost's format, each message encoded in one piece (`proto::codec`).
        .codec_path("crate::proto::codec::FlatCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
