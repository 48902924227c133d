//! Wiring only: settings -> stores -> metrics -> limiter -> reloader (files, or the xDS
//! source) -> servers, and the
//! graceful drain. The reload logic lives in [`crate::config::reloader`], the gRPC router in
//! [`crate::service::grpc`], the background tasks in [`crate::tasks`]; here,
//! [`options`] maps the settings onto each part, [`listeners`] binds and serves the sockets and
//! [`Server`] is the handle of a running server.

mod listeners;
pub(crate) mod open_files;
mod options;
mod server;

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::xds::{XdsMetrics, XdsSource};
use crate::config::{LoadOptions, Reloader, RuleTarget};
use crate::limiter::{Limiter, LimiterMetrics};
use crate::metrics::{Metrics, MetricsOptions, StoreSources};
use crate::rules::RuleSet;
use crate::service::accept::Port;
use crate::service::grpc::{GrpcParts, GrpcServer};
use crate::service::http_gate::HttpGate;
use crate::service::http_routes::{self, HttpContext};
use crate::service::http_server;
use crate::service::json_route;
use crate::service::load_report::ServiceLoadReport;
use crate::service::overload::InFlight;
use crate::service::pipeline::Pipeline;
use crate::service::ServiceState;
use crate::settings::{Backend, ServeArgs};
use crate::store::{
    FailurePolicy, Fallback, LocalCache, RedisStore, Reservations, Store, StoreError,
};
use crate::tasks;

use listeners::{serve_grpc, Listeners};
use options::{
    grpc_tls, limiter_options, memory_store, read_memory, read_redis, redis_options,
    request_limits, rlqs_options, xds_options,
};
pub use server::Server;

/// Binds the listeners (so a port in use fails here), loads the config and starts serving.
pub async fn start(args: ServeArgs, clock: Arc<dyn Clock>) -> anyhow::Result<Server> {
    open_files::raise(&args);
    let listeners = Listeners::bind(&args).await?;
    let metrics_options = MetricsOptions {
        otlp_endpoint: args.otlp_endpoint.clone(),
        max_dynamic_keys: args.metrics_max_keys,
        near_limit_ratio: args.near_limit_ratio,
    };
    match args.backend {
        Backend::Memory => {
            let store = memory_store(&args, &clock);
            let sources = StoreSources {
                memory: vec![("primary", read_memory(&store))],
                redis: None,
            };
            let metrics = Arc::new(
                Metrics::new(&metrics_options, sources, clock.clone())
                    .context("cannot set up metrics")?,
            );
            run(args, clock, store, listeners, None, metrics).await
        }
        Backend::Redis => {
            // Redis being down is not an error here (the store connects in the background);
            // an invalid URL or CA file is.
            let redis = Arc::new(RedisStore::connect(redis_options(&args.redis))?);
            let policy = args.redis.on_store_error;
            // Always there: a domain or rule may ask for `local` whatever the flag says. Empty
            // (and nearly free) until Redis fails.
            let local = memory_store(&args, &clock);
            let sources = StoreSources {
                memory: vec![("fallback", read_memory(&local))],
                redis: Some(read_redis(&redis)),
            };
            let metrics = Arc::new(
                Metrics::new(&metrics_options, sources, clock.clone())
                    .context("cannot set up metrics")?,
            );
            let errors = metrics.store_errors.clone();
            let cached = LocalCache::new((*redis).clone(), args.redis.local_cache);
            let store = Fallback::new(cached, policy, Some(local)).with_error_hook(Arc::new(
                move |e: &StoreError, policy: FailurePolicy| {
                    errors.add(
                        1,
                        &[
                            opentelemetry::KeyValue::new("backend", "redis"),
                            opentelemetry::KeyValue::new("kind", e.kind().as_str()),
                            opentelemetry::KeyValue::new("policy", policy.to_string()),
                        ],
                    );
                },
            ));
            run(args, clock, store, listeners, Some(redis), metrics).await
        }
    }
}

/// What a reload swaps rules into: the limiter.
impl<S: Store> RuleTarget for Limiter<S> {
    fn set_rules(&self, rules: Arc<RuleSet>) {
        Limiter::set_rules(self, rules);
    }
}

