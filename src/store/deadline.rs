//! The request's deadline as the store sees it, without threading it through every signature:
//! the gRPC layer runs a decision inside [`scope`] (from the call's `grpc-timeout`) and the
//! Redis store caps its command timeout with [`budget`], so that a slow Redis fails in time for
//! the failure policy to answer before the caller gives up.

use std::future::Future;
use std::time::{Duration, Instant};

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `f` with `deadline` visible to the store (none: no deadline).
pub async fn scope<F: Future>(deadline: Option<Instant>, f: F) -> F::Output {
    match deadline {
        Some(d) => DEADLINE.scope(d, f).await,
        None => f.await,
    }
}

/// What a store call may take of the time left before the deadline: nine tenths of it,
/// keeping the rest for the failure policy and the answer. `None` without a deadline.
pub fn budget() -> Option<Duration> {
    DEADLINE
        .try_with(|d| {
            let left = d.saturating_duration_since(crate::clock::monotonic());
            left - left / 10
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_is_seen_inside_the_scope_only() {
        assert_eq!(budget(), None);
        let deadline = crate::clock::monotonic() + Duration::from_secs(100);
        let inside = scope(Some(deadline), async { budget() }).await;
        let b = inside.expect("a budget inside the scope");
        assert!(b <= Duration::from_secs(90) && b > Duration::from_secs(80));
        assert_eq!(scope(None, async { budget() }).await, None);
        // A passed deadline leaves nothing.
        let passed = crate::clock::monotonic();
        assert_eq!(
            scope(Some(passed), async { budget() }).await,
            Some(Duration::ZERO)
        );
    }
}
