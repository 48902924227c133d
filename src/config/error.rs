//! Config errors: every one names the file, line and column.

use std::fmt;
use std::sync::Arc;

use serde_saphyr::Location;

pub use crate::rules::Position;

/// Where serde-saphyr says a value is: a YAML concern, so it stays with the config.
impl Position {
    pub fn at(file: &Arc<str>, loc: Location) -> Self {
        if loc.line() == 0 {
            return Position::start_of(file);
        }
        Position {
            file: file.clone(),
            line: loc.line(),
            column: loc.column(),
        }
    }
}

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {message}")]
pub struct ConfigError {
    pub position: Position,
    pub message: String,
}

impl ConfigError {
    pub fn new(position: Position, message: impl Into<String>) -> Self {
        ConfigError {
            position,
            message: message.into(),
        }
    }
}

/// Every problem found in one load, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
