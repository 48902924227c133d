//! Errors never echo unbounded input: a 100 KB reservation id, a 200 KB reflection symbol or
//! a huge JSON value gets its real error code with a message that quotes at most an excerpt
//! (`…(+N bytes)`), not a `grpc-message` so large that clients see RESOURCE_EXHAUSTED instead.

use crate::support;

use sluice::excerpt::{MAX_EXCERPT_BYTES, MAX_MESSAGE_BYTES};
use sluice::proto::sluice::v1 as pb;
use support::http::http_post;
use support::{channel, Sluice, StoreKind};
use tonic::Code;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::ServerReflectionRequest;

use crate::native_api::{client, CONFIG};

/// A message that quotes at most `max` bytes of the input, marked as cut, and not the input
/// itself.
fn assert_cut(message: &str, max: usize) {
    assert!(message.len() < max + 200, "{} bytes", message.len());
    assert!(message.contains("…(+"), "not marked as cut: {message}");
}

/// Our own messages quote a short excerpt.
fn assert_short(message: &str) {
    assert_cut(message, MAX_EXCERPT_BYTES);
}

#[tokio::test]
async fn a_100_kb_reservation_id_gets_not_found_with_a_short_message() {
    let s = Sluice::start(StoreKind::Memory, Some(CONFIG), &[]).await;
    let mut c = client(&s).await;
    let id = "a".repeat(100_000);
    let commit = c
        .commit(pb::CommitRequest {
            reservation_id: id.clone(),
            actual_hits: 1,
        })
        .await
        .expect_err("no such reservation");
    assert_eq!(commit.code(), Code::NotFound, "{commit:?}");
    assert_short(commit.message());
    let cancel = c
        .cancel(pb::CancelRequest { reservation_id: id })
        .await
        .expect_err("no such reservation");
    assert_eq!(cancel.code(), Code::NotFound, "{cancel:?}");
    assert_short(cancel.message());
    s.stop().await;
}

#[tokio::test]
async fn a_200_kb_reflection_symbol_gets_not_found_with_a_short_message() {
    let s = Sluice::start(StoreKind::Memory, Some("domain: d\n"), &[]).await;
    for req in [
        MessageRequest::FileContainingSymbol("s".repeat(200_000)),
        MessageRequest::FileByFilename("f".repeat(200_000)),
    ] {
        let mut client = ServerReflectionClient::new(channel(s.server.grpc_addr).await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(req),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .expect("reflection call")
            .into_inner();
        let status = stream.message().await.expect_err("no such symbol");
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        // tonic-reflection's own message, cut on the way out.
        assert_cut(status.message(), MAX_MESSAGE_BYTES);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_huge_json_value_is_quoted_as_an_excerpt() {
    let s = Sluice::start(StoreKind::Memory, Some("domain: d\n"), &["--json-api"]).await;
    let unit = "x".repeat(100_000);
    let body = format!(
        r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"k","value":"v"}}],"limit":{{"requests_per_unit":1,"unit":"{unit}"}}}}]}}"#
    );
    let (code, reply) = http_post(s.server.http_addr, "/json", &body).await;
    assert_eq!(code, 400, "{}", &reply[..reply.len().min(300)]);
    assert_short(&reply);
    s.stop().await;
}
