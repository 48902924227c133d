//! Wiring: settings -> store -> limiter -> servers, metrics, reloads (SIGHUP and config
//! watching), and graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::config::{self, ConfigError, ConfigErrors, LoadOptions};
use crate::grpc_threads;
use crate::limiter::{HeaderNames, Limiter, LimiterMetrics, LimiterOptions};
use crate::metrics::{Metrics, MetricsOptions};
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::rules::{content_hash, RuleSet};
use crate::service::http::{self, DecideFn, HttpContext};
use crate::service::limits::RequestLimits;
use crate::service::overload::{Gate, InFlight};
use crate::service::rls::RlsService;
use crate::service::tls::{self, ReloadingTls, TlsError, TlsFiles};
use crate::service::ServiceState;
use crate::settings::{Backend, ClockArg, OnStoreError, RedisArgs, ServeArgs};
use crate::store::redis::breaker::BreakerOptions;
use crate::store::redis::{ClockSource, ConnectOptions, RedisOptions, RedisStatus};
use crate::store::{
    FailurePolicy, Fallback, LocalCache, MemoryStore, RedisStore, Store, StoreError,
};

/// How often the runtime report is logged (debug level).
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How often expired in-memory entries are reclaimed.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How often `--health-requires-store` looks at the store's state.
const STORE_HEALTH_EVERY: Duration = Duration::from_millis(500);

/// A running sluice: its bound addresses, and the handles to reload and stop it.
pub struct Server {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The extra Prometheus listener (`--prometheus-addr`), if any.
    pub prometheus_addr: Option<SocketAddr>,
    reload: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    redis: Option<RedisStore>,
    metrics: Arc<Metrics>,
    in_flight: Arc<InFlight>,
    tls: Option<Arc<ReloadingTls>>,
}

impl Server {
    /// Reloads the config; `false` (and the old rules kept) when the new one is invalid.
    pub fn reload(&self) -> bool {
        (self.reload)()
    }

    /// Reloads on a blocking thread: parsing and compiling a large config takes long enough
    /// (10k rules: ~0.1 s of CPU) that it must not occupy a runtime worker.
    pub async fn reload_off_runtime(&self) -> bool {
        let reload = self.reload.clone();
        tokio::task::spawn_blocking(move || reload())
            .await
            .unwrap_or(false)
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

    /// Waits until the store can decide: at once for the in-memory store; for Redis, until it
    /// is connected with the script loaded (it connects in the background).
    pub async fn store_ready(&self) {
        if let Some(r) = &self.redis {
            r.ready().await;
        }
    }

    /// The server's metrics (as `/metrics` shows them).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
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
    let grpc = match args
        .grpc_threads
        .unwrap_or_else(grpc_threads::default_count)
    {
        0 => GrpcListeners::Shared(
            TcpListener::bind(args.grpc_addr)
                .await
                .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?,
        ),
        n => GrpcListeners::PerThread(
            grpc_threads::bind(args.grpc_addr, n)
                .with_context(|| format!("cannot listen for gRPC on {}", args.grpc_addr))?,
        ),
    };
    let http = TcpListener::bind(args.http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", args.http_addr))?;
    let prometheus = match args.prometheus_addr {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen for Prometheus on {a}"))?,
        ),
        None => None,
    };
    let listeners = Listeners {
        grpc,
        http,
        prometheus,
    };
    let metrics = Arc::new(
        Metrics::new(&MetricsOptions {
            otlp_endpoint: args.otlp_endpoint.clone(),
            max_dynamic_keys: args.metrics_max_keys,
            near_limit_ratio: args.near_limit_ratio,
        })
        .context("cannot set up metrics")?,
    );
    match args.backend {
        Backend::Memory => {
            let store = Arc::new(
                MemoryStore::new(args.memory_max_entries).with_max_bytes(args.memory_max_bytes),
            );
            spawn_sweeper(store.clone(), clock.clone());
            watch_memory(&metrics, "primary", &store);
            run(args, clock, store, listeners, None, metrics).await
        }
        Backend::Redis => {
            // Redis being down is not an error here (the store connects in the background);
            // an invalid URL or CA file is.
            let redis = RedisStore::connect(redis_options(&args.redis))?;
            let policy = match args.redis.on_store_error {
                OnStoreError::Unavailable => FailurePolicy::Unavailable,
                OnStoreError::Allow => FailurePolicy::Allow,
                OnStoreError::Deny => FailurePolicy::Deny,
                OnStoreError::Local => FailurePolicy::Local,
            };
            // Always there: a domain or rule may ask for `local` whatever the flag says. Empty
            // (and nearly free) until Redis fails.
            let local = Arc::new(
                MemoryStore::new(args.memory_max_entries).with_max_bytes(args.memory_max_bytes),
            );
            spawn_sweeper(local.clone(), clock.clone());
            watch_memory(&metrics, "fallback", &local);
            let local = Some(local);
            {
                let r = redis.clone();
                *metrics
                    .gauges
                    .redis
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(move || {
                    let s = r.status();
                    (s.connected, s.breaker_open)
                }));
            }
            let errors = metrics.store_errors.clone();
            let cached = LocalCache::new(redis.clone(), args.redis.local_cache);
            let store = Fallback::new(cached, policy, local).with_error_hook(Arc::new(
                move |e: &StoreError, policy: FailurePolicy| {
                    errors.add(
                        1,
                        &[
                            opentelemetry::KeyValue::new("backend", "redis"),
                            opentelemetry::KeyValue::new("kind", e.kind().as_str()),
                            opentelemetry::KeyValue::new("policy", policy_name(policy)),
                        ],
                    );
                },
            ));
            run(args, clock, store, listeners, Some(redis), metrics).await
        }
    }
}

