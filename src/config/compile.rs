//! Raw YAML -> validated, compiled [`RuleSet`]: the load of a set of files. Each file is
//! parsed ([`super::parse`]), its domain settings read here, its limits validated
//! ([`super::validate`]) and its descriptors built into the domain's tree
//! ([`super::build`]). Every error of every file is collected instead of stopping at the
//! first; a load either yields a whole new rule set or changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use super::build::Tree;
use super::error::{ConfigError, ConfigErrors, Position};
use super::files::ConfigFile;
use super::options::LoadOptions;
use super::parse::{parse_all, yaml_error};
use super::raw::RawFile;
use super::validate::Cx;
use crate::excerpt::excerpt;
use crate::rules::{content_hash, Domain, FailurePolicy, HashTag, Node, RuleIds, RuleSet, Source};

/// Compiles already-read files into one rule set.
pub fn compile(files: &[ConfigFile], opts: LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let mut load = Load::default();
    for (file, (parsed, unknown)) in files.iter().zip(parse_all(files)) {
        let first_error = load.errors.len();
        load.errors.extend(unknown);
        match parsed {
            // An empty file (or one holding only comments) defines nothing.
            Ok(None) => load.errors.push(ConfigError::new(
                Position::start_of(&file.path),
                "config file cannot have empty domain",
            )),
            Err(e) => load.errors.push(yaml_error(&file.path, &e)),
            Ok(Some(raw)) => load.add(
                &file.path,
                content_hash(file.content.as_bytes()),
                &raw,
                opts,
            ),
        }
        // A node's own errors are found after its children's, unknown keys first of all:
        // report them in file order.
        load.errors[first_error..].sort_by_key(|e| (e.position.line, e.position.column));
    }
    load.finish()
}

/// A config that arrived already typed (an xDS resource): its name (where its errors are
/// reported), its content hash, and the raw types the YAML parser would have produced.
pub struct RawDocument {
    pub name: Arc<str>,
    pub hash: u64,
    pub raw: RawFile,
}

/// Compiles typed documents into one rule set: the validation and building of files.
pub fn compile_raw(docs: &[RawDocument], opts: LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let mut load = Load::default();
    for doc in docs {
        load.add(&doc.name, doc.hash, &doc.raw, opts);
    }
    load.finish()
}

/// One load under way: the rule set so far and every error found.
#[derive(Default)]
struct Load {
    errors: Vec<ConfigError>,
    set: RuleSet,
    ids: RuleIds,
    first_seen: HashMap<String, Position>,
}

impl Load {
    fn add(&mut self, name: &Arc<str>, hash: u64, raw: &RawFile, opts: LoadOptions) {
        let mut cx = Cx {
            file: name,
            errors: &mut self.errors,
            ids: &mut self.ids,
        };
        if let Some(domain) = add_file(&mut cx, &mut self.set, &mut self.first_seen, raw, opts) {
            self.set.sources.push(Source {
                path: name.clone(),
                domain,
                hash,
            });
        }
    }

    fn finish(self) -> Result<RuleSet, ConfigErrors> {
        if self.errors.is_empty() {
            crate::rules::wildcard::prepare(&self.set);
            Ok(self.set)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}

/// Adds one file's domain to `set`: its settings, then its descriptors. The domain's name,
/// unless the file cannot be added at all.
fn add_file(
    cx: &mut Cx<'_>,
    set: &mut RuleSet,
    first_seen: &mut HashMap<String, Position>,
    raw: &RawFile,
    opts: LoadOptions,
) -> Option<String> {
    let Some(d) = raw.domain.as_ref().filter(|d| !d.value.is_empty()) else {
        let pos = raw
            .domain
            .as_ref()
            .map_or_else(|| Position::start_of(cx.file), |d| cx.at(d));
        cx.err(pos, "config file cannot have empty domain");
        return None;
    };
    let name = d.value.clone();
    let pos = cx.at(d);
    let merged = match first_seen.get(&name) {
        Some(prev) if !opts.merge_domains => {
            let msg = format!(
                "duplicate domain '{}' (first defined at {prev}); pass --merge-domains to merge files of one domain",
                excerpt(&name)
            );
            cx.err(pos, msg);
            return None;
        }
        Some(_) => true,
        None => {
            first_seen.insert(name.clone(), pos.clone());
            false
        }
    };
    let domain = set.domains.entry(name.clone()).or_insert_with(|| Domain {
        name: name.as_str().into(),
        root: Node::default(),
        allow_refunds: false,
        allow_reservations: false,
        allow_overrides: true,
        on_store_error: None,
        hash_tag: HashTag::default(),
    });
    // Merged files: overrides are refused when any file of the domain refuses them.
    domain.allow_overrides &= raw.allow_overrides;
    // Merged files: refunds are allowed when any file of the domain allows them.
    domain.allow_refunds |= raw.allow_refunds;
    // Likewise reservations.
    domain.allow_reservations |= raw.allow_reservations;
    if let Some(p) = &raw.on_store_error {
        if let Some(policy) = cx.word::<FailurePolicy>(p) {
            match domain.on_store_error {
                Some(other) if other != policy => {
                    let at = cx.at(p);
                    cx.err(
                        at,
                        "merged files of one domain set different on_store_error",
                    );
                }
                _ => domain.on_store_error = Some(policy),
            }
        }
    }
    let tag = match &raw.redis_hash_tag {
        None => Some(HashTag::default()),
        Some(t) => cx.word::<HashTag>(t),
    };
    if let Some(tag) = tag {
        // The keys of one domain share one layout: merged files must agree.
        if merged && tag != domain.hash_tag {
            let at = raw.redis_hash_tag.as_ref().map_or(pos, |t| cx.at(t));
            cx.err(
                at,
                "merged files of one domain set different redis_hash_tag",
            );
        } else {
            domain.hash_tag = tag;
        }
    }
    if let Some(descriptors) = &raw.descriptors {
        Tree::new(cx).descriptors(&mut domain.root, &name, descriptors);
    }
    Some(name)
}
