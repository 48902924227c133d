//! Real `redis-server` processes for tests: a single node, a 6-node cluster (3 primaries, 3
//! replicas) and a primary watched by one Sentinel. Each runs in its own temp dir on a free
//! loopback port (never 6379) and is killed on drop. Admin commands go through `redis-cli`.
//!
//! Readiness is polled (PING, CLUSTER INFO, SENTINEL get-master-addr-by-name), never slept for.
//!
//! The server is `redis-server` on PATH, or the binary `SLUICE_REDIS_SERVER` names (CI runs
//! the Redis test modules a second time with Valkey's `valkey-server`: scripts/test.sh).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::poll::{wait_until, READY_WITHIN};

/// The server binary: `SLUICE_REDIS_SERVER`, else `redis-server` on PATH.
pub fn server_binary() -> String {
    std::env::var("SLUICE_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// A free loopback port whose cluster bus port (+10000) is free too.
fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().unwrap().port();
        if port == 6379 || port > 55_000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Sends PING over a raw connection; true when the server answers anything (+PONG, or an
/// error such as NOAUTH: it is up and not stalled).
/// The (window start, count) of a fixed_window key from `redis-cli HGETALL key`'s output:
/// key layout v2 keeps one field, the window's start, holding the count plus one.
pub fn fixed_window_state(hgetall: &str) -> Option<(i64, u64)> {
    let mut lines = hgetall.lines().map(str::trim);
    let start = lines.next()?.parse().ok()?;
    let stored: u64 = lines.next()?.parse().ok()?;
    Some((start, stored.checked_sub(1)?))
}

pub fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).is_ok() && matches!(buf[0], b'+' | b'-')
}

/// Runs `redis-cli -p port args...` and returns its trimmed standard output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One `redis-server` process.
pub struct RedisNode {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// The CA file of a TLS-only node (its admin commands go over TLS too).
    tls_ca: Option<PathBuf>,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

impl RedisNode {
    /// A standalone node with `DEBUG` enabled (for `DEBUG SLEEP`).
    pub fn start() -> RedisNode {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> RedisNode {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut node = RedisNode {
            port: 0,
            dir: tmp.path().to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls_ca: None,
            child: None,
            _tmp: Some(tmp),
        };
        node.start_on_a_free_port();
        node
    }

    /// A TLS-only node with a certificate for 127.0.0.1 signed by a fresh CA (made with the
    /// `openssl` command); [`Self::tls_ca`] is the CA file to trust.
    pub fn start_tls() -> RedisNode {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .output()
                .expect("openssl on PATH");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        let ca = format!("req -x509 {ec} -keyout ca.key -out ca.crt -days 2");
        let csr = format!("req {ec} -keyout server.key -out server.csr");
        let ca_args: Vec<&str> = ca
            .split(' ')
            .chain(["-subj", "/CN=sluice test CA"])
            .collect();
        openssl(&ca_args);
        let csr_args: Vec<&str> = csr.split(' ').chain(["-subj", "/CN=127.0.0.1"]).collect();
        openssl(&csr_args);
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]);
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let mut node = RedisNode {
            port: 0,
            dir: dir.clone(),
            extra: Vec::new(),
            tls_ca: Some(dir.join("ca.crt")),
            child: None,
            _tmp: Some(tmp),
        };
        node.extra = vec![
            "--tls-cert-file".into(),
            path("server.crt"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.crt"),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        node.start_on_a_free_port();
        node
    }

    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls_ca.as_deref()
    }

    fn start_on_a_free_port(&mut self) {
        let node = self;
        // A port taken between our probe and Redis' bind: try another.
        for _ in 0..10 {
            node.port = free_port();
            if node.spawn() {
                return;
            }
        }
        panic!("redis-server did not start: {}", node.log());
    }

    /// PING answered (over TLS for a TLS node).
    pub fn answers(&self) -> bool {
        match &self.tls_ca {
            None => ping(self.port),
            Some(_) => self.cli(&["PING"]) == "PONG",
        }
    }

    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let ports: [&str; 4] = match self.tls_ca {
            None => ["--port", &port, "--tls-port", "0"],
            Some(_) => ["--port", "0", "--tls-port", &port],
        };
        let child = Command::new(server_binary())
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join(format!("redis-{port}.log")))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Redis server (SLUICE_REDIS_SERVER or redis-server on PATH)");
        self.child = Some(child);
        let start = crate::support::poll::real_now();
        loop {
            if self.answers() {
                return true;
            }
            if let Some(c) = &mut self.child {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            assert!(
                crate::support::poll::real_since(start) < READY_WITHIN,
                "redis-server not ready: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("redis-{}.log", self.port)))
            .unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> String {
        match &self.tls_ca {
            None => cli(self.port, args),
            Some(ca) => {
                let ca = ca.to_string_lossy();
                let tls = [&["--tls", "--cacert", &ca][..], args].concat();
                cli(self.port, &tls)
            }
        }
    }

    /// Kills the process (SIGKILL: no chance to answer anything) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the process again on the same port and dir (empty: nothing is saved).
    pub fn restart(&mut self) {
        self.kill();
        // The port was ours a moment ago; it may take a few tries to get it back.
        wait_until("redis-server to restart on its port", || self.spawn());
    }

    /// `calls` of a command in `INFO commandstats` (0 when never called).
    /// Decision round trips: `FCALL`s (one per request on the shared pool; on a serving
    /// thread's own connection one per scheduler tick, whatever the number of decisions it
    /// carries).
    pub fn decision_calls(&self) -> u64 {
        self.command_calls("fcall")
    }

    pub fn command_calls(&self, command: &str) -> u64 {
        let info = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Six cluster-enabled nodes joined by `redis-cli --cluster create` with one replica each.
pub struct RedisCluster {
    pub nodes: Vec<RedisNode>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisNode> = (0..6)
            .map(|i| {
                RedisNode::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &format!("nodes-{i}.conf"),
                    "--cluster-node-timeout",
                    "5000",
                    // A replica may take over however stale (a test kills primaries early),
                    // and syncs at once rather than waiting for more replicas.
                    "--cluster-replica-validity-factor",
                    "0",
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for n in &nodes {
            wait_until("cluster_state:ok on every node", || {
                n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
        }
        RedisCluster { nodes }
    }

    /// `redis-cluster://h:p,h:p,...` over every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let key = String::from_utf8(key.to_vec()).expect("sluice keys are ASCII");
        self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", &key])
            .parse()
            .expect("a slot number")
    }

    /// The stored window of a fixed_window key ([`fixed_window_state`]), following
    /// redirections (`redis-cli -c`).
    pub fn fixed_window_state(&self, key: &[u8]) -> Option<(i64, u64)> {
        let key = String::from_utf8(key.to_vec()).expect("sluice keys are ASCII");
        fixed_window_state(&self.nodes[0].cli(&["-c", "HGETALL", &key]))
    }

    /// The port of the primary that owns `key`'s slot (asking a node without following).
    pub fn owner(&self, key: &[u8]) -> u16 {
        let key = String::from_utf8(key.to_vec()).expect("sluice keys are ASCII");
        let first = &self.nodes[0];
        let answer = first.cli(&["EXISTS", &key]);
        match answer.strip_prefix("MOVED ") {
            Some(rest) => rest
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("MOVED slot host:port"),
            None => first.port,
        }
    }

    /// Sum of `calls` of a command over the nodes.
    pub fn command_calls(&self, command: &str) -> u64 {
        self.nodes.iter().map(|n| n.command_calls(command)).sum()
    }
}

/// A primary and one Sentinel watching it as `mymaster`.
pub struct RedisSentinel {
    pub master: RedisNode,
    pub sentinel: RedisNode,
}

pub const SENTINEL_SERVICE: &str = "mymaster";

impl RedisSentinel {
    pub fn start() -> RedisSentinel {
        let master = RedisNode::start();
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut sentinel = None;
        for _ in 0..10 {
            let port = free_port();
            let conf = tmp.path().join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                     sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {} 1\n\
                     sentinel down-after-milliseconds {SENTINEL_SERVICE} 5000\n",
                    tmp.path().display(),
                    tmp.path().join(format!("redis-{port}.log")).display(),
                    master.port
                ),
            )
            .expect("write sentinel.conf");
            let child = Command::new(server_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the Redis server (SLUICE_REDIS_SERVER or redis-server on PATH)");
            let mut node = RedisNode {
                port,
                dir: tmp.path().to_path_buf(),
                extra: Vec::new(),
                tls_ca: None,
                child: Some(child),
                _tmp: None,
            };
            let start = crate::support::poll::real_now();
            while !ping(port) && crate::support::poll::real_since(start) < READY_WITHIN {
                if let Some(Ok(Some(_))) = node.child.as_mut().map(|c| c.try_wait()) {
                    node.child = None;
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if node.child.is_some() && ping(port) {
                sentinel = Some(node);
                break;
            }
        }
        let mut sentinel = sentinel.expect("sentinel starts");
        sentinel._tmp = Some(tmp);
        let want = master.port.to_string();
        wait_until("the sentinel to know the master", || {
            sentinel
                .cli(&["SENTINEL", "get-master-addr-by-name", SENTINEL_SERVICE])
                .contains(&want)
        });
        RedisSentinel { master, sentinel }
    }

    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SENTINEL_SERVICE}",
            self.sentinel.port
        )
    }
}

/// Options of a `RedisStore` at `url` as the store tests use it: a pool of 2, no TLS or ACL.
pub fn store_options(
    url: &str,
    clock: sluice::store::redis::ClockSource,
    command_timeout: std::time::Duration,
) -> sluice::store::redis::RedisOptions {
    use sluice::store::redis::{breaker::BreakerOptions, ConnectOptions, RedisOptions};
    RedisOptions {
        connect: ConnectOptions {
            pool_size: 2,
            connect_timeout: std::time::Duration::from_secs(2),
            ..ConnectOptions::for_url(url)
        },
        command_timeout,
        clock,
        breaker: BreakerOptions::default(),
    }
}

/// A store connected with `opts` (its script loaded), within a minute.
pub async fn connected(
    opts: sluice::store::redis::RedisOptions,
) -> sluice::store::redis::RedisStore {
    let store = sluice::store::redis::RedisStore::connect(opts).expect("valid options");
    tokio::time::timeout(std::time::Duration::from_secs(60), store.ready())
        .await
        .expect("the store connects");
    store
}

/// A current-thread runtime and a store connected with `opts` whose own connection (a
/// serving thread's, [`RedisStore::attach_thread`]) runs on it, up with the function library
/// loaded on `redis`: what a serving thread decides with. The connection makes progress only
/// while the runtime is driven (`block_on`).
pub fn on_a_serving_thread(
    redis: &RedisNode,
    opts: sluice::store::redis::RedisOptions,
) -> (tokio::runtime::Runtime, sluice::store::redis::RedisStore) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(async {
        let store = connected(opts).await;
        store.attach_thread().unwrap();
        crate::support::poll::wait_until_async("the thread's own connection", || async {
            redis
                .cli(&["CLIENT", "LIST"])
                .contains("name=sluice-thread")
                && redis.cli(&["FUNCTION", "LIST"]).contains("sluice_")
        })
        .await;
        store
    });
    (rt, store)
}

/// The storage key of descriptor `k=value` in domain `d` under `prefix`.
pub fn key_of(prefix: &str, value: &str, limit: &sluice::algorithm::Limit) -> Vec<u8> {
    let mut out = Vec::new();
    sluice::store::key::build(
        &mut out,
        prefix.as_bytes(),
        "d",
        [sluice::store::key::Part::Value {
            key: b"k",
            value: value.as_bytes(),
        }],
        limit,
        None,
    );
    out
}
