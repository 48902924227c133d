//! Redis over TLS with client certificates (`tls-auth-clients yes`) and an ACL user, against a
//! real TLS-only `redis-server`; certificates generated in the test. The password comes from a
//! file or from `SLUICE_REDIS_PASSWORD`, and never shows in a log line, even at trace level.

use crate::support::certs;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::poll::{wait_until, wait_until_async};
use crate::support::serve_argv;
use certs::MutualTls;
use sluice::algorithm::{Ask, Limit};
use sluice::model::Micros;
use sluice::proto::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};
use sluice::secret::Secret;
use sluice::store::redis::breaker::BreakerOptions;
use sluice::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStore};
use sluice::store::{Check, Deadline};

const PASSWORD: &str = "pw-7c1f0b1e-never-logged";
const T0: Micros = 1_700_000_000_000_000;

/// A TLS-only redis-server that requires client certificates and has one ACL user, `sluice`.
struct TlsRedis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl TlsRedis {
    fn start() -> TlsRedis {
        let mut dir = tempfile::tempdir().unwrap();
        let MutualTls {
            ca_file: ca_path,
            server_cert,
            server_key,
            client_cert,
            client_key,
            ..
        } = MutualTls::write(
            dir.path(),
            "redis CA",
            ("redis", &["127.0.0.1", "localhost"]),
            ("client", &["sluice.internal"]),
        );
        for _ in 0..10 {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().port()
            };
            let p = |p: &Path| p.display().to_string();
            let child = Command::new(crate::support::redis::server_binary())
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--tls-cert-file", &p(&server_cert)])
                .args(["--tls-key-file", &p(&server_key)])
                .args(["--tls-ca-cert-file", &p(&ca_path)])
                .args(["--tls-auth-clients", "yes"])
                .args(["--user", "default", "off"])
                .args(["--user", "sluice", "on", &format!(">{PASSWORD}")])
                .args(["~*", "&*", "+@all"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH");
            let mut node = TlsRedis {
                child,
                port,
                dir,
                ca: ca_path.clone(),
                client_cert: client_cert.clone(),
                client_key: client_key.clone(),
            };
            let mut up = false;
            wait_until("redis-server with TLS to answer or exit", || {
                up = node.cli(&["PING"]) == "PONG";
                up || matches!(node.child.try_wait(), Ok(Some(_)))
            });
            if up {
                return node;
            }
            // The port was taken between the probe and redis' bind: try another.
            let _ = node.child.kill();
            let _ = node.child.wait();
            dir = std::mem::replace(&mut node.dir, tempfile::tempdir().unwrap());
        }
        panic!("redis-server with TLS did not start");
    }

    fn cli(&self, args: &[&str]) -> String {
        let p = |p: &Path| p.display().to_string();
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "--tls"])
            .args(["--cacert", &p(&self.ca)])
            .args([
                "--cert",
                &p(&self.client_cert),
                "--key",
                &p(&self.client_key),
            ])
            .args(["--user", "sluice", "--pass", PASSWORD, "--no-auth-warning"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn options(redis: &TlsRedis) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url: redis.url(),
            tls_ca: Some(redis.ca.clone()),
            tls_client: Some((redis.client_cert.clone(), redis.client_key.clone())),
            username: Some("sluice".into()),
            password: None,
            password_file: None,
            pool_size: 1,
            connect_timeout: Duration::from_secs(2),
        },
        command_timeout: Duration::from_secs(2),
        clock: ClockSource::Local,
        breaker: BreakerOptions::default(),
    }
}

