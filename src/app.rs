//! Wiring: settings -> store -> limiter -> servers, reloads, and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::config::{self, ConfigError, ConfigErrors, LoadOptions};
use crate::limiter::{HeaderNames, Limiter, LimiterOptions};
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::rules::RuleSet;
use crate::service::http::{self, HttpContext};
use crate::service::limits::RequestLimits;
use crate::service::overload::{Gate, InFlight};
use crate::service::rls::RlsService;
use crate::service::tls::{self, ReloadingTls, TlsError, TlsFiles};
use crate::service::ServiceState;
use crate::settings::{Backend, ClockArg, OnStoreError, RedisArgs, ServeArgs};
use crate::store::redis::breaker::BreakerOptions;
use crate::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStatus};
use crate::store::{FailurePolicy, Fallback, MemoryStore, RedisStore, Store};

/// How often the runtime report is logged (debug level).
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How often expired in-memory entries are reclaimed.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A running sluice: its bound addresses, and the handles to reload and stop it.
pub struct Server {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    reload: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    redis: Option<RedisStore>,
    in_flight: Arc<InFlight>,
    tls: Option<Arc<ReloadingTls>>,
}

impl Server {
    /// Reloads the config; `false` (and the old rules kept) when the new one is invalid.
    pub fn reload(&self) -> bool {
        (self.reload)()
    }

    /// Starts the drain: health turns NOT_SERVING, listeners stop accepting, in-flight
    /// requests finish.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Connection and circuit-breaker state of the Redis backend (`None` with another backend).
    pub fn redis_status(&self) -> Option<RedisStatus> {
        self.redis.as_ref().map(RedisStore::status)
    }

    /// The in-flight bound of the RLS service (requests now, refusals so far).
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Re-reads the gRPC TLS files now (they are also polled); `Ok(true)` when they changed
    /// and new connections use them, `Ok(false)` without TLS or without a change.
    pub fn reload_tls(&self) -> Result<bool, TlsError> {
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Ok(false),
        }
    }

    /// Waits until both servers have stopped.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task failed")?
    }
}

/// Binds the listeners (so a port in use fails here), loads the config and starts serving.
pub async fn start(args: ServeArgs, clock: Arc<dyn Clock>) -> anyhow::Result<Server> {
    let grpc = TcpListener::bind(args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?;
    let http = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", args.http_addr))?;
    match args.backend {
        Backend::Memory => {
            let store = Arc::new(
                MemoryStore::new(args.memory_max_entries).with_max_bytes(args.memory_max_bytes),
            );
            spawn_sweeper(store.clone(), clock.clone());
            run(args, clock, store, grpc, http, None).await
        }
        Backend::Redis => {
            // Redis being down is not an error here (the store connects in the background);
            // an invalid URL or CA file is.
            let redis = RedisStore::connect(redis_options(&args.redis))?;
            let (policy, local) = match args.redis.on_store_error {
                OnStoreError::Unavailable => (FailurePolicy::Unavailable, None),
                OnStoreError::Allow => (FailurePolicy::Allow, None),
                OnStoreError::Deny => (FailurePolicy::Deny, None),
                OnStoreError::Local => {
                    let local = Arc::new(
                        MemoryStore::new(args.memory_max_entries)
                            .with_max_bytes(args.memory_max_bytes),
                    );
                    spawn_sweeper(local.clone(), clock.clone());
                    (FailurePolicy::Local, Some(local))
                }
            };
            let store = Fallback::new(redis.clone(), policy, local);
            run(args, clock, store, grpc, http, Some(redis)).await
        }
    }
}

fn spawn_sweeper(store: Arc<MemoryStore>, clock: Arc<dyn Clock>) {
    // Weak, so the sweeper ends with the server instead of keeping the store alive.
    let store = Arc::downgrade(&store);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            match store.upgrade() {
                Some(store) => {
                    store.sweep(clock.now());
                }
                None => break,
            }
        }
    });
}

