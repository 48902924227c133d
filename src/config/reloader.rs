//! Reloads: reads the config files (or takes an xDS snapshot), compiles them, hands a good rule
//! set to its target and records the effect (the load metrics, the generation, `/rlconfig`'s
//! status, one log line). A bad config changes nothing: the target keeps the rules it has.
//!
//! Every source ends in one place, [`Reloader::settle`], after the same compile. A source
//! identical to the last attempt's is recognised before anything is compiled: nothing is
//! rebuilt, the generation stays, and the attempt counts as `result="unchanged"` (Envoy Gateway
//! re-sends its whole rule set on every change; a SIGHUP with nothing edited costs a read and a
//! compare). Files are compared byte for byte; an xDS snapshot by each resource's name and
//! content hash (the control plane decides the rules anyway, so it gains nothing by a collision).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::compile::{compile_raw, RawDocument};
use super::{files, load_files, ConfigError, ConfigErrors, ConfigFile, LoadOptions};
use crate::clock::Clock;
use crate::model::Micros;
use crate::rules::{content_hash, RuleSet};

/// Where a reload reports what it did: readiness, the `/rlconfig` status and the load metrics,
/// which live above `config/` (in `service/` and `metrics`) and are seen only through this seam.
pub trait LoadReport: Send + Sync {
    /// A rule set was swapped in; returns its generation (the one stamped on it).
    fn loaded(&self) -> u64;
    /// A load succeeded and its rules are about to be swapped in: the last failure is no longer
    /// news. Called before the swap (and `loaded` after it), so that whoever sees the new rules
    /// no longer sees the failure they replaced, and whoever sees the new generation sees its
    /// rules.
    fn clear_failure(&self) {}
    /// A load was rejected at `now`; `errors` holds every error.
    fn rejected(&self, errors: &str, now: Micros);
    /// How an attempt ended (`success`, `error` or `unchanged`) and how long it took.
    fn counted(&self, result: &'static str, seconds: f64);
    /// The generation of the running rules; 0 before the first good load.
    fn generation(&self) -> u64;
    /// Whether the service reports SERVING (it may without rules, when told to start so).
    fn serving(&self) -> bool;
}

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
    report: Arc<dyn LoadReport>,
    clock: Arc<dyn Clock>,
    /// The last attempt (good or bad). The lock also keeps two reloads (SIGHUP, the watcher,
    /// another source) from running at once.
    last: Mutex<Option<Attempt>>,
}

/// What an attempt was given, kept whole so that "unchanged" means byte-identical (a hash
/// alone could be collided on purpose and would skip a real change), and how it ended.
struct Attempt {
    files: Vec<ConfigFile>,
    errors: Vec<String>,
    /// An xDS snapshot's resources: name and content hash.
    resources: Vec<(Arc<str>, u64)>,
    accepted: bool,
}

impl Attempt {
    fn same_snapshot(&self, docs: &[RawDocument]) -> bool {
        self.files.is_empty()
            && self.errors.is_empty()
            && self.resources.len() == docs.len()
            && self
                .resources
                .iter()
                .zip(docs)
                .all(|((name, hash), d)| *name == d.name && *hash == d.hash)
    }

    fn same_input(&self, files: &[ConfigFile], errors: &[ConfigError]) -> bool {
        self.resources.is_empty()
            && self.files.len() == files.len()
            && self.errors.len() == errors.len()
            && self
                .files
                .iter()
                .zip(files)
                .all(|(a, b)| a.path == b.path && a.content == b.content)
            && self
                .errors
                .iter()
                .zip(errors)
                .all(|(a, b)| *a == b.to_string())
    }
}

/// What one attempt did.
enum Effect {
    /// The input is the last attempt's: nothing rebuilt; whether that attempt was accepted.
    Unchanged(bool),
    Loaded(RuleSet, u64),
    Rejected(ConfigErrors),
}

impl Reloader {
    pub fn new(
        paths: Vec<PathBuf>,
        opts: LoadOptions,
        target: Arc<dyn RuleTarget>,
        report: Arc<dyn LoadReport>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Reloader {
            paths,
            opts,
            target,
            report,
            clock,
            last: Mutex::new(None),
        }
    }

