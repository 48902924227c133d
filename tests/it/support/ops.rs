//! Helpers of the operations tests: HTTP POST, Prometheus text parsing, and bounded polling
//! for an observable state.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A minimal HTTP/1.1 POST (one request per connection): status code and body.
pub async fn http_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// One sample of a Prometheus text exposition: name and labels.
pub type Series = (String, BTreeMap<String, String>);

/// Parses the Prometheus text format into samples.
pub fn parse_prometheus(text: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let value: f64 = value.parse().expect("sample value");
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let rest = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                let mut chars = rest.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut value = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => value.push(chars.next().expect("escaped char")),
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                    labels.insert(key, value);
                }
                (name.to_string(), labels)
            }
        };
        out.insert((name, labels), value);
    }
    out
}

/// The value of `name{labels}` (labels given as `k=v` pairs, exactly the series' labels).
pub fn sample(m: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m.get(&(name.to_string(), labels)).copied()
}

/// Polls `f` until it returns `Some` (bounded, so a broken state fails the test instead of
/// hanging it; the pause only yields while another task makes progress).
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..1_000 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `sluice` as a child process, with the addresses from its "sluice serving" JSON log line.
pub struct Spawned {
    pub child: std::process::Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub prometheus: Option<SocketAddr>,
    /// Every stderr line so far.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Starts `sluice <args>` with `envs` on top of an empty environment (logs must be JSON: pass
/// `--log-format json` or `LOG_FORMAT=json`), and waits for it to serve.
pub fn spawn_sluice(args: &[&str], envs: &[(&str, &str)]) -> Spawned {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_clear()
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().expect("stderr");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    let f = &v["fields"];
                    if f["message"] == "sluice serving" {
                        let addr =
                            |k: &str| f[k].as_str().and_then(|s| s.parse::<SocketAddr>().ok());
                        let _ = tx.send((addr("grpc"), addr("http"), addr("prometheus")));
                    }
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    // A generous bound so a broken start fails the test instead of hanging it.
    let (grpc, http, prometheus) = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("sluice did not start; log: {:?}", log.lock().unwrap()));
    Spawned {
        child,
        grpc: grpc.expect("grpc address"),
        http: http.expect("http address"),
        prometheus,
        log,
    }
}

impl Spawned {
    /// Sends SIGTERM and waits (bounded) for the exit code.
    // The bound guards against a hung child in real time; it measures nothing.
    pub fn terminate_and_wait(&mut self) -> Option<i32> {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill failed");
        for _ in 0..3_000 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("sluice did not exit; log: {:?}", self.log.lock().unwrap());
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