/// Logs the runtime's live tasks and the in-flight gate every [`REPORT_EVERY`] at debug level
/// (target `sluice::runtime`), for soak runs to see that nothing accumulates.
fn spawn_runtime_report(in_flight: Arc<InFlight>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REPORT_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
                    tracing::debug!(
                        target: "sluice::runtime",
                        tasks,
                        in_flight = in_flight.current(),
                        refused = in_flight.rejected(),
                        "runtime"
                    );
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    });
}

/// Checks the TLS files every `every` until the server stops.
fn spawn_tls_poller(tls: Arc<ReloadingTls>, every: Duration, mut stop: watch::Receiver<bool>) {
    let every = every.max(Duration::from_millis(100));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => tls.reload_logged(),
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    });
}

/// The Redis store's options from the `--redis-*` flags.
pub fn redis_options(args: &RedisArgs) -> RedisOptions {
    RedisOptions {
        connect: ConnectOptions {
            url: args.redis_url.clone(),
            tls_ca: args.redis_tls_ca.clone(),
            tls_client: args.redis_tls_cert.clone().zip(args.redis_tls_key.clone()),
            username: args.redis_username.clone(),
            password: args.redis_password.clone(),
            password_file: args.redis_password_file.clone(),
            pool_size: args.redis_pool_size,
            connect_timeout: args.redis_connect_timeout,
        },
        command_timeout: args.redis_command_timeout,
        clock: match args.clock {
            ClockArg::Redis => ClockSource::Redis,
            ClockArg::Local => ClockSource::Local,
        },
        breaker: BreakerOptions {
            threshold: args.redis_breaker_failures.max(1),
            backoff: args.redis_breaker_backoff,
            max_backoff: args.redis_breaker_backoff * 10,
        },
    }
}

