//! One decision's `FCALL` on one link: `decide_on_link` (a thread's own link: in the tick's
//! batch) or `run` (a shared link: one `FCALL` of its own; settlements, and a Cluster node's
//! shared links), and telling the breaker how it went. A server that lost the library
//! (`FUNCTION FLUSH`): a thread's own link reconnects, which loads it, and its decision goes
//! to a shared link, which loads it and sends the call again once.

use super::*;
use crate::store::redis::library::LIBRARY;

impl Inner {
    /// This thread's own connection, when it has one and it is up.
    pub(super) fn own_link(&self) -> Option<Link> {
        let id = self as *const Inner;
        THREAD_LINKS.with(|t| {
            t.borrow()
                .iter()
                .find(|(s, l)| s.as_ptr() == id && l.is_up())
                .map(|(_, l)| l.clone())
        })
    }

    /// This thread's own connection to Cluster node `node`, when it is up. Made on the first
    /// call (so not up yet: that call uses the node's shared links), on a thread attached to
    /// this store.
    pub(super) fn node_link(&self, node: &Arc<nodes::Node>) -> Option<Link> {
        let id = Arc::as_ptr(node);
        NODE_LINKS.with(|t| {
            let mut t = t.borrow_mut();
            if let Some((_, l)) = t.iter().find(|(n, _)| n.as_ptr() == id) {
                return l.is_up().then(|| l.clone());
            }
            let me = self as *const Inner;
            if !CLUSTER_THREADS.with(|c| c.borrow().iter().any(|s| s.as_ptr() == me)) {
                return None;
            }
            // Links of nodes dropped meanwhile (their tasks ended with them).
            t.retain(|(n, _)| n.strong_count() > 0);
            // One slot per call: the decisions of a tick leave as one FCALL per slot.
            let (link, task) = Link::start(node.dial.clone(), self.stall, false);
            node.thread_tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(task);
            t.push((Arc::downgrade(node), link));
            None
        })
    }

    /// Standalone and Sentinel on this thread's own `link`: the whole request in the tick's
    /// `FCALL`, the outcome told to the breaker (a dropped connection once, however many calls
    /// it cut). `None`: it was not run (the command never left the connection, the library was
    /// not on the server, or the server turned out to be a replica, which refuses every
    /// write), so the caller sends it on a shared link.
    pub(super) async fn decide_on_link(
        &self,
        link: &Link,
        checks: &[Check<'_>],
        now: When,
        timeout: Duration,
    ) -> Option<Result<Vec<Verdict>, StoreError>> {
        let call = script::call(checks, Scope::All, now.script, now.local);
        let reply = match link.decide(&call, timeout).await {
            // A demoted primary (Sentinel failover): find the new one; nothing was written.
            Ok(Frame::Error(e)) if e.contains("READONLY") => {
                link.redial();
                return None;
            }
            Ok(Frame::Error(e)) => Err(from_reply(&e)),
            Ok(frame) => resp::integers(frame).map_err(|m| error(ErrorKind::Script, m)),
            Err(CallError::NotSent) => return None,
            Err(CallError::Lost(why, drop)) => {
                self.breaker.failure_of_drop(drop);
                return Some(Err(from_call(CallError::Lost(why, drop))));
            }
            Err(e) => Err(from_call(e)),
        };
        let result = reply
            .and_then(|r| script::decode(r, checks.len()))
            .map(script::Reply::verdicts);
        record(&self.breaker, &result);
        Some(result)
    }

    /// One `FCALL` of the library over `checks` on `link` (a shared one), loading the library
    /// again when the server lost it.
    pub(super) async fn run<'k, C: std::borrow::Borrow<Check<'k>> + Sync>(
        &self,
        link: &Link,
        checks: &[C],
        scope: Scope<'k>,
        now: When,
        timeout: Duration,
    ) -> Result<script::Reply, StoreError> {
        let args = || script::fcall(checks, scope, now.script, now.local);
        let reply = self
            .call(link, &args, false, timeout, now.deadline)
            .await
            .map_err(from_call)?;
        script::decode(reply, checks.len())
    }

    /// `FCALL` (after `ASKING` when `asking`), loading the library and retrying once when the
    /// server does not have it (`FUNCTION FLUSH`, a restart with an old dataset, another
    /// sluice build deleting it); the error as the link gives it, for the Cluster's
    /// redirections.
    pub(super) async fn call(
        &self,
        link: &Link,
        args: &(dyn Fn() -> Vec<Value> + Sync),
        asking: bool,
        timeout: Duration,
        deadline: Deadline,
    ) -> Result<Vec<i64>, CallError> {
        let once = || async {
            if asking {
                integers(link.command_asking(FCALL, &args(), timeout).await)
            } else {
                fcall(link, &args(), timeout).await
            }
        };
        match once().await {
            Err(CallError::Reply(e)) if function_not_found(&e) => {
                load_library(link, load_timeout(timeout, deadline)).await?;
                // Encoded again rather than kept: a lost library is rare, requests are not.
                once().await
            }
            Err(CallError::Reply(e)) if e.starts_with("READONLY") => {
                // A demoted primary (Sentinel failover): find the new one.
                link.redial();
                Err(CallError::Reply(e))
            }
            r => r,
        }
    }
}

/// Whether an error reply to an `FCALL` says the server has no such function: the library
/// is not loaded there (it ran nothing).
pub(super) fn function_not_found(e: &str) -> bool {
    e.contains("Function not found")
}

/// A verdict for a check with no answer (its part failed): never reached on success paths.
pub(super) const REJECTED: Verdict = Verdict {
    allowed: false,
    remaining: 0,
    reset: 0,
    charged: false,
    cached: false,
};

/// Loading the library is rare and larger than a decision: allow it at least this long.
pub(super) const LOAD_TIMEOUT_MIN: Duration = Duration::from_millis(500);

/// The shortest timeout a call is given, however near the deadline.
pub(super) const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// How long loading the library may take: longer than a decision, unless the request's
/// deadline is nearer.
pub(super) fn load_timeout(timeout: Duration, deadline: Deadline) -> Duration {
    let load = match deadline.budget() {
        Some(b) => LOAD_TIMEOUT_MIN.min(b).max(MIN_TIMEOUT),
        None => LOAD_TIMEOUT_MIN,
    };
    timeout.max(load)
}

/// `FCALL args..` on `link`, its reply as integers.
pub(super) async fn fcall(
    link: &Link,
    args: &[Value],
    timeout: Duration,
) -> Result<Vec<i64>, CallError> {
    integers(link.command(FCALL, args, timeout).await)
}

/// A script's reply as its integers.
fn integers(reply: Result<Frame, CallError>) -> Result<Vec<i64>, CallError> {
    resp::integers(reply?).map_err(CallError::Unexpected)
}

/// `FUNCTION LOAD` of the library on `link`'s server (already there: done). A connection
/// loads it when it opens ([`link::dial`]); this is for a server that lost it since.
pub(super) async fn load_library(link: &Link, timeout: Duration) -> Result<(), CallError> {
    let args = [Value::from("LOAD"), Value::from(LIBRARY.source.as_str())];
    match link.command("FUNCTION", &args, timeout).await {
        Err(CallError::Reply(e)) if e.contains("already exists") => Ok(()),
        r => r.map(|_| ()),
    }
}
