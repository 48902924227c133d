//! Configuration: YAML files ([`files`]) -> serde types ([`raw`], parsed by `parse`: the
//! plain shape by `plain`, anything else by serde-saphyr, unknown keys found by `keys`) -> validation (`validate`) and building (`build`), driven by
//! [`mod@compile`] -> an immutable [`RuleSet`]. [`xds`] takes the rules from
//! a control plane instead of files, through the same compile and swap.

mod build;
mod checked;
pub mod compile;
pub(crate) mod error;
pub(crate) mod files;
mod keys;
mod lease;
mod options;
mod parse;
mod plain;
pub(crate) mod raw;
pub(crate) mod reloader;
#[cfg(feature = "synthetic")]
pub mod synthetic;
mod validate;
pub mod xds;

use std::path::PathBuf;

pub use compile::{compile, compile_raw, RawDocument};
pub use error::{ConfigError, ConfigErrors, Position};
pub use files::ConfigFile;
pub use options::LoadOptions;
pub use reloader::{LoadReport, Reloader, RuleTarget};

use crate::rules::RuleSet;

/// Reads, validates and compiles every file under `paths`, reporting every error found.
pub fn load(paths: &[PathBuf], opts: LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let (files, errors) = files::read_all(paths, opts);
    load_files(&files, errors, opts)
}

/// Compiles files already read, with the `errors` met reading them: the rule set only when
/// there are no errors at all, else every error.
pub fn load_files(
    files: &[ConfigFile],
    mut errors: Vec<ConfigError>,
    opts: LoadOptions,
) -> Result<RuleSet, ConfigErrors> {
    match compile(files, opts) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors))
        }
    }
}
