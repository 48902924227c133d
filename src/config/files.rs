//! Which files a `--config PATH` names: a file, or every `*.yaml` / `*.yml` directly inside a
//! directory, in name order. Dot-entries are skipped, which also skips the `..data` and
//! `..2024_01_01...` directories of a mounted Kubernetes ConfigMap, so each of its files loads
//! once (through the visible symlink).
//!
//! A config never vanishes silently: a visible `*.yaml` entry that cannot be read (a dangling
//! or looping symlink, no permission) is an error, and so is a load that finds no file at all
//! unless [`LoadOptions::allow_empty`] says an empty config is wanted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ConfigError, Position};
use super::options::LoadOptions;

/// A config file read into memory.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    pub path: Arc<str>,
    pub content: String,
}

/// Expands `paths` and reads every file; unreadable paths become errors, and so does finding
/// no file at all (unless `opts.allow_empty`).
pub(crate) fn read_all(
    paths: &[PathBuf],
    opts: LoadOptions,
) -> (Vec<ConfigFile>, Vec<ConfigError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        for file in expand(path, &mut errors) {
            let name: Arc<str> = file.display().to_string().into();
            match std::fs::read(&file) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(content) => files.push(ConfigFile {
                        path: name,
                        content,
                    }),
                    Err(e) => errors.push(ConfigError::new(
                        Position::start_of(&name),
                        format!("file is not valid UTF-8: {e}"),
                    )),
                },
                Err(e) => errors.push(ConfigError::new(
                    Position::start_of(&name),
                    format!("cannot read file: {e}"),
                )),
            }
        }
    }
    if files.is_empty() && errors.is_empty() && !opts.allow_empty {
        errors.extend(paths.iter().map(|p| {
            let name: Arc<str> = p.display().to_string().into();
            ConfigError::new(
                Position::start_of(&name),
                "no config file found (a directory's *.yaml and *.yml files are loaded); \
                 pass --allow-empty-config to run with no rules",
            )
        }));
    }
    (files, errors)
}

fn expand(path: &Path, errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let name: Arc<str> = path.display().to_string().into();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            errors.push(ConfigError::new(
                Position::start_of(&name),
                format!("cannot read config path: {e}"),
            ));
            return Vec::new();
        }
    };
    if !meta.is_dir() {
        return vec![path.to_path_buf()];
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(ConfigError::new(
                Position::start_of(&name),
                format!("cannot list directory: {e}"),
            ));
            return Vec::new();
        }
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| has_config_name(p))
        .collect();
    out.sort();
    // A config-named entry that is no readable file: a directory is simply not config, but a
    // dangling or looping symlink is a config that vanished and is reported (it would
    // otherwise drop every rule of its domain without a word).
    out.retain(|p| match std::fs::metadata(p) {
        Ok(m) => m.is_file(),
        Err(e) => {
            let name: Arc<str> = p.display().to_string().into();
            errors.push(ConfigError::new(
                Position::start_of(&name),
                format!("cannot read config file: {e}"),
            ));
            false
        }
    });
    out
}

/// A visible `*.yaml` / `*.yml` name.
fn has_config_name(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
}