async fn decide(store: &RedisStore, key: &[u8]) -> Result<bool, String> {
    let limit = Limit::fixed_window(1, 3_600_000_000).unwrap();
    let c = [Check::new(key, &limit, Ask::take(1))];
    store
        .decide_checks(&c, T0, Deadline::NONE)
        .await
        .map(|v| v[0].allowed)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_and_acl_password_from_a_file() {
    let redis = TlsRedis::start();
    let pw_file = redis.dir.path().join("password");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    let mut opts = options(&redis);
    opts.connect.password_file = Some(pw_file);
    let store = RedisStore::connect(opts).unwrap();
    tokio::time::timeout(Duration::from_secs(60), store.ready())
        .await
        .expect("connects with certificate and ACL");
    assert_eq!(decide(&store, b"tls-acl:a").await, Ok(true));
    assert_eq!(decide(&store, b"tls-acl:a").await, Ok(false));
    let state = crate::support::redis::fixed_window_state(&redis.cli(&["HGETALL", "tls-acl:a"]));
    assert_eq!(state.map(|(_, count)| count), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_certificate_or_the_password_redis_refuses() {
    let redis = TlsRedis::start();
    // No client certificate: the TLS handshake is refused.
    let mut opts = options(&redis);
    opts.connect.tls_client = None;
    opts.connect.password = Some(Secret::new(PASSWORD));
    opts.command_timeout = Duration::from_millis(300);
    let store = RedisStore::connect(opts).unwrap();
    for _ in 0..3 {
        assert!(decide(&store, b"tls-acl:b").await.is_err());
    }
    // A wrong password: AUTH fails.
    let mut opts = options(&redis);
    opts.connect.password = Some(Secret::new("wrong"));
    opts.command_timeout = Duration::from_millis(300);
    let store = RedisStore::connect(opts).unwrap();
    for _ in 0..3 {
        assert!(decide(&store, b"tls-acl:b").await.is_err());
    }
    assert_eq!(redis.cli(&["EXISTS", "tls-acl:b"]), "0");
    // A certificate without the CA of the server is a configuration error at start.
    let mut opts = options(&redis);
    opts.connect.tls_ca = None;
    assert!(RedisStore::connect(opts).is_err());
    // A password file that cannot be read too.
    let mut opts = options(&redis);
    opts.connect.password_file = Some(redis.dir.path().join("missing"));
    assert!(RedisStore::connect(opts).is_err());
}

/// The real binary, with the password in `SLUICE_REDIS_PASSWORD` and logs at trace level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_the_password_from_the_environment_and_never_logs_it() {
    let redis = TlsRedis::start();
    let config = redis.dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    )
    .unwrap();
    let p = |p: &Path| p.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(serve_argv(
            &config,
            &["--log-format", "json", "--log-level", "trace"],
        ))
        .args(["--backend", "redis", "--redis-url", &redis.url()])
        .args(["--redis-tls-ca", &p(&redis.ca)])
        .args(["--redis-tls-cert", &p(&redis.client_cert)])
        .args(["--redis-tls-key", &p(&redis.client_key)])
        .args(["--redis-username", "sluice", "--clock", "local"])
        .env("SLUICE_REDIS_PASSWORD", PASSWORD)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v["fields"]["message"] == "sluice serving" {
                        let _ = tx.send(v["fields"]["grpc"].as_str().unwrap_or("").to_string());
                    }
                }
                log.lock().unwrap().push(line);
            }
        });
    }
    let grpc = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("sluice serving");
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = RateLimitServiceClient::new(channel);
    let req = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    wait_until_async("the binary to reach Redis", || {
        let mut c = client.clone();
        let req = req.clone();
        async move { c.should_rate_limit(req).await.is_ok() }
    })
    .await;
    let r = client.clone().should_rate_limit(req).await.unwrap();
    assert_eq!(r.into_inner().overall_code, Code::OverLimit as i32);
    let _ = child.kill();
    let _ = child.wait();
    let log = log.lock().unwrap();
    assert!(log.len() > 10, "trace logging is on");
    for line in log.iter() {
        assert!(!line.contains(PASSWORD), "the password leaked: {line}");
    }

    // `--help` names the variable but never shows its value.
    let help = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--help"])
        .env("SLUICE_REDIS_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("SLUICE_REDIS_PASSWORD"));
    assert!(!help.contains(PASSWORD));
}
