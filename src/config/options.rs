//! How a load reads its files: the switches `serve` and `check` share.

/// Options of a load.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Merge files that name the same domain instead of rejecting them.
    pub merge_domains: bool,
    /// A load that finds no config file gives an empty rule set instead of an error.
    pub allow_empty: bool,
}
