//! One script call on one link: `decide_on_link` (a whole decision, `FCALL` in the tick's
//! batch where the link loaded the function library) or `run` (`EVALSHA`: settlements, and
//! a Cluster node's shared links), each loading the scripts and sending again once on
//! `NOSCRIPT`, and telling the breaker how it went.

use super::*;

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

    /// Standalone and Sentinel on `link` (this thread's own, or a shared one): the whole
    /// request in one call, loading the scripts on `NOSCRIPT`, the outcome told to the breaker
    /// (a dropped connection once, however many calls it cut). `None`: it was not run (the
    /// command never left the connection, or the server turned out to be a replica, which
    /// refuses every write), so the caller sends it on another link.
    pub(super) async fn decide_on_link(
        &self,
        link: &Link,
        checks: &[Check<'_>],
        now: When,
        timeout: Duration,
    ) -> Option<Result<Vec<Verdict>, StoreError>> {
        let call = script::call(&self.sha, checks, Scope::All, now.script, now.local);
        let mut reply = link.decide(&call, timeout).await;
        if matches!(&reply, Ok(Frame::Error(e)) if e.starts_with("NOSCRIPT")) {
            // Rare: boxed, so it does not enlarge every request's future.
            let load = load_timeout(timeout, now.deadline);
            if let Err(e) = Box::pin(load_on_link(link, load)).await {
                if let Some(result) = &e {
                    record(&self.breaker, result);
                }
                return e;
            }
            reply = Box::pin(link.call(EVALSHA, &call.evalsha(), timeout)).await;
        }
        let reply = match reply {
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

    /// One `EVALSHA` of the script over `checks` on `link`, loading the script on
    /// `NOSCRIPT`.
    pub(super) async fn run<'k, C: std::borrow::Borrow<Check<'k>> + Sync>(
        &self,
        link: &Link,
        checks: &[C],
        scope: Scope<'k>,
        now: When,
        timeout: Duration,
    ) -> Result<script::Reply, StoreError> {
        let args = || script::evalsha(&self.sha, checks, scope, now.script, now.local);
        let reply = self
            .call(link, &args, false, timeout, now.deadline)
            .await
            .map_err(from_call)?;
        script::decode(reply, checks.len())
    }

    /// `EVALSHA` (after `ASKING` when `asking`), loading the script and retrying once on
    /// `NOSCRIPT`; the error as the link gives it, for the Cluster's redirections.
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
                integers(link.command_asking(EVALSHA, &args(), timeout).await)
            } else {
                eval(link, &args(), timeout).await
            }
        };
        match once().await {
            Err(CallError::Reply(e)) if e.starts_with("NOSCRIPT") => {
                load_script(link, load_timeout(timeout, deadline)).await?;
                // Encoded again rather than kept: NOSCRIPT is rare, requests are not.
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

/// A verdict for a check with no answer (its part failed): never reached on success paths.
pub(super) const REJECTED: Verdict = Verdict {
    allowed: false,
    remaining: 0,
    reset: 0,
    charged: false,
    cached: false,
};

/// Loading the script is rare and larger than a decision: allow it at least this long.
pub(super) const LOAD_TIMEOUT_MIN: Duration = Duration::from_millis(500);

/// The shortest timeout a call is given, however near the deadline.
pub(super) const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// How long loading the scripts may take: longer than a decision, unless the request's
/// deadline is nearer.
pub(super) fn load_timeout(timeout: Duration, deadline: Deadline) -> Duration {
    let load = match deadline.budget() {
        Some(b) => LOAD_TIMEOUT_MIN.min(b).max(MIN_TIMEOUT),
        None => LOAD_TIMEOUT_MIN,
    };
    timeout.max(load)
}

/// `EVALSHA args..` on `link`, its reply as integers.
pub(super) async fn eval(
    link: &Link,
    args: &[Value],
    timeout: Duration,
) -> Result<Vec<i64>, CallError> {
    integers(link.command(EVALSHA, args, timeout).await)
}

/// A script's reply as its integers.
fn integers(reply: Result<Frame, CallError>) -> Result<Vec<i64>, CallError> {
    resp::integers(reply?).map_err(CallError::Unexpected)
}

/// `SCRIPT LOAD` of every script on a thread's own connection; the error is what
/// [`Inner::decide_on_link`] answers (`None`: the command never left, use a shared link).
pub(super) async fn load_on_link(
    link: &Link,
    timeout: Duration,
) -> Result<(), Option<Result<Vec<Verdict>, StoreError>>> {
    for lua in script::scripts() {
        let args = [Value::from("LOAD"), Value::from(lua)];
        match link.call("SCRIPT", &args, timeout).await {
            Ok(Frame::Error(e)) => return Err(Some(Err(from_reply(&e)))),
            Ok(_) => {}
            Err(CallError::NotSent) => return Err(None),
            Err(e) => return Err(Some(Err(from_call(e)))),
        }
    }
    Ok(())
}

/// `SCRIPT LOAD` of every script on `link`'s server.
pub(super) async fn load_script(link: &Link, timeout: Duration) -> Result<(), CallError> {
    for lua in script::scripts() {
        let args = [Value::from("LOAD"), Value::from(lua)];
        link.command("SCRIPT", &args, timeout).await?;
    }
    Ok(())
}
