//! A gRPC call that sends pre-encoded bytes as the `RateLimitRequest`: for requests that
//! prost's own types cannot produce (non-UTF-8 values, truncated fields, bad varints).

use prost::bytes::BufMut;
use sluice::proto::RateLimitResponse;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;

/// Sends the bytes as they are; decodes the response with prost.
struct RawCodec;

struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

struct ResponseDecoder(tonic_prost::ProstDecoder<RateLimitResponse>);

impl Decoder for ResponseDecoder {
    type Item = RateLimitResponse;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, tonic::Status> {
        self.0.decode(src)
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = RateLimitResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder(tonic_prost::ProstDecoder::default())
    }
}

/// `ShouldRateLimit` with `bytes` as the request message, on a new connection to `addr`.
pub async fn raw_call(
    addr: std::net::SocketAddr,
    bytes: Vec<u8>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(super::channel(addr).await);
    grpc.ready().await.expect("ready");
    let path =
        PathAndQuery::from_static("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
    grpc.unary(tonic::Request::new(bytes), path, RawCodec)
        .await
        .map(|r| r.into_inner())
}