    /// Reads the config files and applies them (start-up, SIGHUP, the watcher,
    /// `Server::reload`); `false` when they are rejected and the running rules stay. Files
    /// identical to the last attempt's are not rebuilt (see [`Reloader::apply`]).
    pub fn reload(&self) -> bool {
        if self.paths.is_empty() {
            // The rules come over xDS: there is nothing to re-read.
            tracing::info!("reload asked for, but the config comes over xDS; nothing to read");
            return true;
        }
        let started = self.clock.monotonic();
        crate::background::at_lowest_priority(|| {
            let (files, errors) = files::read_all(&self.paths, self.opts);
            self.apply_from(started, files, errors)
        })
    }

    /// The shared compile-and-swap entry point of every config source: compiles `files` (with
    /// the `errors` met producing them, which reject the load) and swaps the rule set into the
    /// target. When `files` and `errors` are byte-identical to the last attempt's, nothing is
    /// parsed or swapped: the attempt is counted as `unchanged` and answers as that attempt
    /// did. `false` when the config is rejected (the running rules stay).
    pub fn apply(&self, files: Vec<ConfigFile>, errors: Vec<ConfigError>) -> bool {
        let started = self.clock.monotonic();
        crate::background::at_lowest_priority(|| self.apply_from(started, files, errors))
    }

    /// Compiles an xDS snapshot (its resources, already typed) and swaps it in whole, or
    /// keeps the running rules and returns every error. `version` is the snapshot's
    /// `version_info`, for the log line.
    pub fn apply_snapshot(&self, docs: &[RawDocument], version: &str) -> Result<u64, ConfigErrors> {
        let started = self.clock.monotonic();
        crate::background::at_lowest_priority(|| self.snapshot_from(started, docs, version))
    }

