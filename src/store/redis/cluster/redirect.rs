//! Following Redis Cluster redirections, in one loop ([`Inner::follow`]) for every call on a
//! slot (decisions, undo, settlements, reservation records): `MOVED` (the slot map is updated
//! and the call sent to the new owner), `ASK` (`ASKING` then the call on the importing node,
//! back to back), `TRYAGAIN` (a short wait, growing). A redirected call did not run where it
//! was sent, so sending it again never charges twice.
//!
//! During a reshard a per-slot batch (several requests' decisions in one `FCALL` on a
//! thread's own connection) is refused whole: `TRYAGAIN` when some of its keys have moved
//! and others not, `ASK` when none is left. So a request redirected by `ASK` or `TRYAGAIN`
//! leaves the batch: it is sent again alone, on the node's shared links, where a call of its own keys
//! only is answered (`ASK` is followed; `TRYAGAIN` is left only for a request whose own keys
//! are split, until their migration ends). Redirections tell each primary's breaker the node
//! answered: a reshard never opens one. `MOVED` and `ASK` are followed [`MAX_REDIRECTS`]
//! times; `TRYAGAIN` until the call's timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::nodes::{self, Nodes};
use crate::store::redis::connect::RedisSettingsError;
use crate::store::redis::link::{CallError, Link};
use crate::store::redis::resp::{self, Frame};
use crate::store::redis::script::{self, Scope};
use crate::store::redis::{breaker_open, error, from_call, record, Inner, When, MIN_TIMEOUT};
use crate::store::{Check, ErrorKind, StoreError};

/// How one attempt of a call on a slot is to be sent.
#[derive(Clone, Copy, Debug)]
pub(in crate::store::redis) struct Route {
    /// `ASKING` first, on one connection: the slot is being imported by this node.
    pub asking: bool,
    /// Redirected by `ASK` or `TRYAGAIN` before: not in a batch with other requests.
    pub alone: bool,
}

/// What an attempt gave: its outcome, and the drop's id when a thread's own connection
/// dropped under it (a drop counts once toward the breaker).
pub(in crate::store::redis) type Sent<T> = (Result<T, CallError>, Option<u64>);