struct Listeners {
    grpc: GrpcListeners,
    http: TcpListener,
    prometheus: Option<TcpListener>,
}

/// `--grpc-threads 0`: one listener served on the main runtime; otherwise one SO_REUSEPORT
/// listener per serving thread.
enum GrpcListeners {
    Shared(TcpListener),
    PerThread(Vec<std::net::TcpListener>),
}

impl GrpcListeners {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            GrpcListeners::Shared(l) => l.local_addr(),
            GrpcListeners::PerThread(ls) => ls
                .first()
                .ok_or_else(|| std::io::Error::other("no gRPC listener"))?
                .local_addr(),
        }
    }
}

fn policy_name(p: FailurePolicy) -> &'static str {
    match p {
        FailurePolicy::Unavailable => "unavailable",
        FailurePolicy::Allow => "allow",
        FailurePolicy::Deny => "deny",
        FailurePolicy::Local => "local",
    }
}

/// Exports the size of an in-memory store (held weakly: the gauge ends with the store).
fn watch_memory(metrics: &Metrics, role: &'static str, store: &Arc<MemoryStore>) {
    let weak = Arc::downgrade(store);
    metrics
        .gauges
        .memory
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((
            role,
            Box::new(move || {
                weak.upgrade().map(|s| {
                    let st = s.stats();
                    crate::metrics::MemoryCounts {
                        entries: s.len() as u64,
                        bytes: st.bytes.load(Ordering::Relaxed) as u64,
                        evictions: st.evictions.load(Ordering::Relaxed),
                        evictions_over_limit: st.evictions_over_limit.load(Ordering::Relaxed),
                    }
                })
            }),
        ));
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
            probe_every: args.redis_breaker_backoff,
        },
    }
}

