//! [`Position`]: where in a config file something was defined, carried by each compiled rule
//! so errors, dumps and explanations can name it. Defined here, below the config layer, so
//! the rule tree needs nothing from `config` (which builds it).

use std::fmt;
use std::sync::Arc;

/// A position in a config file (1-based; a whole-file error points at 1:1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub file: Arc<str>,
    pub line: u64,
    pub column: u64,
}

impl Position {
    pub fn start_of(file: &Arc<str>) -> Self {
        Position {
            file: file.clone(),
            line: 1,
            column: 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
