//! Bounded polling for a state the test can observe but not await: each helper fails the test
//! with what it waited for instead of hanging it, and its pause only yields while something
//! else makes progress (nothing here stands in for moving time).

use std::future::Future;
use std::time::{Duration, Instant};

/// The longest any readiness wait may take before the test fails (a bound, not a timing).
pub const READY_WITHIN: Duration = Duration::from_secs(60);

/// Real monotonic time, for the tests' bounds (a hung process fails the test instead of
/// hanging it) and for when a fault happened; tests read the clock only through these.
#[allow(clippy::disallowed_methods)]
pub fn real_now() -> Instant {
    Instant::now()
}

/// Real time since `start` (a [`real_now`]).
pub fn real_since(start: Instant) -> Duration {
    real_now().saturating_duration_since(start)
}

/// tokio's now, for deadlines on tokio's timers.
#[allow(clippy::disallowed_methods)]
pub fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Polls `cond` until it holds; panics with `what` if it does not within [`READY_WITHIN`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = real_now();
    while !cond() {
        assert!(
            real_since(start) < READY_WITHIN,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` until it gives a value; panics with `what` if it does not within [`READY_WITHIN`].
pub fn wait_until_value<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let mut out = None;
    wait_until(what, || {
        out = f();
        out.is_some()
    });
    out.expect("set when the wait ends")
}

/// An async [`wait_until`].
pub async fn wait_until_async<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = real_now();
    while !cond().await {
        assert!(
            real_since(start) < READY_WITHIN,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` until it returns `Some` (bounded, so a broken state fails the test instead of
/// hanging it; the pause only yields while another task makes progress).
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..1_000 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