async fn run<S: Store>(
    args: ServeArgs,
    clock: Arc<dyn Clock>,
    store: S,
    listeners: Listeners,
    redis: Option<RedisStore>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Server> {
    let Listeners {
        grpc,
        http,
        prometheus,
    } = listeners;
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let prometheus_addr = prometheus.as_ref().map(|l| l.local_addr()).transpose()?;
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
    let backend = match args.backend {
        Backend::Memory => "memory",
        Backend::Redis => "redis",
    };
    let limiter = Arc::new(
        Limiter::new(store, clock.clone(), opts).with_metrics(LimiterMetrics {
            stats: metrics.stats.clone(),
            store_duration: metrics.store_duration.clone(),
            store_attrs: [opentelemetry::KeyValue::new("backend", backend)],
        }),
    );
    let (reporter, health) = tonic_health::server::health_reporter();
    let state = Arc::new(ServiceState::new(reporter));
    if let (false, Some(r)) = (args.ready_before_store, &redis) {
        // SERVING only once the store can answer (see `--ready-before-store`).
        state.set_store_ok(false);
        let (r, state) = (r.clone(), state.clone());
        tokio::spawn(async move {
            r.ready().await;
            if state.set_store_ok(true) {
                state.publish().await;
            }
        });
    }
    state.set_draining_if(false).await;

    let loader = Arc::new(Loader {
        paths: args.config.clone(),
        opts: LoadOptions {
            merge_domains: args.merge_domains,
        },
        last: Mutex::new(None),
    });
    // `force`: SIGHUP and `Server::reload` load even when nothing changed; the watcher does
    // not (it fires on unrelated files too).
    let reload_with: Arc<dyn Fn(bool) -> bool + Send + Sync> = {
        let limiter = limiter.clone();
        let state = state.clone();
        let metrics = metrics.clone();
        let clock = clock.clone();
        Arc::new(move |force| {
            let started = crate::clock::monotonic();
            let outcome = loader.load(force, &|a| limiter.store().supports(a));
            let now = clock.now();
            match outcome {
                None => true,
                Some(Ok((rules, hash))) => {
                    let domains = rules.domains.len();
                    let files = rules.sources.len();
                    limiter.set_rules(Arc::new(rules));
                    let seconds = started.elapsed().as_secs_f64();
                    metrics.config_load_duration.record(
                        seconds,
                        &[opentelemetry::KeyValue::new("result", "success")],
                    );
                    let generation = state.record_load(format!("{hash:016x}"), now);
                    metrics
                        .gauges
                        .generation
                        .store(generation, Ordering::Relaxed);
                    metrics
                        .config_loads
                        .add(1, &[opentelemetry::KeyValue::new("result", "success")]);
                    state.mark_config_loaded();
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        let state = state.clone();
                        rt.spawn(async move { state.publish().await });
                    }
                    tracing::info!(
                        domains,
                        files,
                        generation,
                        hash = %format!("{hash:016x}"),
                        seconds,
                        "config loaded"
                    );
                    true
                }
                Some(Err(errors)) => {
                    metrics.config_load_duration.record(
                        started.elapsed().as_secs_f64(),
                        &[opentelemetry::KeyValue::new("result", "error")],
                    );
                    metrics
                        .config_loads
                        .add(1, &[opentelemetry::KeyValue::new("result", "error")]);
                    state.record_load_error(errors.to_string(), now);
                    // One line per load, every error in it (each as file:line:column: message).
                    tracing::error!(
                        errors = %errors.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                        "config rejected; keeping the running rules"
                    );
                    false
                }
            }
        })
    };
    reload_with(true);
    state.publish().await;

    let (stop, stop_rx) = watch::channel(false);
    if args.watch_config {
        let r = reload_with.clone();
        if let Err(e) = crate::watch::spawn(
            &args.config,
            Arc::new(move || {
                r(false);
            }),
            stop_rx.clone(),
        ) {
            tracing::warn!(error = %e, "cannot watch the config; reload with SIGHUP");
        }
    }
    if let (true, Some(r)) = (args.health_requires_store, &redis) {
        spawn_store_health(r.clone(), state.clone(), stop_rx.clone());
    }

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
    // Builds and runs the gRPC server on one listener, on whichever runtime polls it: the
    // main one (`--grpc-threads 0`) or a serving thread's own.
    let serve_grpc = {
        let stop_rx = stop_rx.clone();
        let svc = RateLimitServiceServer::new(
            RlsService::new(limiter.clone())
                .with_metrics(metrics.clone())
                .with_limits(limits),
        )
        .max_decoding_message_size(limits.max_request_bytes);
        // Server reflection, so grpcurl and similar tools need no .proto files.
        let reflection = |b: tonic_reflection::server::Builder<'static>| {
            b.register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection(tonic_reflection::server::Builder::configure())
            .build_v1()
            .context("cannot build the gRPC reflection service")?;
        let reflection_v1alpha = reflection(tonic_reflection::server::Builder::configure())
            .build_v1alpha()
            .context("cannot build the gRPC reflection service")?;
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
        let in_flight = in_flight.clone();
        let tls = tls.clone();
        move |grpc: TcpListener| {
            let mut rx = stop_rx.clone();
            let shutdown = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            let router = builder
                .clone()
                .add_service(health.clone())
                .add_service(reflection_v1.clone())
                .add_service(reflection_v1alpha.clone())
                .add_service(Gate::new(svc.clone(), in_flight.clone()));
            let tls = tls.clone();
            async move {
                match tls {
                    None => {
                        let incoming = TcpIncoming::from(grpc).with_nodelay(Some(true));
                        router
                            .serve_with_incoming_shutdown(incoming, shutdown)
                            .await
                    }
                    Some(tls) => {
                        router
                            .serve_with_incoming_shutdown(tls::incoming(grpc, tls), shutdown)
                            .await
                    }
                }
            }
        }
    };
    // Resolves when every gRPC listener has stopped (after the drain).
    let grpc_done: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> =
        match grpc {
            GrpcListeners::Shared(l) => {
                let task = tokio::spawn(serve_grpc(l));
                Box::pin(async move {
                    task.await
                        .context("gRPC server panicked")?
                        .context("gRPC server failed")
                })
            }
            GrpcListeners::PerThread(ls) => {
                // Each thread decides on its own Redis connection, driven by its own runtime.
                let redis = redis.clone();
                let serve = move |l: TcpListener| {
                    if let Some(r) = &redis {
                        if let Err(e) = r.attach_thread() {
                            tracing::warn!(error = %e, "no own Redis connection for a gRPC thread");
                        }
                    }
                    serve_grpc(l)
                };
                let ended = grpc_threads::spawn(ls, serve)
                    .context("cannot start the gRPC serving threads")?;
                Box::pin(async move {
                    let mut result = Ok(());
                    for e in ended {
                        match e.await {
                            Ok(Ok(())) => {}
                            Ok(Err(m)) => result = Err(anyhow::anyhow!("gRPC server failed: {m}")),
                            Err(_) => result = Err(anyhow::anyhow!("gRPC serving thread panicked")),
                        }
                    }
                    result
                })
            }
        };
    let decide: Option<DecideFn> = args.json_api.then(|| {
        let limiter = limiter.clone();
        let f: DecideFn = Arc::new(move |req, explain| {
            let limiter = limiter.clone();
            Box::pin(async move {
                if explain {
                    limiter.explain(&req).await
                } else {
                    limiter
                        .should_rate_limit(&req)
                        .await
                        .map(|r| (r, Vec::new()))
                }
            })
        });
        f
    });
    let cx = HttpContext {
        state: state.clone(),
        rules: {
            let limiter = limiter.clone();
            Arc::new(move || limiter.rules())
        },
        metrics: Some(metrics.clone()),
        decide,
    };
    let http_server = {
        let mut rx = stop_rx.clone();
        axum::serve(http, http::router(cx.clone())).with_graceful_shutdown(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    };
    let prometheus_server = prometheus.map(|l| {
        let mut rx = stop_rx.clone();
        axum::serve(l, http::metrics_router(cx)).with_graceful_shutdown(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    });
    let drain_timeout = args.drain_timeout;
    let task = tokio::spawn({
        let state = state.clone();
        let mut rx = stop_rx.clone();
        let metrics = metrics.clone();
        async move {
            let http_task = tokio::spawn(async move { http_server.await });
            let prom_task = prometheus_server.map(|p| tokio::spawn(async move { p.await }));
            let _ = rx.wait_for(|s| *s).await;
            state.set_draining().await;
            let drained = tokio::time::timeout(drain_timeout, async {
                let g = grpc_done.await;
                let h = http_task.await;
                if let Some(p) = prom_task {
                    let _ = p.await;
                }
                (g, h)
            })
            .await;
            // A last OTLP push; blocking, so off the async threads.
            let _ = tokio::task::spawn_blocking(move || metrics.shutdown()).await;
            match drained {
                Ok((g, h)) => {
                    g?;
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
        prometheus_addr,
        reload: Arc::new(move || reload_with(true)),
        stop,
        task,
        redis,
        metrics,
        in_flight,
        tls,
    })
}

/// Loads the config and remembers what it loaded last.
struct Loader {
    paths: Vec<PathBuf>,
    opts: LoadOptions,
    /// Fingerprint of the files at the last attempt (good or bad). The lock also keeps two
    /// reloads (SIGHUP and the watcher) from running at once.
    last: Mutex<Option<u64>>,
}

type Loaded = Result<(RuleSet, u64), ConfigErrors>;

impl Loader {
    /// `None` when not forced and the files are as at the last attempt.
    fn load(&self, force: bool, supports: &dyn Fn(Algorithm) -> bool) -> Option<Loaded> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (files, mut errors) = config::files::read_all(&self.paths);
        let mut fp = Vec::new();
        for f in &files {
            fp.extend_from_slice(f.path.as_bytes());
            fp.push(0);
            fp.extend_from_slice(&content_hash(f.content.as_bytes()).to_le_bytes());
        }
        for e in &errors {
            fp.extend_from_slice(e.to_string().as_bytes());
        }
        let fingerprint = content_hash(&fp);
        if !force && *last == Some(fingerprint) {
            return None;
        }
        *last = Some(fingerprint);
        let compiled = match config::compile(&files, self.opts) {
            Ok(rules) if errors.is_empty() => {
                unsupported_algorithms(&rules, &supports).map(|()| rules)
            }
            Ok(_) => Err(ConfigErrors(std::mem::take(&mut errors))),
            Err(ConfigErrors(more)) => {
                errors.extend(more);
                Err(ConfigErrors(errors))
            }
        };
        Some(compiled.map(|rules| (rules, fingerprint)))
    }
}

/// With `--health-requires-store`: NOT_SERVING while Redis is down or its breaker open.
fn spawn_store_health(
    redis: RedisStore,
    state: Arc<ServiceState>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(STORE_HEALTH_EVERY);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            let s = redis.status();
            if state.set_store_ok(redis.is_ready() && s.connected && !s.breaker_open) {
                state.publish().await;
            }
        }
    });
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
