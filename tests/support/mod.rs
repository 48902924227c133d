//! Shared helpers of the integration tests: an in-process sluice on 127.0.0.1 driven by a
//! [`ManualClock`], a gRPC client, and the table-driven conformance runner ([`check`]).
//!
//! The store is a parameter ([`StoreKind`]) so the same conformance tables run against every
//! backend: the in-memory store, and Redis (standalone or Cluster) at a URL the test binary
//! started (`support/redis.rs`). [`envoy`] puts a real Envoy in front of the server for the
//! end-to-end tests (`tests/envoy_*.rs`).

#![allow(dead_code)] // each test crate uses a different part of this module

pub mod envoy;
pub mod raw;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;
use sluice::app::Server;
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::rate_limit_response::{Code, DescriptorStatus};
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use sluice::settings::{Cli, Command, ServeArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// The tests' "now": 30.2505 s into a UTC day (so also into an hour and a minute), chosen so
/// that every `duration_until_reset` has a sub-second part that must be rounded up to the ms.
pub const T0: Micros = 1_699_920_000_000_000 + 30_250_500;

pub const SEC: Micros = 1_000_000;

/// Which store the server under test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    /// `--backend redis` at this URL (`redis://` or `redis-cluster://`), deciding with the
    /// test's clock (`--clock local`).
    Redis(&'static str),
}

/// Numbers the servers started on a shared Redis, so each gets its own `--key-prefix`.
static SERVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl StoreKind {
    /// The command-line flags that select this store. On Redis every call gets a fresh key
    /// prefix: cases share one Redis per test binary but never each other's counters.
    pub fn flags(self) -> Vec<String> {
        match self {
            StoreKind::Memory => vec!["--backend".into(), "memory".into()],
            StoreKind::Redis(url) => {
                let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                [
                    "--backend",
                    "redis",
                    "--redis-url",
                    url,
                    "--clock",
                    "local",
                    "--redis-pool-size",
                    "1",
                    // Generous: a small shared box; no case is about timeouts.
                    "--redis-command-timeout",
                    "5s",
                    "--key-prefix",
                    &format!("t{}-{n}:", std::process::id()),
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            }
        }
    }
}

/// Parses `sluice serve` flags exactly as the binary does.
pub fn serve_args(config: &Path, store: StoreKind, flags: &[&str]) -> ServeArgs {
    let mut argv: Vec<String> = vec![
        "sluice".into(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--grpc-addr".into(),
        "127.0.0.1:0".into(),
        "--http-addr".into(),
        "127.0.0.1:0".into(),
    ];
    argv.extend(store.flags());
    argv.extend(flags.iter().map(|s| s.to_string()));
    let cli = <Cli as clap::Parser>::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("bad test flags {argv:?}: {e}"));
    match cli.command {
        Command::Serve(args) => args,
        Command::Check(_) => unreachable!("argv starts with `serve`"),
    }
}

/// A sluice running in this process.
pub struct Sluice {
    pub server: Server,
    pub clock: ManualClock,
    pub client: RateLimitServiceClient<Channel>,
    pub config_path: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Sluice {
    /// Starts a server whose `--config` is one file holding `config`; with `None` the file does
    /// not exist, so no configuration is loaded (until [`Sluice::write_config`] and a reload).
    pub async fn start(store: StoreKind, config: Option<&str>, flags: &[&str]) -> Sluice {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("config.yaml");
        if let Some(c) = config {
            std::fs::write(&config_path, c).expect("write config");
        }
        let clock = ManualClock::new(T0);
        let args = serve_args(&config_path, store, flags);
        let server = sluice::app::start(args, Arc::new(clock.clone()))
            .await
            .expect("server starts");
        // Redis connects in the background: start deciding once it is there.
        tokio::time::timeout(std::time::Duration::from_secs(60), server.store_ready())
            .await
            .expect("the store connects");
        let client = RateLimitServiceClient::new(channel(server.grpc_addr).await);
        Sluice {
            server,
            clock,
            client,
            config_path,
            dir,
        }
    }

    pub fn write_config(&self, config: &str) {
        std::fs::write(&self.config_path, config).expect("write config");
    }

    pub async fn call(&self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .clone()
            .should_rate_limit(req)
            .await
            .map(|r| r.into_inner())
    }

    pub async fn http_get(&self, path: &str) -> (u16, String) {
        http_get(self.server.http_addr, path).await
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.server.shutdown();
        self.server.wait().await.expect("clean shutdown");
    }
}

pub async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

/// A minimal HTTP/1.1 GET (one request per connection): status code and body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
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

// ---------------------------------------------------------------------------------------------
// Requests

/// One descriptor of a request.
#[derive(Clone)]
pub struct Desc {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub hits: Option<u64>,
    pub limit: Option<(u32, i32)>,
}

impl std::fmt::Debug for Desc {
    /// Entries as text (invalid UTF-8 escaped), so failure messages are readable.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = sluice::model::display_bytes;
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|(k, v)| format!("{}={}", show(k), show(v)))
            .collect();
        write!(f, "[{}]", entries.join(", "))?;
        if let Some(h) = self.hits {
            write!(f, " hits={h}")?;
        }
        if let Some((rpu, unit)) = self.limit {
            write!(f, " limit={rpu}/{unit}")?;
        }
        Ok(())
    }
}

/// A descriptor from `key, value` pairs.
pub fn d(entries: &[(&str, &str)]) -> Desc {
    Desc {
        entries: entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        hits: None,
        limit: None,
    }
}

impl Desc {
    /// Per-descriptor `hits_addend`.
    pub fn hits(mut self, n: u64) -> Self {
        self.hits = Some(n);
        self
    }
    /// Per-descriptor limit override (`unit` as `envoy.type.v3.RateLimitUnit`).
    pub fn limit(mut self, requests_per_unit: u32, unit: Unit) -> Self {
        self.limit = Some((requests_per_unit, unit as i32));
        self
    }
    /// A limit override with a raw unit number (0 is UNKNOWN).
    pub fn limit_raw(mut self, requests_per_unit: u32, unit: i32) -> Self {
        self.limit = Some((requests_per_unit, unit));
        self
    }
}

#[derive(Clone, Debug)]
pub struct Req {
    pub domain: String,
    pub descriptors: Vec<Desc>,
    pub hits_addend: u32,
}

pub fn req(domain: &str, descriptors: Vec<Desc>) -> Req {
    Req {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

impl Req {
    /// Request-level `hits_addend`.
    pub fn addend(mut self, n: u32) -> Self {
        self.hits_addend = n;
        self
    }

    pub fn to_proto(&self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            hits_addend: self.hits_addend,
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(k, v)| Entry {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect(),
                    limit: d.limit.map(|(rpu, unit)| RateLimitOverride {
                        requests_per_unit: rpu,
                        unit,
                    }),
                    hits_addend: d.hits,
                    is_negative_hits: false,
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Expected answers

/// When the expected `duration_until_reset` is.
#[derive(Clone, Copy, Debug)]
pub enum Reset {
    /// Computed from the limit's unit and the test clock: the rest of the epoch-aligned window,
    /// rounded up to the millisecond. Absent when there is no `current_limit`.
    Auto,
    /// Exactly this many milliseconds.
    Ms(i64),
}

/// The expected status of one descriptor.
#[derive(Clone, Debug)]
pub struct St {
    pub code: Code,
    pub limit: Option<(u32, Unit, &'static str)>,
    pub remaining: u32,
    pub reset: Reset,
}

/// OK within a limit, with `remaining` left.
pub fn ok(rpu: u32, unit: Unit, remaining: u32) -> St {
    St {
        code: Code::Ok,
        limit: Some((rpu, unit, "")),
        remaining,
        reset: Reset::Auto,
    }
}

/// OVER_LIMIT (remaining is always 0).
pub fn over(rpu: u32, unit: Unit) -> St {
    St {
        code: Code::OverLimit,
        limit: Some((rpu, unit, "")),
        remaining: 0,
        reset: Reset::Auto,
    }
}

/// Over a limit in shadow mode: OK with the limit and remaining 0.
pub fn shadowed(rpu: u32, unit: Unit) -> St {
    ok(rpu, unit, 0)
}

/// No limit applies: OK, no current_limit, remaining 0, no duration.
pub fn none() -> St {
    St {
        code: Code::Ok,
        limit: None,
        remaining: 0,
        reset: Reset::Auto,
    }
}

/// An `unlimited` rule: OK, no current_limit, remaining u32::MAX, no duration.
pub fn unlimited() -> St {
    St {
        remaining: u32::MAX,
        ..none()
    }
}

impl St {
    pub fn named(mut self, name: &'static str) -> Self {
        if let Some(l) = &mut self.limit {
            l.2 = name;
        }
        self
    }
    pub fn reset_ms(mut self, ms: i64) -> Self {
        self.reset = Reset::Ms(ms);
        self
    }
}

/// One step of a conformance case.
#[derive(Clone, Debug)]
pub enum Step {
    /// Send `req`; the answer must be exactly this (headers and metadata included: `None`
    /// means the response must carry none).
    Call {
        req: Req,
        overall: Code,
        statuses: Vec<St>,
        headers: Option<Vec<(String, String)>>,
        metadata: Option<Json>,
    },
    /// Send `req`; it must fail with `code` and exactly `message`.
    Fail {
        req: Req,
        code: tonic::Code,
        message: String,
    },
    /// Move the test clock forward.
    Advance(Micros),
}

pub fn expect(req: Req, overall: Code, statuses: Vec<St>) -> Step {
    Step::Call {
        req,
        overall,
        statuses,
        headers: None,
        metadata: None,
    }
}

pub fn fail(req: Req, code: tonic::Code, message: &str) -> Step {
    Step::Fail {
        req,
        code,
        message: message.into(),
    }
}

pub fn advance(by: Micros) -> Step {
    Step::Advance(by)
}

impl Step {
    /// The response headers this call must carry, in order.
    pub fn headers(mut self, want: &[(&str, &str)]) -> Self {
        if let Step::Call { headers, .. } = &mut self {
            *headers = Some(
                want.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        self
    }
    /// The `dynamic_metadata` this call must carry (protobuf numbers are doubles).
    pub fn metadata(mut self, want: Json) -> Self {
        if let Step::Call { metadata, .. } = &mut self {
            *metadata = Some(want);
        }
        self
    }
}

/// One conformance case: a config (`None`: none loaded), server flags, and steps.
pub struct Case {
    pub name: &'static str,
    pub config: Option<&'static str>,
    pub flags: &'static [&'static str],
    pub steps: Vec<Step>,
}

/// Runs one case on a fresh server with `store`; `Err` describes the first mismatch.
pub async fn check(store: StoreKind, case: &Case) -> Result<(), String> {
    let s = Sluice::start(store, case.config, case.flags).await;
    let result = run_steps(&s, &case.steps).await;
    s.stop().await;
    result
}

/// Runs every case and fails with the list of every case that failed.
pub async fn run_suite(store: StoreKind, cases: Vec<Case>) {
    let mut failures = Vec::new();
    let mut names = std::collections::HashSet::new();
    for case in &cases {
        assert!(names.insert(case.name), "duplicate case name {}", case.name);
        if let Err(e) = check(store, case).await {
            failures.push(format!("[{store:?}] {}: {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

async fn run_steps(s: &Sluice, steps: &[Step]) -> Result<(), String> {
    for (n, step) in steps.iter().enumerate() {
        let at = format!("step {n}");
        match step {
            Step::Advance(by) => s.clock.advance(*by),
            Step::Fail { req, code, message } => match s.call(req.to_proto()).await {
                Ok(r) => return Err(format!("{at}: expected {code:?} error, got {r:?}")),
                Err(e) if e.code() == *code && e.message() == message => {}
                Err(e) => {
                    return Err(format!(
                        "{at}: expected {code:?} {message:?}, got {:?} {:?}",
                        e.code(),
                        e.message()
                    ))
                }
            },
            Step::Call {
                req,
                overall,
                statuses,
                headers,
                metadata,
            } => {
                let r = s
                    .call(req.to_proto())
                    .await
                    .map_err(|e| format!("{at}: request failed: {e:?}"))?;
                let now = sluice::clock::Clock::now(&s.clock);
                compare(&r, *overall, statuses, headers.as_deref(), metadata, now)
                    .map_err(|e| format!("{at} {req:?}:\n  {e}\n  response: {r:?}"))?;
            }
        }
    }
    Ok(())
}

fn compare(
    r: &RateLimitResponse,
    overall: Code,
    statuses: &[St],
    headers: Option<&[(String, String)]>,
    metadata: &Option<Json>,
    now: Micros,
) -> Result<(), String> {
    if r.overall_code != overall as i32 {
        return Err(format!(
            "overall_code {:?}, want {overall:?}",
            Code::try_from(r.overall_code)
        ));
    }
    if r.statuses.len() != statuses.len() {
        return Err(format!(
            "{} statuses, want {}",
            r.statuses.len(),
            statuses.len()
        ));
    }
    for (i, (got, want)) in r.statuses.iter().zip(statuses).enumerate() {
        compare_status(got, want, now).map_err(|e| format!("status {i}: {e}"))?;
    }
    let got_headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let want_headers = headers.unwrap_or(&[]);
    if got_headers != want_headers {
        return Err(format!("headers {got_headers:?}, want {want_headers:?}"));
    }
    if !r.request_headers_to_add.is_empty() {
        return Err("unexpected request_headers_to_add".into());
    }
    let got_meta = r.dynamic_metadata.as_ref().map(struct_to_json);
    if &got_meta != metadata {
        return Err(format!("dynamic_metadata {got_meta:?}, want {metadata:?}"));
    }
    Ok(())
}

fn compare_status(got: &DescriptorStatus, want: &St, now: Micros) -> Result<(), String> {
    let got_limit = got.current_limit.as_ref().map(|l| {
        (
            l.requests_per_unit,
            Unit::try_from(l.unit).unwrap_or(Unit::Unknown),
            l.name.as_str(),
        )
    });
    let want_limit = want.limit;
    if got.code != want.code as i32
        || got_limit != want_limit
        || got.limit_remaining != want.remaining
    {
        return Err(format!(
            "got code {:?} limit {got_limit:?} remaining {}, want code {:?} limit {want_limit:?} remaining {}",
            Code::try_from(got.code),
            got.limit_remaining,
            want.code,
            want.remaining
        ));
    }
    let want_reset = match (want.reset, want.limit) {
        (Reset::Ms(ms), _) => Some(ms),
        (Reset::Auto, Some((_, unit, _))) => Some(window_rest_ms(unit, now)),
        (Reset::Auto, None) => None,
    };
    let got_reset = got
        .duration_until_reset
        .as_ref()
        .map(|d| (d.seconds, d.nanos));
    let want_reset = want_reset.map(|ms| (ms / 1000, (ms % 1000) as i32 * 1_000_000));
    if got_reset != want_reset {
        return Err(format!(
            "duration_until_reset (s, ns) {got_reset:?}, want {want_reset:?}"
        ));
    }
    Ok(())
}

/// The length of `unit` in seconds, as envoyproxy/ratelimit's `UnitToDivider`.
pub fn unit_seconds(unit: Unit) -> i64 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 2_592_000,
        Unit::Year => 31_536_000,
        Unit::Unknown => panic!("no window for UNKNOWN"),
    }
}

/// Milliseconds (rounded up) from `now` to the end of its epoch-aligned `unit` window.
pub fn window_rest_ms(unit: Unit, now: Micros) -> i64 {
    let w = unit_seconds(unit) * SEC;
    let rest = w - now.rem_euclid(w);
    (rest + 999) / 1000
}

/// `google.protobuf.Struct` as JSON (numbers as doubles).
pub fn struct_to_json(s: &prost_types::Struct) -> Json {
    Json::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &prost_types::Value) -> Json {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number)
        }
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

// ---------------------------------------------------------------------------------------------
// The real binary

/// `sluice serve` as a child process on free ports of 127.0.0.1.
pub struct Binary {
    pub child: std::process::Child,
    pub grpc_addr: std::net::SocketAddr,
    pub http_addr: std::net::SocketAddr,
    /// Every stderr line so far (the JSON log), collected by a thread.
    pub log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Binary {
    /// Starts the binary with `--config config` and waits for its "sluice serving" log line,
    /// which names the bound addresses.
    pub fn start(config: &Path, flags: &[&str]) -> Binary {
        Binary::start_limited(config, flags, None)
    }

    /// [`Binary::start`] with at most `fd_limit` open file descriptors (`ulimit -n` in a shell
    /// that then execs sluice).
    pub fn start_limited(config: &Path, flags: &[&str], fd_limit: Option<u32>) -> Binary {
        use std::io::BufRead;
        let exe = env!("CARGO_BIN_EXE_sluice");
        let mut command = match fd_limit {
            None => std::process::Command::new(exe),
            Some(n) => {
                let mut c = std::process::Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(exe);
                c
            }
        };
        let mut child = command
            .args(["serve", "--config"])
            .arg(config)
            .args([
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .args(flags)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(v) = serde_json::from_str::<Json>(&line) {
                        let f = &v["fields"];
                        if f["message"] == "sluice serving" {
                            let addr = |k: &str| f[k].as_str().and_then(|s| s.parse().ok());
                            let _ = tx.send((addr("grpc"), addr("http")));
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        // A generous bound so a broken start fails the test instead of hanging it.
        let (grpc, http) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("sluice did not start; log: {:?}", log.lock().unwrap()));
        Binary {
            child,
            grpc_addr: grpc.expect("grpc addr in log"),
            http_addr: http.expect("http addr in log"),
            log,
        }
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill failed");
    }

    /// Waits for the process to exit (bounded, so a hang fails the test) and returns its code.
    // The bound guards against a hung child process in real time; it measures nothing.
    #[allow(clippy::disallowed_methods)]
    pub fn wait_exit(&mut self) -> Option<i32> {
        for _ in 0..3_000 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("sluice did not exit; log: {:?}", self.log.lock().unwrap());
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
