//! Where the property tests of this crate keep their failing cases: proptest's default
//! (next to the source file) assumes the `proptest!` macro, and these tests drive a
//! `TestRunner` by hand, so each names its file under `tests/it/proptest-regressions/`.
//! Commit those files: every later run replays them first.

use proptest::test_runner::{FailurePersistence, FileFailurePersistence};

/// Persistence of the failing cases of the property test `name` (`[a-z_]+`), in
/// `tests/it/proptest-regressions/<name>.txt` (tests run in the package root).
pub fn regressions(name: &'static str) -> Option<Box<dyn FailurePersistence>> {
    let path = format!("tests/it/proptest-regressions/{name}.txt");
    Some(Box::new(FileFailurePersistence::Direct(path.leak())))
}