impl Inner {
    /// The one redirect loop: `send` on the primary owning `slot` (or the node an `ASK` names),
    /// behind its breaker, until it is not redirected; bounded by [`MAX_REDIRECTS`] and
    /// `timeout`. The outcome is told to the node's breaker (see the module docs).
    // Callers' deadlines, stalls and redirect pauses are real time, kept on tokio's timers.
    #[allow(clippy::disallowed_methods)]
    pub(in crate::store::redis) async fn follow<T, F, Fut>(
        &self,
        nodes: &Nodes,
        slot: u16,
        timeout: Duration,
        mut send: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(Arc<nodes::Node>, Route, Duration) -> Fut,
        Fut: Future<Output = Sent<T>>,
    {
        let started = crate::clock::monotonic();
        let mut ask: Option<Arc<nodes::Node>> = None;
        let mut alone = false;
        let mut redirects = 0;
        let mut pause = TRYAGAIN_PAUSE;
        loop {
            let asking = ask.is_some();
            let node = match ask.take() {
                Some(n) => n,
                None => nodes.route(slot).ok_or_else(|| {
                    error(
                        ErrorKind::Cluster,
                        format!("no known primary for slot {slot}"),
                    )
                })?,
            };
            if !node.breaker.allows() {
                return Err(breaker_open());
            }
            let left = timeout.saturating_sub(started.elapsed()).max(MIN_TIMEOUT);
            let (result, dropped) = send(node.clone(), Route { asking, alone }, left).await;
            let redirect = match &result {
                Err(e) => Redirect::of(e),
                Ok(_) => None,
            };
            let Some(redirect) = redirect else {
                // CLUSTERDOWN is the node answering at once that the cluster refuses every
                // slot (a primary failed, not yet replaced): an error for the request, but
                // opening this node's breaker would save no timeout and outlast the refusal.
                let down = matches!(&result, Err(e) if e.reply().is_some_and(|r| r.starts_with("CLUSTERDOWN")));
                let result = result.map_err(from_call);
                match (down, dropped) {
                    (true, _) => node.breaker.success(),
                    (false, Some(drop)) => node.breaker.failure_of_drop(drop),
                    (false, None) => record(&node.breaker, &result),
                }
                return result;
            };
            // The node answered: it is up, whoever owns the slot now.
            node.breaker.success();
            let cluster = |e: RedisSettingsError| error(ErrorKind::Cluster, e.to_string());
            let mut redirected = |what: &str| {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(error(
                        ErrorKind::Cluster,
                        format!("slot {slot}: redirected more than {MAX_REDIRECTS} times ({what})"),
                    ));
                }
                Ok(())
            };
            match redirect {
                Redirect::Moved(addr) => {
                    redirected("MOVED")?;
                    nodes.moved(slot, &addr).map_err(cluster)?;
                }
                Redirect::Ask(addr) => {
                    redirected("ASK")?;
                    alone = true;
                    ask = Some(nodes.node(&addr).map_err(cluster)?);
                }
                Redirect::TryAgain => {
                    alone = true;
                    if started.elapsed() + pause >= timeout {
                        return Err(error(ErrorKind::Cluster, "TRYAGAIN: slot migrating"));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(TRYAGAIN_PAUSE_MAX);
                }
            }
        }
    }

    /// Cluster: one script call on the primary owning `slot` (an `FCALL` on this thread's own
    /// connection to it when up, in a batch with other requests of the slot, else one of its
    /// own on the node's shared links), through [`Inner::follow`].
    pub(in crate::store::redis) async fn run_slot<'k, C: std::borrow::Borrow<Check<'k>> + Sync>(
        &self,
        nodes: &Nodes,
        slot: u16,
        checks: &[C],
        scope: Scope<'k>,
        now: When,
        timeout: Duration,
    ) -> Result<script::Reply, StoreError> {
        let args = || script::fcall(checks, scope, now.script, now.local);
        let args = &args;
        let reply = self
            .follow(nodes, slot, timeout, move |node, route, left| async move {
                // This thread's own connection to the node when up (not for ASK: `ASKING`
                // must precede the call on its connection; nor once redirected: see the
                // module docs), else the node's shared links.
                let mut dropped = None;
                let own = match self
                    .node_link(&node)
                    .filter(|_| !route.asking && !route.alone)
                {
                    Some(link) => {
                        let call = script::call(checks, scope, now.script, now.local);
                        on_link(&link, &call, left, &mut dropped).await
                    }
                    None => None,
                };
                let result = match own {
                    Some(r) => r,
                    None => {
                        let link = node.links.next().clone();
                        Box::pin(self.call(&link, args, route.asking, left, now.deadline)).await
                    }
                };
                (result, dropped)
            })
            .await?;
        script::decode(reply, checks.len())
    }
}

/// A slot's call on this thread's own connection to its node, its outcome as the shared
/// links' would be (so redirections, `CLUSTERDOWN` and outages are read alike). `None`: it
/// did not run (never written, or the library was not on the node: the link loads it
/// again), so a shared link sends it.
/// `dropped`: set to the drop's id when the connection dropped under the call.
async fn on_link(
    link: &Link,
    call: &script::Call<'_>,
    timeout: Duration,
    dropped: &mut Option<u64>,
) -> Option<Result<Vec<i64>, CallError>> {
    Some(match link.decide(call, timeout).await {
        // An error reply: `from_call` reads its code, `Redirect::of` its words.
        Ok(Frame::Error(e)) => Err(CallError::Reply(e)),
        Ok(frame) => resp::integers(frame).map_err(CallError::Unexpected),
        Err(CallError::NotSent) => return None,
        Err(CallError::Lost(why, drop)) => {
            *dropped = Some(drop);
            Err(CallError::Lost(why, drop))
        }
        Err(e) => Err(e),
    })
}

/// A Cluster redirection: the call did not run where it was sent.
pub(in crate::store::redis) enum Redirect {
    Moved(String),
    Ask(String),
    TryAgain,
}

impl Redirect {
    pub(in crate::store::redis) fn of(e: &CallError) -> Option<Redirect> {
        let mut words = e.reply()?.split_whitespace();
        match words.next()? {
            "MOVED" => Some(Redirect::Moved(words.nth(1)?.to_string())),
            "ASK" => Some(Redirect::Ask(words.nth(1)?.to_string())),
            "TRYAGAIN" => Some(Redirect::TryAgain),
            _ => None,
        }
    }
}

/// `MOVED` and `ASK` followed per call (a reshard moves a slot once; a failover once more).
const MAX_REDIRECTS: u32 = 5;

/// The first wait before sending a call again on `TRYAGAIN` (a slot's keys half migrated),
/// doubled on each further one up to [`TRYAGAIN_PAUSE_MAX`].
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(2);
const TRYAGAIN_PAUSE_MAX: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_read() {
        let of = |d: &str| Redirect::of(&CallError::Reply(d.to_string()));
        assert!(
            matches!(of("MOVED 3999 127.0.0.1:6381"), Some(Redirect::Moved(a)) if a == "127.0.0.1:6381")
        );
        assert!(
            matches!(of("ASK 3999 127.0.0.1:6381"), Some(Redirect::Ask(a)) if a == "127.0.0.1:6381")
        );
        assert!(matches!(
            of("TRYAGAIN Multiple keys request during rehashing of slot"),
            Some(Redirect::TryAgain)
        ));
        assert!(of("CLUSTERDOWN The cluster is down").is_none());
        assert!(of("MOVED").is_none(), "no address");
        assert!(Redirect::of(&CallError::Lost("MOVED 1 h:1".into(), 1)).is_none());
        assert!(Redirect::of(&CallError::Timeout).is_none());
    }
}
