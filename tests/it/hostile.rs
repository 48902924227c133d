//! Hostile requests over real gRPC: every request limit (refused with INVALID_ARGUMENT naming
//! its flag), a million-entry request refused before it is decoded, odd values (bytes that are
//! not UTF-8, control characters, the key format's separators, very long strings) counted as
//! bytes without colliding, and malformed protobuf answered, not crashed on.

use crate::support;

use sluice::proto::rate_limit_response::Code;
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use support::*;

const CONFIG: &str = r#"
domain: h
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: w
    value: "*:*"
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;

fn one(key: &[u8], value: &[u8]) -> RateLimitRequest {
    raw_request("h", vec![vec![(key.to_vec(), value.to_vec())]])
}

async fn invalid(s: &Sluice, req: RateLimitRequest, flag: &str) {
    match s.call(req).await {
        Err(e) if e.code() == tonic::Code::InvalidArgument && e.message().contains(flag) => {}
        other => panic!("expected INVALID_ARGUMENT naming {flag}, got {other:?}"),
    }
}

fn codes(r: &RateLimitResponse) -> Vec<i32> {
    r.statuses.iter().map(|s| s.code).collect()
}

#[tokio::test]
async fn each_limit_is_enforced_and_named() {
    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &[
            "--max-descriptors",
            "3",
            "--max-entries",
            "2",
            "--max-key-bytes",
            "8",
            "--max-value-bytes",
            "16",
            "--max-domain-bytes",
            "4",
            "--max-request-bytes",
            "2048",
        ],
    )
    .await;
    let e = |k: &str, v: &[u8]| (k.as_bytes().to_vec(), v.to_vec());
    // Exactly at every limit: accepted.
    s.call(raw_request("hhhh", vec![vec![e("k", b"")]]))
        .await
        .expect("a domain at its limit");
    let at_limits = raw_request(
        "h",
        vec![
            vec![e("kkkkkkkk", &[b'v'; 16]), e("k2", b"")],
            vec![e("k", b"x")],
            vec![e("k", b"y")],
        ],
    );
    s.call(at_limits).await.expect("a request at every limit");

    invalid(
        &s,
        raw_request("h", vec![vec![e("k", b"1")]; 4]),
        "--max-descriptors",
    )
    .await;
    invalid(
        &s,
        raw_request("h", vec![vec![e("a", b""), e("b", b""), e("c", b"")]]),
        "--max-entries",
    )
    .await;
    invalid(&s, one(b"kkkkkkkkk", b""), "--max-key-bytes").await;
    invalid(&s, one(b"k", &[0xff; 17]), "--max-value-bytes").await;
    invalid(
        &s,
        raw_request("hhhhh", vec![vec![e("k", b"")]]),
        "--max-domain-bytes",
    )
    .await;
    // 3 descriptors of 2 entries of 16 bytes are far below 2048 bytes; 200 descriptors of
    // 16-byte values are above it, and are refused by size before their count is looked at.
    invalid(
        &s,
        raw_request("h", vec![vec![e("k", &[7; 16])]; 200]),
        "--max-request-bytes",
    )
    .await;
    // Refused requests charged nothing: `k=x` still has its one hit.
    let r = s.call(one(b"k", b"x")).await.unwrap();
    assert_eq!(
        codes(&r),
        vec![Code::OverLimit as i32],
        "charged once above"
    );
    let r = s.call(one(b"k", b"fresh")).await.unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32]);
    s.stop().await;
}

#[tokio::test]
async fn the_defaults_hold_and_admit_envoy_sized_values() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    // Envoy's default header limit is 60 KiB: a value that long is counted as any other.
    let long = vec![b'z'; 65_536];
    let r = s.call(one(b"k", &long)).await.unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32]);
    let r = s.call(one(b"k", &long)).await.unwrap();
    assert_eq!(codes(&r), vec![Code::OverLimit as i32]);
    invalid(&s, one(b"k", &[b'z'; 65_537]), "--max-value-bytes").await;
    invalid(&s, one(&[b'k'; 257], b""), "--max-key-bytes").await;
    let e = (b"k".to_vec(), b"v".to_vec());
    invalid(
        &s,
        raw_request("h", vec![vec![e.clone()]; 65]),
        "--max-descriptors",
    )
    .await;
    invalid(&s, raw_request("h", vec![vec![e; 33]]), "--max-entries").await;
    invalid(
        &s,
        raw_request(&"d".repeat(257), vec![]),
        "--max-domain-bytes",
    )
    .await;
    s.stop().await;
}

/// A million entries (about 5 MB encoded) are refused by the size limit before decoding; with
/// the size limit raised out of the way, the entry limit refuses them before any matching.
#[tokio::test]
async fn a_million_entries_are_refused_cheaply() {
    let million = || {
        raw_request(
            "h",
            vec![(0..1_000_000)
                .map(|_| (b"k".to_vec(), Vec::new()))
                .collect()],
        )
    };
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    invalid(&s, million(), "--max-request-bytes").await;
    // The server is unharmed.
    let r = s.call(one(b"k", b"after")).await.unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32]);
    s.stop().await;

    let s = Sluice::start(
        StoreKind::Memory,
        Some(CONFIG),
        &["--max-request-bytes", "16000000"],
    )
    .await;
    invalid(&s, million(), "--max-entries").await;
    s.stop().await;
}

