//! Configuration: YAML files -> serde types ([`raw`]) -> validation and compilation
//! ([`compile`]) -> an immutable [`RuleSet`](crate::rules::RuleSet).

pub mod compile;
pub mod error;
pub mod files;
mod keys;
pub mod raw;
pub mod synthetic;

#[cfg(test)]
mod algorithm_errors;

use std::path::PathBuf;

pub use compile::{compile, LoadOptions};
pub use error::{ConfigError, ConfigErrors, Position};
pub use files::ConfigFile;

use crate::rules::RuleSet;

/// Reads, validates and compiles every file under `paths`, reporting every error found.
pub fn load(paths: &[PathBuf], opts: LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let (files, mut errors) = files::read_all(paths, opts);
    match compile(&files, opts) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors))
        }
    }
}
