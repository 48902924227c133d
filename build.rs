//! Compiles the protos in `proto/` (the wire-compatible Envoy RLS and RLQS copies and sluice's
//! own `sluice.v1`) with protox (pure Rust, no protoc) and writes the descriptor set next to the
//! generated code for gRPC reflection.

use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
        "proto/sluice/v1/ratelimiter.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("rls_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        // A bucket id is matched as its entries sorted by key: a sorted map gives that order.
        .btree_map(".envoy.service.rate_limit_quota.v3.BucketId.bucket")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
