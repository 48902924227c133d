//! Descriptor values are bytes: a request whose entry value is not valid UTF-8 (which Envoy's
//! `string`-typed proto cannot even decode) is accepted and answered. The request is encoded
//! by hand and sent as raw bytes over a real gRPC channel.

use crate::support;

use prost::Message;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use support::*;

/// A length-delimited protobuf field (wire type 2).
fn field(tag: u8, body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128, "one-byte lengths only");
    let mut out = vec![(tag << 3) | 2, body.len() as u8];
    out.extend_from_slice(body);
    out
}

/// `RateLimitRequest { domain, descriptors: [{ entries: [{ key, value }] }] }`, by hand.
fn encode_request(domain: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let entry = [field(1, key), field(2, value)].concat();
    let descriptor = field(1, &entry);
    [field(1, domain), field(2, &descriptor)].concat()
}

/// Envoy's own `Entry`, with `string` fields.
#[derive(Clone, PartialEq, prost::Message)]
struct EnvoyEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: header
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wild
    value: "pre*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: wild}
"#;

async fn send(s: &Sluice, bytes: Vec<u8>) -> RateLimitResponse {
    raw::raw_call(s.server.grpc_addr, bytes)
        .await
        .expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_values_are_accepted_and_counted_per_value() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let bad = b"\xff\xfe\x80x";
    let raw = encode_request(b"d", b"header", bad);

    // The premise: a decoder with Envoy's `string` fields rejects this entry...
    let entry = field(1, b"header")
        .into_iter()
        .chain(field(2, bad))
        .collect::<Vec<u8>>();
    assert!(EnvoyEntry::decode(&entry[..]).is_err());
    // ...while our bytes-typed proto keeps it exactly.
    let ours = RateLimitRequest::decode(&raw[..]).expect("decodes");
    assert_eq!(ours.descriptors[0].entries[0].value, bad);

    let r = send(&s, raw.clone()).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        1
    );
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let r = send(&s, raw).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);

    // Another invalid value has its own counter (keys encode bytes injectively).
    let r = send(&s, encode_request(b"d", b"header", b"\xff\xfe\x80y")).await;
    assert_eq!(r.overall_code, Code::Ok as i32);

    // Wildcards match bytes too.
    let r = send(&s, encode_request(b"d", b"wild", b"pre\xc3\x28")).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "wild");
    assert_eq!(r.statuses[0].limit_remaining, 1);
    s.stop().await;
}
