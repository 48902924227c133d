//! Reloads: reads the config files (or takes an xDS snapshot), compiles them, hands a good rule
//! set to its target and records the outcome (the load metrics, the generation, `/rlconfig`'s
//! status, one log line). A bad config changes nothing: the target keeps the rules it has.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use opentelemetry::KeyValue;

use super::compile::{compile_raw, RawDocument};
use super::{files, load_files, ConfigErrors, LoadOptions};
use crate::clock::{monotonic, Clock};
use crate::metrics::Metrics;
use crate::rules::{content_hash, RuleSet};
use crate::service::ServiceState;

/// What a reload swaps rules into: the limiter, seen only through this seam.
pub trait RuleTarget: Send + Sync {
    /// Starts using `rules` (an atomic swap).
    fn set_rules(&self, rules: Arc<RuleSet>);
}

/// Loads the config into its target and reports each attempt.
pub struct Reloader {
    /// The config files; empty when the rules come over xDS.
    paths: Vec<PathBuf>,
    opts: LoadOptions,
    target: Arc<dyn RuleTarget>,
    state: Arc<ServiceState>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// Fingerprint of the files at the last attempt (good or bad). The lock also keeps two
    /// reloads (SIGHUP and the watcher) from running at once.
    last: Mutex<Option<u64>>,
}

/// What one attempt did.
enum Outcome {
    /// The files are as at the last attempt (only when not forced).
    Unchanged,
    Loaded(RuleSet, u64),
    Rejected(ConfigErrors),
}

impl Reloader {
    pub fn new(
        paths: Vec<PathBuf>,
        opts: LoadOptions,
        target: Arc<dyn RuleTarget>,
        state: Arc<ServiceState>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Reloader {
            paths,
            opts,
            target,
            state,
            metrics,
            clock,
            last: Mutex::new(None),
        }
    }

    /// Loads the config even when the files did not change (start-up, SIGHUP,
    /// `Server::reload`); `false` when it was rejected and the running rules stay.
    pub fn reload(&self) -> bool {
        if self.paths.is_empty() {
            // The rules come over xDS: there is nothing to re-read.
            tracing::info!("reload asked for, but the config comes over xDS; nothing to read");
            return true;
        }
        self.attempt(true)
    }

    /// Loads the config only when the files changed since the last attempt (the watcher,
    /// which also fires on unrelated files); `true` when nothing changed.
    pub fn reload_if_changed(&self) -> bool {
        self.attempt(false)
    }

    /// Compiles an xDS snapshot (its resources, already typed) and swaps it in whole, or
    /// keeps the running rules and returns every error. `version` is the snapshot's
    /// `version_info`, for the log line.
    pub fn apply_snapshot(&self, docs: &[RawDocument], version: &str) -> Result<u64, ConfigErrors> {
        let started = monotonic();
        let _serial = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let mut fp = Vec::new();
        for d in docs {
            fp.extend_from_slice(d.name.as_bytes());
            fp.push(0);
            fp.extend_from_slice(&d.hash.to_le_bytes());
        }
        let outcome = match compile_raw(docs, self.opts) {
            Ok(rules) => Outcome::Loaded(rules, content_hash(&fp)),
            Err(errors) => Outcome::Rejected(errors),
        };
        match outcome {
            Outcome::Rejected(errors) => {
                self.settle(Outcome::Rejected(errors.clone()), started, Some(version));
                Err(errors)
            }
            loaded => {
                self.settle(loaded, started, Some(version));
                Ok(self.state.config_status().generation)
            }
        }
    }

    fn attempt(&self, force: bool) -> bool {
        let started = monotonic();
        let outcome = self.load(force);
        self.settle(outcome, started, None)
    }

    /// Records what an attempt did; `xds_version` is set for an xDS snapshot.
    fn settle(
        &self,
        outcome: Outcome,
        started: std::time::Instant,
        xds_version: Option<&str>,
    ) -> bool {
        let now = self.clock.now();
        let seconds = || started.elapsed().as_secs_f64();
        match outcome {
            Outcome::Unchanged => true,
            Outcome::Loaded(rules, hash) => {
                let domains = rules.domains.len();
                let files = rules.sources.len();
                self.target.set_rules(Arc::new(rules));
                let seconds = seconds();
                self.count("success", seconds);
                let generation = self.state.record_load(format!("{hash:016x}"), now);
                self.metrics
                    .gauges
                    .generation
                    .store(generation, Ordering::Relaxed);
                self.state.mark_config_loaded();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let state = self.state.clone();
                    rt.spawn(async move { state.publish().await });
                }
                tracing::info!(
                    domains,
                    files,
                    generation,
                    hash = %format!("{hash:016x}"),
                    seconds,
                    xds_version,
                    "config loaded"
                );
                true
            }
            Outcome::Rejected(errors) => {
                self.count("error", seconds());
                // Read before recording the error: did a good load ever happen?
                let running = self.state.config_status().generation > 0;
                self.state.record_load_error(errors.to_string(), now);
                // One line per load, every error in it (each as file:line:column: message).
                let errors = errors
                    .0
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                if running {
                    tracing::error!(%errors, xds_version, "config rejected; keeping the running rules");
                } else if self.state.is_serving() {
                    // Started without a config on purpose (FORCE_START_WITHOUT_INITIAL_CONFIG).
                    tracing::error!(%errors, xds_version, "config rejected; no rules loaded yet");
                } else {
                    tracing::error!(
                        %errors,
                        xds_version,
                        "config rejected; no rules loaded yet, not serving"
                    );
                }
                false
            }
        }
    }

    fn count(&self, result: &'static str, seconds: f64) {
        let attrs = [KeyValue::new("result", result)];
        self.metrics.config_load_duration.record(seconds, &attrs);
        self.metrics.config_loads.add(1, &attrs);
    }

    fn load(&self, force: bool) -> Outcome {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (files, errors) = files::read_all(&self.paths, self.opts);
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
            return Outcome::Unchanged;
        }
        *last = Some(fingerprint);
        match load_files(&files, errors, self.opts) {
            Ok(rules) => Outcome::Loaded(rules, fingerprint),
            Err(errors) => Outcome::Rejected(errors),
        }
    }
}
