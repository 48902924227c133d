//! gRPC server reflection: tools such as grpcurl discover the RLS and RLQS services and their
//! message types without any .proto file.

use crate::support;

use support::{channel, Sluice, StoreKind};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

async fn ask(s: &Sluice, req: MessageRequest) -> MessageResponse {
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
    stream
        .message()
        .await
        .expect("reflection answer")
        .expect("one message")
        .message_response
        .expect("a response")
}

#[tokio::test]
async fn reflection_lists_the_rls_and_rlqs_services_and_resolves_their_types() {
    let s = Sluice::start(StoreKind::Memory, Some("domain: d\n"), &[]).await;
    let MessageResponse::ListServicesResponse(list) =
        ask(&s, MessageRequest::ListServices(String::new())).await
    else {
        panic!("expected a service list");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"envoy.service.ratelimit.v3.RateLimitService"),
        "{names:?}"
    );
    assert!(
        names.contains(&"envoy.service.rate_limit_quota.v3.RateLimitQuotaService"),
        "{names:?}"
    );
    assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
    assert!(names.contains(&"sluice.v1.RateLimiter"), "{names:?}");

    let MessageResponse::FileDescriptorResponse(files) = ask(
        &s,
        MessageRequest::FileContainingSymbol("envoy.service.ratelimit.v3.RateLimitService".into()),
    )
    .await
    else {
        panic!("expected file descriptors");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    let MessageResponse::FileDescriptorResponse(files) = ask(
        &s,
        MessageRequest::FileContainingSymbol(
            "envoy.service.rate_limit_quota.v3.RateLimitQuotaService".into(),
        ),
    )
    .await
    else {
        panic!("expected file descriptors");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    // The native API's file, with its import (google/protobuf/duration.proto) resolvable.
    let MessageResponse::FileDescriptorResponse(files) = ask(
        &s,
        MessageRequest::FileContainingSymbol("sluice.v1.RateLimiter".into()),
    )
    .await
    else {
        panic!("expected file descriptors");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    s.stop().await;
}
