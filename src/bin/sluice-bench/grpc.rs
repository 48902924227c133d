//! The load generator's gRPC client: `ShouldRateLimit` as one HTTP/2 stream per call on a
//! connection driven by the h2 crate directly.
//!
//! Why not tonic's client: the generator shares this machine's cores with the server it
//! measures (and with Redis), so each µs it spends is taken from the server under test. tonic's
//! `Channel` puts every call through a tower buffer (a channel hop to a worker task) and hyper
//! spawns a task per request body to send it. Against the no-op floor (16 in flight over 2
//! connections) the generator cost 9.0-9.3 µs of CPU per call that way and 4.8-5.2 µs this
//! way, in one run (`client_cpu_us_per_request`). The wire is the same:
//! `application/grpc`, one length-prefixed message each way, `grpc-status` in the trailers
//! (or in the headers of a trailers-only answer).

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use prost::Message;
use tokio::net::TcpStream;

use sluice::proto::{RateLimitRequest, RateLimitResponse};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What h2 counts per small buffered DATA frame, at most (its overhead threshold).
const DATA_FRAME_OVERHEAD: usize = 256;

/// Unread answers a connection may hold: more than any `--max-in-flight` a run would use.
const MAX_UNREAD: usize = 1 << 20;

/// The connection's receive window (bytes): as hyper's client sets it, far above what the
/// answers of every call in flight take.
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// One HTTP/2 connection; clones share it.
#[derive(Clone)]
pub(crate) struct Client {
    send: SendRequest<Bytes>,
    uri: Uri,
}

/// Opens a connection to `target` (`host:port`, plaintext HTTP/2 as sluice serves gRPC).
pub(crate) async fn connect(target: &str) -> anyhow::Result<Client> {
    let uri: Uri = format!("http://{target}{PATH}")
        .parse()
        .with_context(|| format!("bad target {target}"))?;
    let tcp = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        TcpStream::connect(target),
    )
    .await
    .with_context(|| format!("connecting to {target} timed out"))?
    .with_context(|| format!("cannot connect to {target}"))?;
    tcp.set_nodelay(true)?;
    let (send, connection) = h2::client::Builder::new()
        // Answers wait unread while the generator is busy (an open loop far behind, thousands
        // in flight): h2's guard against many small buffered DATA frames (by default about
        // 100 of them per connection, then GOAWAY ENHANCE_YOUR_CALM) would end the connection
        // and fail every later call. The generator reads every answer it asked for, so it
        // allows one per call it can have out; the window, likewise, never holds it back.
        .data_frame_budget(DATA_FRAME_OVERHEAD * MAX_UNREAD)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake(tcp)
        .await
        .with_context(|| format!("HTTP/2 handshake with {target}"))?;
    // The connection's frames are read and written by this task; a failed connection fails
    // the calls on it (each counted by its code), and says why once.
    let target = target.to_string();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("sluice-bench: the connection to {target} failed: {e}");
        }
    });
    Ok(Client { send, uri })
}

/// A request as it goes on the wire: the gRPC frame (flag, length, message).
pub(crate) fn encode(request: &RateLimitRequest) -> Bytes {
    let len = request.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    // The buffer was sized for it: encoding cannot run out of room.
    let _ = request.encode(&mut buf);
    buf.freeze()
}

impl Client {
    /// One call with an [`encode`]d request: the answer's overall code, or the gRPC status
    /// code of a failed call (`UNAVAILABLE` when the connection failed).
    pub(crate) async fn should_rate_limit(&self, body: Bytes) -> Result<i32, tonic::Code> {
        let unavailable = |_| tonic::Code::Unavailable;
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/grpc"))
            .header(TE, HeaderValue::from_static("trailers"))
            .body(())
            .map_err(|_| tonic::Code::Internal)?;
        let mut send = self.send.clone().ready().await.map_err(unavailable)?;
        let (response, mut stream) = send.send_request(request, false).map_err(unavailable)?;
        stream.send_data(body, true).map_err(unavailable)?;
        let response = response.await.map_err(unavailable)?;
        if !response.status().is_success() {
            return Err(tonic::Code::Unknown);
        }
        // A trailers-only answer carries its status in the headers.
        if let Some(code) = status(response.headers()) {
            return Err(code);
        }
        let mut body = response.into_body();
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(unavailable)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(unavailable)?;
        match trailers.as_ref().and_then(status) {
            Some(code) => Err(code),
            None if trailers.is_none() => Err(tonic::Code::Internal),
            None => decode(&message),
        }
    }
}

/// The gRPC status of `headers` when it is an error (`None`: none, or OK).
fn status(headers: &HeaderMap) -> Option<tonic::Code> {
    let code = headers.get("grpc-status")?;
    match code.to_str().ok().and_then(|c| c.parse::<i32>().ok()) {
        Some(0) => None,
        Some(c) => Some(tonic::Code::from_i32(c)),
        None => Some(tonic::Code::Unknown),
    }
}

/// The overall code of one length-prefixed, uncompressed `RateLimitResponse`.
fn decode(frame: &[u8]) -> Result<i32, tonic::Code> {
    let (head, rest) = frame.split_at_checked(5).ok_or(tonic::Code::Internal)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if head[0] != 0 || rest.len() != len {
        return Err(tonic::Code::Internal);
    }
    RateLimitResponse::decode(rest)
        .map(|r| r.overall_code)
        .map_err(|_| tonic::Code::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::proto::rate_limit_response::Code;

    #[test]
    fn a_response_frame_decodes_and_a_bad_one_does_not() {
        let answer = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            ..Default::default()
        };
        let mut frame = vec![0];
        frame.extend_from_slice(&(answer.encoded_len() as u32).to_be_bytes());
        frame.extend_from_slice(&answer.encode_to_vec());
        assert_eq!(decode(&frame), Ok(Code::OverLimit as i32));
        assert_eq!(
            decode(&frame[..frame.len() - 1]),
            Err(tonic::Code::Internal)
        );
        frame[0] = 1;
        assert_eq!(decode(&frame), Err(tonic::Code::Internal));
    }

    #[test]
    fn grpc_status_reads_errors_only() {
        let mut h = HeaderMap::new();
        assert_eq!(status(&h), None);
        h.insert("grpc-status", "0".parse().expect("value"));
        assert_eq!(status(&h), None);
        h.insert("grpc-status", "8".parse().expect("value"));
        assert_eq!(status(&h), Some(tonic::Code::ResourceExhausted));
        h.insert("grpc-status", "x".parse().expect("value"));
        assert_eq!(status(&h), Some(tonic::Code::Unknown));
    }

    #[test]
    fn a_request_frame_is_flag_length_message() {
        let request = RateLimitRequest {
            domain: "d".into(),
            ..Default::default()
        };
        let frame = encode(&request);
        assert_eq!(frame[0], 0);
        assert_eq!(frame.len(), 5 + request.encoded_len());
        assert_eq!(
            RateLimitRequest::decode(&frame[5..]).expect("decodes"),
            request
        );
    }
}