async fn run<S: Store>(
    args: ServeArgs,
    clock: Arc<dyn Clock>,
    store: S,
    grpc: TcpListener,
    http: TcpListener,
    redis: Option<RedisStore>,
) -> anyhow::Result<Server> {
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let opts = LimiterOptions {
        shadow_mode: args.shadow_mode,
        quota_mode: args.quota_mode,
        charge_rejected: args.charge_rejected,
        response_headers: args.response_headers.then(|| HeaderNames {
            limit: args.header_limit.clone(),
            remaining: args.header_remaining.clone(),
            reset: args.header_reset.clone(),
        }),
        key_prefix: args.key_prefix.clone().into_bytes(),
    };
    let limiter = Arc::new(Limiter::new(store, clock, opts));
    let (reporter, health) = tonic_health::server::health_reporter();
    let state = Arc::new(ServiceState::new(reporter));
    state.set_draining_if(false).await;

    let reload: Arc<dyn Fn() -> bool + Send + Sync> = {
        let limiter = limiter.clone();
        let state = state.clone();
        let paths = args.config.clone();
        let opts = LoadOptions {
            merge_domains: args.merge_domains,
        };
        let store_supports = {
            let limiter = limiter.clone();
            move |a| limiter.store().supports(a)
        };
        Arc::new(move || {
            match config::load(&paths, opts)
                .and_then(|rules| unsupported_algorithms(&rules, &store_supports).map(|()| rules))
            {
                Ok(rules) => {
                    let domains = rules.domains.len();
                    let files = rules.sources.len();
                    limiter.set_rules(Arc::new(rules));
                    state.mark_config_loaded();
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        let state = state.clone();
                        rt.spawn(async move { state.publish().await });
                    }
                    tracing::info!(domains, files, "config loaded");
                    true
                }
                Err(errors) => {
                    for e in &errors.0 {
                        tracing::error!(error = %e, "config rejected; keeping the running rules");
                    }
                    false
                }
            }
        })
    };
    reload();
    state.publish().await;

    let (stop, stop_rx) = watch::channel(false);
    let hard = &args.hardening;
    let limits = RequestLimits {
        max_request_bytes: hard.max_request_bytes,
        max_descriptors: hard.max_descriptors,
        max_entries: hard.max_entries,
        max_key_bytes: hard.max_key_bytes,
        max_value_bytes: hard.max_value_bytes,
        max_domain_bytes: hard.max_domain_bytes,
    };
    let in_flight = InFlight::new(hard.max_in_flight);
    let tls = match (&hard.tls.grpc_tls_cert, &hard.tls.grpc_tls_key) {
        (Some(cert), Some(key)) => {
            let tls = ReloadingTls::load(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: hard.tls.grpc_tls_client_ca.clone(),
                allowed_sans: hard.tls.grpc_tls_allowed_san.clone(),
            })?;
            spawn_tls_poller(
                tls.clone(),
                hard.tls.grpc_tls_reload_interval,
                stop_rx.clone(),
            );
            Some(tls)
        }
        _ => None,
    };
    spawn_runtime_report(in_flight.clone(), stop_rx.clone());
    let grpc_server: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > = {
        let mut rx = stop_rx.clone();
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let svc = RateLimitServiceServer::new(RlsService::new(limiter.clone()).with_limits(limits))
            .max_decoding_message_size(limits.max_request_bytes);
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        let mut builder = tonic::transport::Server::builder()
            .max_concurrent_streams(hard.grpc_max_concurrent_streams)
            .http2_keepalive_interval(nonzero(hard.grpc_keepalive_interval))
            .http2_keepalive_timeout(nonzero(hard.grpc_keepalive_timeout));
        if let Some(age) = nonzero(hard.grpc_max_connection_age) {
            builder = builder
                .max_connection_age(age)
                .max_connection_age_grace(hard.grpc_max_connection_age_grace);
        }
        let router = builder
            .add_service(health)
            .add_service(Gate::new(svc, in_flight.clone()));
        match &tls {
            None => {
                let incoming = TcpIncoming::from(grpc).with_nodelay(Some(true));
                Box::pin(router.serve_with_incoming_shutdown(incoming, shutdown))
            }
            Some(tls) => Box::pin(
                router.serve_with_incoming_shutdown(tls::incoming(grpc, tls.clone()), shutdown),
            ),
        }
    };
    let http_server = {
        let mut rx = stop_rx.clone();
        let limiter = limiter.clone();
        let cx = HttpContext {
            state: state.clone(),
            rules: Arc::new(move || limiter.rules()),
        };
        axum::serve(http, http::router(cx)).with_graceful_shutdown(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    };
    let drain_timeout = args.drain_timeout;
    let task = tokio::spawn({
        let state = state.clone();
        let mut rx = stop_rx.clone();
        async move {
            let grpc_task = tokio::spawn(grpc_server);
            let http_task = tokio::spawn(async move { http_server.await });
            let _ = rx.wait_for(|s| *s).await;
            state.set_draining().await;
            let drained = tokio::time::timeout(drain_timeout, async {
                let g = grpc_task.await;
                let h = http_task.await;
                (g, h)
            })
            .await;
            match drained {
                Ok((g, h)) => {
                    g.context("gRPC server panicked")?
                        .context("gRPC server failed")?;
                    h.context("HTTP server panicked")?
                        .context("HTTP server failed")?;
                }
                Err(_) => tracing::warn!(?drain_timeout, "drain timed out; exiting anyway"),
            }
            Ok(())
        }
    });
    Ok(Server {
        grpc_addr,
        http_addr,
        reload,
        stop,
        task,
        redis,
        in_flight,
        tls,
    })
}

/// Rejects a rule set that uses an algorithm the store cannot decide (the Redis store does not
/// have every algorithm in Lua yet), naming each rule.
fn unsupported_algorithms(
    rules: &RuleSet,
    supports: &impl Fn(Algorithm) -> bool,
) -> Result<(), ConfigErrors> {
    let errors: Vec<ConfigError> = rules
        .all_rules()
        .into_iter()
        .flat_map(|rule| {
            rule.kind
                .limits()
                .iter()
                .filter(|l| !supports(l.limit.algorithm))
                .map(move |l| {
                    ConfigError::new(
                        rule.position.clone(),
                        format!(
                            "algorithm {} is not supported by this store yet (rule '{}')",
                            l.limit.algorithm.as_str(),
                            rule.full_key
                        ),
                    )
                })
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}