async fn run<S: Store + Reservations>(
    args: ServeArgs,
    clock: Arc<dyn Clock>,
    store: S,
    listeners: Listeners,
    redis: Option<Arc<RedisStore>>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Server> {
    let Listeners {
        grpc,
        http,
        prometheus,
        debug,
    } = listeners;
    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let prometheus_addr = prometheus.as_ref().map(|l| l.local_addr()).transpose()?;
    let debug_addr = debug.as_ref().map(|l| l.local_addr()).transpose()?;
    let backend = match args.backend {
        Backend::Memory => "memory",
        Backend::Redis => "redis",
    };
    let limiter = Arc::new(
        Limiter::new(store, clock.clone(), limiter_options(&args)).with_metrics(LimiterMetrics {
            stats: metrics.stats.clone(),
            store_duration: metrics
                .store_duration
                .bind(&[opentelemetry::KeyValue::new("backend", backend)]),
        }),
    );
    let (reporter, health) = tonic_health::server::health_reporter();
    let state = Arc::new(ServiceState::new(reporter));
    if let (false, Some(r)) = (args.ready_before_store, &redis) {
        // SERVING only once the store can answer (see `--ready-before-store`).
        state.set_store_ok(false);
        let (r, state) = ((**r).clone(), state.clone());
        tokio::spawn(async move {
            r.ready().await;
            if state.set_store_ok(true) {
                state.publish().await;
            }
        });
    }
    state.set_draining_if(false).await;

    let reloader = Arc::new(Reloader::new(
        args.config.clone(),
        LoadOptions {
            merge_domains: args.merge_domains,
            allow_empty: args.allow_empty_config,
        },
        limiter.clone(),
        Arc::new(ServiceLoadReport {
            state: state.clone(),
            metrics: metrics.clone(),
        }),
        clock.clone(),
    ));
    let xds = xds_options(&args.xds)?;
    if xds.is_none() {
        reloader.reload();
    }
    if args.xds.start_without_config {
        // envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG: serve (with no rules)
        // before the first config.
        state.mark_config_loaded();
    }
    state.publish().await;

    let (stop, stop_rx) = watch::channel(false);
    if let Some(opts) = xds {
        crate::config::xds::spawn(
            XdsSource {
                opts,
                reloader: reloader.clone(),
                metrics: XdsMetrics {
                    updates: metrics.xds_updates.clone(),
                    connected: metrics.gauges.xds_connected.clone(),
                },
            },
            stop_rx.clone(),
        );
    } else if args.watch_config {
        let r = reloader.clone();
        if let Err(e) = crate::watch::spawn(
            &args.config,
            Arc::new(move || {
                r.reload();
            }),
            stop_rx.clone(),
        ) {
            tracing::warn!(error = %e, "cannot watch the config; reload with SIGHUP");
        }
    }
    if let (true, Some(r)) = (args.health_requires_store, &redis) {
        tasks::spawn_store_health((**r).clone(), state.clone(), stop_rx.clone());
    }

    let statsd = statsd_mapper(args.prometheus_statsd_mapper.as_deref())?;
    let hard = &args.hardening;
    let in_flight = InFlight::new(hard.max_in_flight);
    let tls = grpc_tls(hard, &stop_rx)?;
    tasks::spawn_runtime_report(in_flight.clone(), stop_rx.clone());
    // One request pipeline for gRPC and `POST /json`: the same limits, slots and deadline.
    let pipeline = Pipeline::new(limiter.clone(), request_limits(hard), in_flight.clone());
    let grpc_server = GrpcServer::build(GrpcParts {
        pipeline: pipeline.clone(),
        metrics: metrics.clone(),
        limits: options::grpc_limits(hard),
        health,
        tls: tls.clone(),
        rlqs: rlqs_options(&args.rlqs, hard),
        stop: stop_rx.clone(),
    })
    .context("cannot build the gRPC reflection service")?;
    let grpc_done = serve_grpc(grpc, grpc_server, redis.clone())?;
    let cx = HttpContext {
        state: state.clone(),
        limiter,
        metrics: Some(metrics.clone()),
    };
    let json = json_route::router(args.json_api.then_some(pipeline), Some(metrics.clone()));
    let gate = HttpGate {
        bodies: vec![],
        body_timeout: hard.http_body_timeout,
        metrics: Some(metrics.clone()),
    };
    let http_server = http_server::serve(
        http,
        Port::with_reserve(
            "http",
            hard.http_max_connections,
            http_server::HEALTH_RESERVE,
            hard.http_idle_timeout,
            clock.clone(),
        ),
        http_routes::router(cx.clone()).merge(json),
        HttpGate {
            bodies: vec![json_route::body_route(hard.max_request_bytes)],
            ..gate.clone()
        },
        hard.http_header_read_timeout,
        stop_rx.clone(),
    );
    let debug_server = debug.map(|l| {
        http_server::serve(
            l,
            Port::new(
                "debug",
                hard.http_max_connections,
                hard.http_idle_timeout,
                clock.clone(),
            ),
            http_routes::debug_router(cx.clone()),
            gate.clone(),
            hard.http_header_read_timeout,
            stop_rx.clone(),
        )
    });
    let prometheus_server = prometheus.map(|l| {
        http_server::serve(
            l,
            Port::new(
                "prometheus",
                hard.http_max_connections,
                hard.http_idle_timeout,
                clock.clone(),
            ),
            http_routes::metrics_router(cx, statsd),
            gate,
            hard.http_header_read_timeout,
            stop_rx.clone(),
        )
    });
    let drain_timeout = args.drain_timeout;
    let task = tokio::spawn({
        let state = state.clone();
        let mut rx = stop_rx.clone();
        let metrics = metrics.clone();
        async move {
            let http_task = tokio::spawn(http_server);
            let prom_task = prometheus_server.map(tokio::spawn);
            let debug_task = debug_server.map(tokio::spawn);
            let _ = rx.wait_for(|s| *s).await;
            state.set_draining().await;
            let drained = tokio::time::timeout(drain_timeout, async {
                let g = grpc_done.await;
                let h = http_task.await;
                for t in prom_task.into_iter().chain(debug_task) {
                    let _ = t.await;
                }
                (g, h)
            })
            .await;
            // A last OTLP push; blocking, so off the async threads.
            let _ = tokio::task::spawn_blocking(move || metrics.shutdown()).await;
            match drained {
                Ok((g, h)) => {
                    g?;
                    h.context("HTTP server panicked")?;
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
        debug_addr,
        reloader,
        stop,
        task,
        redis,
        metrics,
        in_flight,
        tls,
    })
}

/// The statsd mapping of `--prometheus-statsd-mapper`, read now: a file that cannot be honoured
/// stops start-up.
fn statsd_mapper(arg: Option<&str>) -> anyhow::Result<Option<Arc<crate::statsd::Mapper>>> {
    use crate::statsd::Mapper;
    Ok(match arg {
        None => None,
        Some(crate::settings::BUILTIN_MAPPER) => Some(Arc::new(Mapper::builtin())),
        Some(path) => Some(Arc::new(Mapper::load(std::path::Path::new(path))?)),
    })
}