    fn snapshot_from(
        &self,
        started: std::time::Instant,
        docs: &[RawDocument],
        version: &str,
    ) -> Result<u64, ConfigErrors> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(prev) = last.as_ref().filter(|l| l.same_snapshot(docs)) {
            let accepted = prev.accepted;
            self.settle(Effect::Unchanged(accepted), started, Some(version));
            return match accepted {
                true => Ok(self.report.generation()),
                false => Err(ConfigErrors(vec![ConfigError::new(
                    crate::config::Position::start_of(&"xds".into()),
                    "the snapshot is the one rejected before",
                )])),
            };
        }
        let mut fp = Vec::new();
        for d in docs {
            fp.extend_from_slice(d.name.as_bytes());
            fp.push(0);
            fp.extend_from_slice(&d.hash.to_le_bytes());
        }
        let effect = match compile_raw(docs, self.opts) {
            Ok(rules) => Effect::Loaded(rules, content_hash(&fp)),
            Err(errors) => Effect::Rejected(errors),
        };
        *last = Some(Attempt {
            files: Vec::new(),
            errors: Vec::new(),
            resources: docs.iter().map(|d| (d.name.clone(), d.hash)).collect(),
            accepted: matches!(effect, Effect::Loaded(..)),
        });
        match effect {
            Effect::Rejected(errors) => {
                self.settle(Effect::Rejected(errors.clone()), started, Some(version));
                Err(errors)
            }
            loaded => {
                self.settle(loaded, started, Some(version));
                Ok(self.report.generation())
            }
        }
    }

    fn apply_from(
        &self,
        started: std::time::Instant,
        files: Vec<ConfigFile>,
        errors: Vec<ConfigError>,
    ) -> bool {
        // Held until the swap: of two attempts at once, the later one's rules are the ones left.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let effect = self.load(&mut last, files, errors);
        self.settle(effect, started, None)
    }

    /// Records what an attempt did (and swaps a good rule set in); `xds_version` is set for an
    /// xDS snapshot.
    fn settle(
        &self,
        effect: Effect,
        started: std::time::Instant,
        xds_version: Option<&str>,
    ) -> bool {
        let now = self.clock.now();
        let seconds = || self.clock.since(started).as_secs_f64();
        match effect {
            Effect::Unchanged(accepted) => {
                let seconds = seconds();
                self.count("unchanged", seconds);
                tracing::info!(
                    seconds,
                    accepted,
                    xds_version,
                    "config unchanged; nothing rebuilt"
                );
                accepted
            }
            Effect::Loaded(mut rules, hash) => {
                // Reloads are serialised (`last` is held), so this is the generation `loaded`
                // returns below.
                rules.stamp = Some(crate::rules::LoadStamp {
                    generation: self.report.generation() + 1,
                    hash,
                    at: now,
                });
                let domains = rules.domains.len();
                let files = rules.sources.len();
                self.report.clear_failure();
                self.target.set_rules(Arc::new(rules));
                let seconds = seconds();
                self.count("success", seconds);
                let generation = self.report.loaded();
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
            Effect::Rejected(errors) => {
                self.count("error", seconds());
                // Read before recording the error: did a good load ever happen?
                let running = self.report.generation() > 0;
                self.report.rejected(&errors.to_string(), now);
                // One line per load, every error in it (each as file:line:column: message).
                let errors = errors
                    .0
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                if running {
                    tracing::error!(%errors, xds_version, "config rejected; keeping the running rules");
                } else if self.report.serving() {
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
        self.report.counted(result, seconds);
    }

    fn load(
        &self,
        last: &mut Option<Attempt>,
        files: Vec<ConfigFile>,
        errors: Vec<ConfigError>,
    ) -> Effect {
        if let Some(last) = last.as_ref().filter(|l| l.same_input(&files, &errors)) {
            return Effect::Unchanged(last.accepted);
        }
        let mut fp = Vec::new();
        for f in &files {
            fp.extend_from_slice(f.path.as_bytes());
            fp.push(0);
            fp.extend_from_slice(&content_hash(f.content.as_bytes()).to_le_bytes());
        }
        let error_texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        for e in &error_texts {
            fp.extend_from_slice(e.as_bytes());
        }
        let fingerprint = content_hash(&fp);
        let effect = match load_files(&files, errors, self.opts) {
            Ok(rules) => Effect::Loaded(rules, fingerprint),
            Err(errors) => Effect::Rejected(errors),
        };
        *last = Some(Attempt {
            files,
            errors: error_texts,
            resources: Vec::new(),
            accepted: matches!(effect, Effect::Loaded(..)),
        });
        effect
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;
    use crate::clock::ManualClock;

    /// Counts the generations, as the service's state does.
    #[derive(Default)]
    struct Generations(AtomicU64);

    impl LoadReport for Generations {
        fn loaded(&self) -> u64 {
            self.0.fetch_add(1, Ordering::SeqCst) + 1
        }
        fn rejected(&self, _: &str, _: Micros) {}
        fn counted(&self, _: &'static str, _: f64) {}
        fn generation(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn serving(&self) -> bool {
            self.generation() > 0
        }
    }

    /// Counts the rule sets swapped in.
    struct Swaps(AtomicUsize);

    impl RuleTarget for Swaps {
        fn set_rules(&self, _: Arc<RuleSet>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A snapshot of one config "file", as a source other than files hands it over.
    fn snapshot(content: &str) -> Vec<ConfigFile> {
        vec![ConfigFile {
            path: "snapshot".into(),
            content: content.into(),
        }]
    }

    fn limit(rpu: u32) -> String {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {rpu}}}\n")
    }

    #[test]
    fn apply_swaps_changed_snapshots_only() {
        let swaps = Arc::new(Swaps(AtomicUsize::new(0)));
        let report = Arc::new(Generations::default());
        let r = Reloader::new(
            Vec::new(),
            LoadOptions::default(),
            swaps.clone(),
            report.clone(),
            Arc::new(ManualClock::new(0)),
        );
        let swapped = || swaps.0.load(Ordering::SeqCst);
        assert!(r.apply(snapshot(&limit(1)), Vec::new()));
        assert_eq!((swapped(), report.generation()), (1, 1));
        // The same snapshot again: nothing swapped, the generation stays.
        assert!(r.apply(snapshot(&limit(1)), Vec::new()));
        assert_eq!((swapped(), report.generation()), (1, 1));
        // Another snapshot is applied.
        assert!(r.apply(snapshot(&limit(2)), Vec::new()));
        assert_eq!((swapped(), report.generation()), (2, 2));
        // The same content under another name is another source: applied.
        let mut renamed = snapshot(&limit(2));
        renamed[0].path = "other".into();
        assert!(r.apply(renamed, Vec::new()));
        assert_eq!(swapped(), 3);
        // A rejected snapshot swaps nothing, and again unchanged is still rejected.
        assert!(!r.apply(snapshot("domain: d\ndescriptors: [oops\n"), Vec::new()));
        assert!(!r.apply(snapshot("domain: d\ndescriptors: [oops\n"), Vec::new()));
        assert_eq!(swapped(), 3);
        // Errors met producing the source are part of it: the same files with an error are
        // another input, and rejected.
        let error = ConfigError::new(crate::config::Position::start_of(&"x".into()), "gone");
        assert!(!r.apply(snapshot(&limit(2)), vec![error]));
        assert!(r.apply(snapshot(&limit(2)), Vec::new()));
        assert_eq!(swapped(), 4);
    }
}
