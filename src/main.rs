//! The `sluice` binary: parses the command line and runs a subcommand.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};

use sluice::clock::SystemClock;
use sluice::config::{self, LoadOptions};
use sluice::settings::{CheckArgs, Cli, Command, LogArgs, LogFormat, ServeArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => check(&args),
        Command::Serve(args) => {
            init_logging(&args.log);
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
            match rt.block_on(serve(args)) {
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
    };
    match config::load(&args.paths, opts) {
        Ok(rules) => {
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

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let server = sluice::app::start(args, Arc::new(SystemClock)).await?;
    tracing::info!(grpc = %server.grpc_addr, http = %server.http_addr, "sluice serving");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            r = tokio::signal::ctrl_c() => { r.context("cannot handle SIGINT")?; break }
            _ = hup.recv() => { server.reload(); }
        }
    }
    tracing::info!("shutting down: draining in-flight requests");
    server.shutdown();
    server.wait().await
}

fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
