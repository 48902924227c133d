//! An in-process sluice on 127.0.0.1 driven by a [`ManualClock`], the store it runs on
//! ([`StoreKind`]), and a gRPC channel to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice::app::Server;
use sluice::clock::ManualClock;
use sluice::model::Micros;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use sluice::settings::{Cli, Command, ServeArgs};
use tonic::transport::Channel;

use super::http::http_get;

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
    /// prefix: the cases of a test share one Redis but never each other's counters.
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

/// The argv (after the program name) of every server the tests start, in this process or as a
/// child: `serve --config <config>` on free ports of 127.0.0.1, then `flags`.
pub fn serve_argv(config: &Path, flags: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--grpc-addr".into(),
        "127.0.0.1:0".into(),
        "--http-addr".into(),
        "127.0.0.1:0".into(),
    ];
    argv.extend(flags.iter().map(|s| s.to_string()));
    argv
}

/// Parses [`serve_argv`] exactly as the binary does (no store flags: the default backend unless
/// `flags` choose one).
pub fn parse_serve(config: &Path, flags: &[&str]) -> ServeArgs {
    let argv = std::iter::once("sluice".to_string()).chain(serve_argv(config, flags));
    let cli = <Cli as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("bad test flags {flags:?}: {e}"));
    match cli.command {
        Command::Serve(args) => args,
        Command::Check(_) => unreachable!("argv starts with `serve`"),
    }
}

/// [`parse_serve`] with the flags of `store` before `flags`.
pub fn serve_args(config: &Path, store: StoreKind, flags: &[&str]) -> ServeArgs {
    let store = store.flags();
    let all: Vec<&str> = store
        .iter()
        .map(String::as_str)
        .chain(flags.iter().copied())
        .collect();
    parse_serve(config, &all)
}

/// `yaml` written as `config.yaml` in a new temporary directory (removed when the returned
/// guard is dropped), and the file's path.
pub fn config_file(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    (dir, path)
}

/// A sluice running in this process.
pub struct Sluice {
    pub server: Server,
    pub clock: ManualClock,
    pub client: RateLimitServiceClient<Channel>,
    pub config_path: PathBuf,
    /// Holds `config_path`; removed when the `Sluice` is dropped.
    #[allow(dead_code)] // kept for its Drop
    pub dir: tempfile::TempDir,
}

impl Sluice {
    /// Starts a server whose `--config` is one file holding `config`; with `None` the file does
    /// not exist, so no configuration is loaded (until [`Sluice::write_config`] and a reload).
    pub async fn start(store: StoreKind, config: Option<&str>, flags: &[&str]) -> Sluice {
        Sluice::start_with(store, config, flags, |_| {}).await
    }

    /// [`Sluice::start`], with the parsed flags changed by `tweak` first (e.g. two servers
    /// given one `key_prefix`, as replicas sharing a Redis are).
    pub async fn start_with(
        store: StoreKind,
        config: Option<&str>,
        flags: &[&str],
        tweak: impl FnOnce(&mut ServeArgs),
    ) -> Sluice {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("config.yaml");
        if let Some(c) = config {
            std::fs::write(&config_path, c).expect("write config");
        }
        let clock = ManualClock::new(T0);
        let mut args = serve_args(&config_path, store, flags);
        tweak(&mut args);
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
