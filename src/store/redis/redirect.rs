//! Following Redis Cluster redirections for one slot's call: `MOVED` (the slot map is
//! updated and the call sent to the new owner), `ASK` (`ASKING` then the call on the importing
//! node, back to back), `TRYAGAIN` (a short wait). A redirected call did not run where it was
//! sent, so sending it again never charges twice. Each primary's breaker sees the outcome.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Client, ClientLike};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::connect::RedisSettingsError;
use super::link::{CallError, Link};
use super::nodes::{self, Nodes};
use super::resp::{self, Frame};
use super::script::{self, Scope};
use super::{breaker_open, error, from_fred, record, Inner, When, MIN_TIMEOUT};
use crate::store::{Check, ErrorKind, StoreError};

impl Inner {
    /// Cluster: one script call on the primary owning `slot` (an `FCALL` on this thread's own
    /// connection to it when up, else an `EVALSHA` on its pool), behind that primary's breaker.
    /// Redirections are followed (`MOVED` updates the slot map, `ASK` goes to the importing
    /// node after `ASKING`, `TRYAGAIN` waits a moment): a redirected call did not run, so
    /// sending it again charges nothing twice. Bounded by [`MAX_REDIRECTS`] and `timeout`.
    // Redirects and TRYAGAIN pauses are bounded in real time, as the socket waits are.
    #[allow(clippy::disallowed_methods)]
    pub(super) async fn run_slot<'k, C: std::borrow::Borrow<Check<'k>> + Sync>(
        &self,
        nodes: &Nodes,
        slot: u16,
        checks: &[C],
        scope: Scope<'k>,
        now: When,
        timeout: Duration,
    ) -> Result<script::Reply, StoreError> {
        let args = || script::evalsha(&self.sha, checks, scope, now.script, now.local);
        let started = crate::clock::monotonic();
        let mut ask: Option<Arc<nodes::Node>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
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
            // This thread's own connection to the node when up (not for ASK: `ASKING` must
            // precede the call on its connection), else the node's pool.
            let mut dropped = None;
            let own = match self.node_link(&node).filter(|_| !asking) {
                Some(link) => {
                    let call = script::call(&self.sha, checks, scope, now.script, now.local);
                    on_link(&link, &call, left, &mut dropped).await
                }
                None => None,
            };
            let result = match own {
                Some(r) => r,
                None => {
                    let client = node.pool.next_connected().clone();
                    Box::pin(self.call(&client, &args, asking, left, now.deadline)).await
                }
            };
            let redirect = match &result {
                Err(e) if attempt < MAX_REDIRECTS => Redirect::of(e),
                _ => None,
            };
            let Some(redirect) = redirect else {
                // CLUSTERDOWN is the node answering at once that the cluster refuses every
                // slot (a primary failed, not yet replaced): an error for the request, but
                // opening this node's breaker would save no timeout and outlast the refusal.
                let down = matches!(&result, Err(e) if e.details().starts_with("CLUSTERDOWN"));
                let result = result
                    .map_err(|e| from_fred(&e))
                    .and_then(|r| script::decode(r, checks.len()));
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
            match redirect {
                Redirect::Moved(addr) => {
                    nodes.moved(slot, &addr).map_err(cluster)?;
                }
                Redirect::Ask(addr) => ask = Some(nodes.node(&addr).map_err(cluster)?),
                Redirect::TryAgain => {
                    if started.elapsed() + TRYAGAIN_PAUSE >= timeout {
                        return Err(error(ErrorKind::Cluster, "TRYAGAIN: slot migrating"));
                    }
                    tokio::time::sleep(TRYAGAIN_PAUSE).await;
                }
            }
        }
    }
}

/// A slot's call on this thread's own connection to its node, its outcome as the pool's
/// would be (so redirections, `CLUSTERDOWN` and outages are read alike). `None`: it did not
/// run (never written, the function library refused, `NOSCRIPT`), so the pool sends it.
/// `dropped`: set to the drop's id when the connection dropped under the call.
async fn on_link(
    link: &Link,
    call: &script::Call<'_>,
    timeout: Duration,
    dropped: &mut Option<u64>,
) -> Option<Result<Vec<i64>, fred::error::Error>> {
    use fred::error::{Error, ErrorKind as F};
    Some(match link.decide(call, timeout).await {
        Ok(Frame::Error(e)) if e.starts_with("NOSCRIPT") => return None,
        // An error reply: `kind_of` reads its code, `Redirect::of` its words.
        Ok(Frame::Error(e)) => Err(Error::new(F::Unknown, e)),
        Ok(frame) => resp::integers(frame).map_err(|m| Error::new(F::Parse, m)),
        Err(CallError::NotSent) => return None,
        Err(CallError::Timeout) => Err(Error::new(F::Timeout, "redis call timed out")),
        Err(CallError::Lost(why, drop)) => {
            *dropped = Some(drop);
            Err(Error::new(F::IO, format!("connection lost: {why}")))
        }
        Err(CallError::Argument(e)) => Err(Error::new(F::InvalidArgument, e.to_string())),
    })
}

/// A Cluster redirection: the call did not run where it was sent.
pub(super) enum Redirect {
    Moved(String),
    Ask(String),
    TryAgain,
}

impl Redirect {
    pub(super) fn of(e: &fred::error::Error) -> Option<Redirect> {
        let mut words = e.details().split_whitespace();
        match words.next()? {
            "MOVED" => Some(Redirect::Moved(words.nth(1)?.to_string())),
            "ASK" => Some(Redirect::Ask(words.nth(1)?.to_string())),
            "TRYAGAIN" => Some(Redirect::TryAgain),
            _ => None,
        }
    }
}

/// Redirections followed per call (a reshard moves a slot once; a failover once more).
const MAX_REDIRECTS: u32 = 5;

/// The wait before sending a call again on `TRYAGAIN` (a slot's keys half migrated).
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(2);

/// `ASKING` then `EVALSHA` on one connection, back to back (a pipeline is never
/// interleaved with other callers' commands): how a slot being imported is reached.
pub(super) async fn eval_asking(
    client: &Client,
    args: Vec<Value>,
    timeout: Duration,
) -> Result<Vec<i64>, fred::error::Error> {
    use fred::types::FromValue;
    let pipe = client.pipeline();
    let asking = CustomCommand::new_static("ASKING", ClusterHash::Random, false);
    let _: () = pipe.custom(asking, Vec::<Value>::new()).await?;
    let cmd = CustomCommand::new_static("EVALSHA", ClusterHash::Offset(2), false);
    let _: () = pipe.custom(cmd, args).await?;
    let replies = tokio::time::timeout(timeout, pipe.try_all::<Value>())
        .await
        .map_err(|_| {
            fred::error::Error::new(fred::error::ErrorKind::Timeout, "ASKING timed out")
        })?;
    match replies.into_iter().nth(1) {
        Some(reply) => Vec::<i64>::from_value(reply?),
        None => Err(fred::error::Error::new(
            fred::error::ErrorKind::Protocol,
            "no reply to EVALSHA after ASKING",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::ErrorKind as F;

    #[test]
    fn redirections_are_read() {
        let of = |d: &str| Redirect::of(&fred::error::Error::new(F::Cluster, d.to_string()));
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
    }
}