/// Values are bytes: none fails the decode or the matching, each counts on its own (limit 1:
/// the first call passes, the second does not), and none can pose as another descriptor.
#[tokio::test]
async fn odd_values_are_counted_as_bytes_without_colliding() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut values: Vec<Vec<u8>> = [
        &b""[..],
        b"\xff\xfe\xfd",
        b"\x00",
        b"\x00\x01\x1b[31m",
        b"\r\nx-injected: 1",
        b"*",
        b"**",
        b":",
        b"{",
        b"}",
        b"{x}",
        b"_",
        b"|",
        b"%",
        b"%7C",
        b"=",
        b"a|k=b",
        b"k=a",
        b"\xc3\xa9",
        b"e\xcc\x81",
        b"\xed\xa0\x80",
        b"\"quoted\" \\ slash",
    ]
    .iter()
    .map(|v| v.to_vec())
    .collect();
    values.push(vec![0xff; 65_536]);
    values.push(vec![b'%'; 65_536]);
    for v in &values {
        let r = s.call(one(b"k", v)).await.unwrap();
        assert_eq!(codes(&r), vec![Code::Ok as i32], "first call of {v:?}");
    }
    for v in &values {
        let r = s.call(one(b"k", v)).await.unwrap();
        assert_eq!(
            codes(&r),
            vec![Code::OverLimit as i32],
            "second call of {v:?}"
        );
    }

    // `a="x|b=y"` is one entry, not `a=x, b=y`; and odd keys simply have no rule.
    let e = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
    let r = s
        .call(raw_request("h", vec![vec![e(b"a", b"x|b=y")]]))
        .await
        .unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32]);
    let r = s
        .call(raw_request("h", vec![vec![e(b"a", b"x"), e(b"b", b"y")]]))
        .await
        .unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32], "a separate counter");
    let r = s
        .call(raw_request(
            "h",
            vec![vec![e(b"\xff:{}", b"v")], vec![e(b"k\n", b"v")]],
        ))
        .await
        .unwrap();
    assert_eq!(r.statuses.len(), 2);
    assert!(r.statuses.iter().all(|st| st.current_limit.is_none()));

    // Wildcards match bytes too: `*:*` against values with `:` in odd places.
    for v in [&b":"[..], b"\xff:\xff", b"a:b:c"] {
        let r = s.call(one(b"w", v)).await.unwrap();
        assert_eq!(codes(&r), vec![Code::Ok as i32], "{v:?}");
        let r = s.call(one(b"w", v)).await.unwrap();
        assert_eq!(codes(&r), vec![Code::OverLimit as i32], "{v:?}");
    }
    let r = s.call(one(b"w", b"no colon")).await.unwrap();
    assert!(r.statuses[0].current_limit.is_none());
    s.stop().await;
}

/// Bytes that are not a RateLimitRequest (a domain that is not UTF-8, truncated fields, a
/// bad varint, nesting that never ends) get INVALID_ARGUMENT, and the server keeps serving.
#[tokio::test]
async fn malformed_protobuf_is_invalid_argument() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let garbage: Vec<Vec<u8>> = vec![
        vec![0x0a, 0x02, 0xff, 0xfe],       // domain = invalid UTF-8
        vec![0x0a, 0x10, b'h'],             // domain longer than the message
        vec![0x12, 0xff, 0xff, 0xff, 0xff], // descriptor length varint runs off the end
        vec![
            0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
        {
            // Length-delimited fields nested 200 deep (field 2 inside field 2 ...).
            let mut m = Vec::new();
            for _ in 0..200 {
                let mut outer = vec![0x12];
                let mut len = m.len();
                while len >= 0x80 {
                    outer.push((len as u8) | 0x80);
                    len >>= 7;
                }
                outer.push(len as u8);
                outer.extend_from_slice(&m);
                m = outer;
            }
            m
        },
    ];
    for g in garbage {
        match raw::raw_call(s.server.grpc_addr, g.clone()).await {
            Err(e) if e.code() == tonic::Code::InvalidArgument => {}
            // Some byte strings are valid (unknown fields are skipped): then an ordinary answer.
            Ok(_) => {}
            Err(e) => panic!("{g:?}: expected INVALID_ARGUMENT, got {e:?}"),
        }
    }
    let e = raw::raw_call(s.server.grpc_addr, vec![0x0a, 0x02, 0xff, 0xfe])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("malformed request"), "{}", e.message());
    let r = s.call(one(b"k", b"still fine")).await.unwrap();
    assert_eq!(codes(&r), vec![Code::Ok as i32]);
    s.stop().await;
}

/// A flood of fresh values against a small in-memory store: the store stays within its cap,
/// and a client that is over its limit stays limited (keys within their limits go first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_keys_does_not_free_a_limited_client() {
    let config =
        "domain: m\ndescriptors:\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let s = Sluice::start(
        StoreKind::Memory,
        Some(config),
        &["--memory-max-entries", "640"],
    )
    .await;
    let ask = |v: &[u8]| raw_request("m", vec![vec![(b"c".to_vec(), v.to_vec())]]);
    for _ in 0..5 {
        s.call(ask(b"attacker")).await.unwrap();
    }
    let r = s.call(ask(b"attacker")).await.unwrap();
    assert_eq!(codes(&r), vec![Code::OverLimit as i32]);
    let workers: Vec<_> = (0..8u32)
        .map(|w| {
            let mut client = s.client.clone();
            tokio::spawn(async move {
                for i in 0..625u32 {
                    let v = format!("flood-{w}-{i}").into_bytes();
                    let r = client
                        .should_rate_limit(raw_request("m", vec![vec![(b"c".to_vec(), v)]]))
                        .await
                        .unwrap();
                    assert_eq!(r.into_inner().overall_code, Code::Ok as i32);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let r = s.call(ask(b"attacker")).await.unwrap();
    assert_eq!(
        codes(&r),
        vec![Code::OverLimit as i32],
        "5000 new keys in a 640-key store did not free the limited client"
    );
    s.stop().await;
}
