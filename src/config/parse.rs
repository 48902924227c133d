//! YAML text -> the [`raw`](super::raw) types and the file's unknown keys ([`keys`]) in one
//! walk, every file in parallel, within serde-saphyr's budgets (nodes, events, depth, alias expansion)
//! scaled to the file's size; serde-saphyr's messages reworded into the config's vocabulary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::error::{ConfigError, Position};
use super::files::ConfigFile;
use super::keys;
use super::plain;
use super::raw::RawFile;
use crate::excerpt::excerpt;

/// Stack for parsing one file: serde-saphyr recurses once per YAML level (up to its depth
/// budget of 64), and at that depth an unoptimized build needs more than the 2 MiB of a
/// tokio worker or test thread (found by the `config` fuzz target).
const PARSE_STACK: usize = 64 << 20;

/// A file's typed parse, and its unknown keys.
pub(super) type Parsed = (
    Result<Option<RawFile>, serde_saphyr::Error>,
    Vec<ConfigError>,
);

/// Parses every file, in parallel (parsing is most of a load's time), on threads with
/// [`PARSE_STACK`] at the lowest priority (serving threads preempt them:
/// `crate::background`); inline if no thread can start.
pub(super) fn parse_all(files: &[ConfigFile]) -> Vec<Parsed> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Parsed>>> = files.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let job = next.fetch_add(1, Ordering::Relaxed);
        let Some(file) = files.get(job) else {
            break;
        };
        let parsed = parse(file);
        *slots[job].lock().unwrap_or_else(|e| e.into_inner()) = Some(parsed);
    };
    std::thread::scope(|scope| {
        let started = (0..workers)
            .filter(|_| {
                std::thread::Builder::new()
                    .name("sluice-config-parse".into())
                    .stack_size(PARSE_STACK)
                    .spawn_scoped(scope, || {
                        // Serving threads preempt the parse (see `crate::background`).
                        crate::background::lowest_priority();
                        work()
                    })
                    .is_ok()
            })
            .count();
        if started == 0 {
            work();
        }
    });
    slots
        .into_iter()
        .zip(files)
        .map(|(slot, file)| take(slot).unwrap_or_else(|| parse(file)))
        .collect()
}

/// One file: the fast path ([`plain`]) if the file is within its shape, else one walk of
/// serde-saphyr that also collects the unknown keys. A file whose typed parse fails
/// is parsed again plainly, for the error exactly as serde-saphyr reports it, and walked
/// for its unknown keys past the error ([`keys::unknown_keys`]); only failed loads pay.
fn parse(file: &ConfigFile) -> Parsed {
    // The config's plain shape first: most files, a fraction of the cost, no error possible.
    if let Some(raw) = plain::parse(&file.content) {
        return (Ok(Some(raw)), Vec::new());
    }
    let opts = options(&file.content);
    match keys::typed_with_unknown_keys(&file.path, &file.content, opts.clone()) {
        Ok((raw, unknown)) => (Ok(raw), unknown),
        Err(_) => (
            serde_saphyr::from_str_with_options::<Option<RawFile>>(&file.content, opts.clone()),
            keys::unknown_keys(&file.path, &file.content, opts),
        ),
    }
}

/// What a job left in its slot (a poisoned lock still holds it).
fn take<T>(slot: Mutex<Option<T>>) -> Option<T> {
    slot.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// serde-saphyr's budget scaled to the file: its default (250,000 nodes, 1,000,000 events)
/// caps a file at about 25,000 rules. Nodes and events are bounded by the input's size (at
/// most one node per byte, a few events per node), so the work stays linear in the file; the
/// limits that stop alias and anchor bombs keep their defaults.
fn options(content: &str) -> serde_saphyr::Options {
    let len = content.len();
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: len.max(250_000),
            max_events: len.saturating_mul(3).max(1_000_000),
        },
    }
}

/// serde-saphyr's message, without its own location (we print ours in front).
pub(super) fn yaml_error(file: &Arc<str>, e: &serde_saphyr::Error) -> ConfigError {
    let pos = e
        .location()
        .map_or_else(|| Position::start_of(file), |l| Position::at(file, l));
    let text = e.to_string();
    let mut msg = text.lines().next().unwrap_or("invalid YAML").trim();
    msg = msg.strip_prefix("error:").unwrap_or(msg).trim();
    if let Some(rest) = msg.strip_prefix("line ") {
        // "line N column M: message"
        if let Some((_, m)) = rest.split_once(": ") {
            msg = m.trim();
        }
    }
    ConfigError::new(pos, friendlier(msg))
}

/// Maps serde's wording onto the config's vocabulary.
fn friendlier(msg: &str) -> String {
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some((name, expected)) = rest.split_once('`') {
            let expected = expected
                .trim_start_matches(", ")
                .replace("expected one of", "expected one of:");
            return format!("unknown key '{}' ({expected})", excerpt(name));
        }
    }
    match msg {
        "expected mapping start" => {
            "expected a map here (descriptors and rate_limit are maps of key: value)".into()
        }
        "expected string scalar" => {
            "expected a string here (keys and values must be strings)".into()
        }
        "expected sequence start" => "expected a list here".into(),
        m if m.starts_with("duplicate mapping key: ") => {
            let k = m.trim_start_matches("duplicate mapping key: ");
            let k = k.split(", set DuplicateKeyPolicy").next().unwrap_or(k);
            format!("duplicate key '{}' in one map", excerpt(k))
        }
        m if m.starts_with("invalid u32") => {
            format!("{m}: expected a whole number from 0 to 4294967295")
        }
        m => m
            .replace("struct RawFile", "a map with `domain` and `descriptors`")
            .replace("struct RawRateLimit", "a rate_limit map")
            .replace("struct RawReplaces", "a map with `name`")
            .replace("struct RawDescriptor", "a descriptor map"),
    }
}
