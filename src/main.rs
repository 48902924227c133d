//! The `sluice` binary: parses the command line (and envoyproxy/ratelimit's environment
//! variables), sets up logs and traces, and runs a subcommand.

// The layout of the RLS handler's future nests the store stack (Fallback<LocalCache<Redis>>)
// deeper than rustc's default query depth allows in release builds.
#![recursion_limit = "256"]
// A binary exports nothing: `pub` would only hide dead code.
#![deny(unreachable_pub)]

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use sluice::clock::SystemClock;
use sluice::config::{self, LoadOptions};
use sluice::quiet::QuietLog;
use sluice::settings::{CheckArgs, Cli, Command, LogArgs, LogFormat, ServeArgs};

// jemalloc, not glibc's malloc: a request allocates and frees many small objects, and a
// decision on Redis more (its arguments, its reply); on glibc the batches of a serving thread
// overflow the per-thread cache. Measured (bench/sluice_cpu.sh, callgrind): 12% fewer
// instructions per request on the memory store, 15% on Redis. The price is resident memory
// (bench/why.md): about +15% idle and +7% under load, +60% at the peak of loading 10,000 rules.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let argv =
        sluice::settings::ratelimit_env::gateway::command_line(std::env::args_os().collect());
    let matches = Cli::command().get_matches_from(argv);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Check(args) => check(&args),
        Command::Serve(mut args) => {
            let notes = match matches.subcommand_matches("serve").map(|m| {
                sluice::settings::ratelimit_env::apply(&mut args, m, &|k| std::env::var(k).ok())
            }) {
                Some(Ok(notes)) => notes,
                Some(Err(e)) => {
                    eprintln!("sluice: {e}");
                    return ExitCode::FAILURE;
                }
                None => Vec::new(),
            };
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("sluice: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            // The OTLP exporter needs the runtime to exist.
            let (tracer, quiet) = {
                let _guard = rt.enter();
                let traces = Traces {
                    endpoint: args.otlp_endpoint.as_deref(),
                    resource: &args.trace_resource,
                    sampling_rate: args.trace_sampling_rate,
                };
                match init_logging(&args.log, traces) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("sluice: {e:#}");
                        return ExitCode::FAILURE;
                    }
                }
            };
            for note in notes {
                tracing::info!("envoyproxy/ratelimit setting {note}");
            }
            rt.spawn(async move {
                let mut every = tokio::time::interval(sluice::quiet::WARN_INTERVAL);
                loop {
                    every.tick().await;
                    quiet.report_held();
                }
            });
            let result = rt.block_on(serve(args));
            if let Some(t) = tracer {
                // Exports the last spans (the runtime still drives the connection).
                let _ = t.shutdown();
            }
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("sluice: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let opts = LoadOptions {
        merge_domains: args.merge_domains,
        allow_empty: args.allow_empty_config,
    };
    match config::load(&args.paths, opts) {
        Ok(rules) => {
            if let Some(path) = &args.requests {
                return dry_run(rules, path, args.json);
            }
            for (domain, n) in rules.rule_counts() {
                let files: Vec<&str> = rules
                    .sources
                    .iter()
                    .filter(|s| s.domain == domain)
                    .map(|s| &*s.path)
                    .collect();
                println!("domain {domain}: {n} rules ({})", files.join(", "));
            }
            if rules.domains.is_empty() {
                println!("no config files found");
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                println!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}

fn dry_run(rules: sluice::rules::RuleSet, path: &std::path::Path, json: bool) -> ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice: cannot read {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(sluice::dry_run::run(rules, &text, json)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let server = sluice::app::start(args, Arc::new(SystemClock)).await?;
    tracing::info!(
        grpc = %server.grpc_addr,
        http = %server.http_addr,
        prometheus = %server.prometheus_addr.map(|a| a.to_string()).unwrap_or_default(),
        debug = %server.debug_addr.map(|a| a.to_string()).unwrap_or_default(),
        "sluice serving"
    );
    loop {
        tokio::select! {
            _ = term.recv() => break,
            r = tokio::signal::ctrl_c() => { r.context("cannot handle SIGINT")?; break }
            _ = hup.recv() => { server.reload_off_runtime().await; }
        }
    }
    tracing::info!("shutting down: draining in-flight requests");
    server.shutdown();
    server.wait().await
}

/// Logs to stderr per `--log-level` / `--log-format`, other crates' warnings at most once per
/// call site and interval (the returned `QuietLog` reports what it held back); with an OTLP
/// endpoint, also exports the request spans (target `sluice::otel`, TRACE, so they cost
/// nothing when tracing is off).
/// Where and how request spans are exported.
struct Traces<'a> {
    endpoint: Option<&'a str>,
    /// Resource attributes on top of [`sluice::metrics::resource`].
    resource: &'a [(String, String)],
    /// A trace-id ratio sampler instead of the OTEL_TRACES_SAMPLER* variables.
    sampling_rate: Option<f64>,
}

fn init_logging(
    args: &LogArgs,
    traces: Traces<'_>,
) -> anyhow::Result<(Option<SdkTracerProvider>, QuietLog)> {
    let quiet = QuietLog::new(std::sync::Arc::new(sluice::clock::SystemClock));
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .and(quiet.clone());
    // Colours only on a terminal: in files and container logs the escape codes are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = match args.log_format {
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        LogFormat::Text => fmt.with_filter(filter).boxed(),
    };
    let provider = match traces.endpoint {
        None => None,
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build()
                .context("cannot set up OTLP trace export")?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_attributes(
                    sluice::metrics::resource()
                        .iter()
                        .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
                )
                .with_attributes(
                    traces
                        .resource
                        .iter()
                        .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
                )
                .build();
            // OTEL_BSP_* apply, and OTEL_TRACES_SAMPLER* unless a rate is given.
            let mut b = SdkTracerProvider::builder()
                .with_resource(resource)
                .with_batch_exporter(exporter);
            if let Some(rate) = traces.sampling_rate {
                b = b.with_sampler(opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(rate));
            }
            Some(b.build())
        }
    };
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("sluice"))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("sluice::otel", tracing::Level::TRACE),
            )
    });
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Ok((provider, quiet))
}
