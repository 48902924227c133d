//! A minimal HTTP/1.1 client (one request per connection, `Connection: close`, read to the
//! end): what the tests need to see of sluice's HTTP port and of Envoy's listeners.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response as the client saw it; header names lower-cased, in order.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    /// The value of the only header called `name`; `None` if absent, a panic if repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.iter().filter(|(n, _)| n == name);
        let first = values.next().map(|(_, v)| v.as_str());
        assert!(values.next().is_none(), "header {name} repeated: {self:?}");
        first
    }
}

/// Sends `method path` with `Host: host`, `headers` and `body` (with its `Content-Length`
/// when there is one or the method is POST), and reads the whole response.
pub async fn request(
    addr: SocketAddr,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<HttpResponse> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.push_str(body);
    // A server may answer before the body is all sent (413 to a body past the limit) and close:
    // the write then fails, and the answer is still there to read, as curl reads it.
    if let Err(e) = s.write_all(req.as_bytes()).await {
        if !matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return Err(e);
        }
    }
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let bad = || std::io::Error::other(format!("not an HTTP response: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body).ok_or_else(bad)?
    } else {
        body.to_string()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// GET on sluice's HTTP port: status code and body (a failure panics).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = request(addr, &addr.to_string(), "GET", path, &[], "")
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (r.status, r.body)
}

/// POST of a JSON `body` on sluice's HTTP port: status code and body (a failure panics).
pub async fn http_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let json = [("Content-Type", "application/json")];
    let r = request(addr, &addr.to_string(), "POST", path, &json, body)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    (r.status, r.body)
}

/// The payload of a `Transfer-Encoding: chunked` body (Envoy's admin answers that way).
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}
