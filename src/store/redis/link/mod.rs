//! A Redis connection of sluice's own RESP client, the only one it has: a serving thread's
//! own link for its decisions, and the store's shared links ([`LinkSet`]) for the rest.
//!
//! Why not fred (issue 32 removed it): fred 10.1 flushed the socket after every `EVALSHA`
//! (even inside a pipeline), so each decision cost sluice a `writev` and Redis a read and an
//! epoll wake-up (34.1 µs of sluice CPU per request against 25.2 µs on links,
//! ARCHITECTURE.md; bench/why.md). A link queues the decisions of every request its thread
//! decides and one task writes them all with one write when it next runs: on a
//! current-thread runtime that is after every request task woken in the same tick has queued
//! its own. Replies come back in
//! order and are matched to their callers first in, first out.
//!
//! A link loads the function library ([`super::library`]) when it connects, and is up only
//! once it has (Redis 7.0+, Valkey 7.2+, an ACL allowing `FUNCTION`). The decisions of one
//! tick go as ONE command: an `FCALL` of the decision's function when there is one, of
//! `batch` when there are several, whose reply holds one answer per decision; before it,
//! after one `TIME`, the one-hit fixed_window takes that need no script
//! ([`super::plain`]), one `HINCRBY` each.
//! On a Cluster node (`batch` off) one call may touch one slot only: the decisions of a tick
//! leave in one write, one `FCALL` per slot.
//!
//! A link is "up" once connected, authenticated, named and the library loaded
//! ([`super::dial`]); callers use the
//! store's shared links ([`LinkSet`]: links too, the one client) whenever it is not, and a
//! command that never left the queue when the connection dropped is reported
//! [`CallError::NotSent`], so it can be sent on a shared link instead: no request fails
//! because a thread's own connection is down while the shared links are up.
//! A command that was written is never sent again (it may have run).
//!
//! A caller waits at most until its deadline, which the connection's task keeps: one timer,
//! set to the earliest deadline it knows of, rather than a timer per request (registering and
//! cancelling one cost about 1,100 instructions, a fiftieth of a request's, bench/why.md).

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::dial::{Dial, LoadError, Stream};
use self::resp::{ArgumentError, Frame, Value};
use super::library::LIBRARY;
use super::plain::{self, Plain, PlainReply, Take};
use super::script::{Call, FastCall, ScriptId};

use self::queue::Queued;
use self::task::run;

mod calls;
pub(super) mod dial;
pub(super) use self::set::LinkSet;
mod queue;
pub mod resp;
mod set;
mod task;
#[cfg(test)]
mod tests;
mod value;

/// How a call on a link failed: the one error taxonomy of sluice's Redis client, mapped to
/// the store's [`StoreError`](crate::store::StoreError) in one place
/// ([`super::errors::from_call`]).
#[derive(Debug, thiserror::Error)]
pub(in crate::store::redis) enum CallError {
    /// The command was never written: safe to send elsewhere.
    #[error("not connected")]
    NotSent,
    /// The connection was lost after the command was written: it may have run. With the
    /// drop's id (every caller of one drop gets the same): one drop is one failure for the
    /// breaker, however many calls it cut ([`Breaker::failure_of_drop`]).
    ///
    /// [`Breaker::failure_of_drop`]: super::breaker::Breaker::failure_of_drop
    #[error("connection lost: {0}")]
    Lost(String, u64),
    /// No reply within the call's timeout (it may still run).
    #[error("redis call timed out")]
    Timeout,
    #[error(transparent)]
    Argument(ArgumentError),
    /// The server answered with an error reply (its code first: `NOSCRIPT`, `MOVED`, `ASK`,
    /// `TRYAGAIN`, `OOM`, `READONLY`, `LOADING`, `WRONGPASS`...).
    #[error("{0}")]
    Reply(String),
    /// The reply was not of the shape the command answers.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

impl CallError {
    /// The error reply's text, when the server answered with one.
    pub(in crate::store::redis) fn reply(&self) -> Option<&str> {
        match self {
            CallError::Reply(e) => Some(e),
            _ => None,
        }
    }
}

/// A handle to a link; clones share the connection.
#[derive(Clone)]
pub(super) struct Link {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the connection's task: commands were queued (or a reconnect was asked for).
    wake: Notify,
    /// The decisions of a tick leave as one `FCALL` (else one per hash slot: a Cluster node).
    batch: bool,
}

/// A caller waiting for one reply. It is answered once: with the reply, with the error that
/// ended the connection, or with [`CallError::Timeout`] at its deadline, whichever comes
/// first. The connection's task keeps the deadlines (one timer for all its callers, not one
/// per request); a reply that comes after its caller's deadline is dropped.
struct Reply {
    tx: Option<oneshot::Sender<Result<Frame, CallError>>>,
    deadline: Instant,
}

type Answer = oneshot::Receiver<Result<Frame, CallError>>;

impl Reply {
    // Callers' deadlines, stalls and redirect pauses are real time, kept on tokio's timers.
    #[allow(clippy::disallowed_methods)]
    fn new(timeout: Duration) -> (Reply, Answer) {
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        let reply = Reply {
            tx: Some(tx),
            deadline,
        };
        (reply, rx)
    }

    fn send(&mut self, r: Result<Frame, CallError>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(r);
        }
    }

    /// Answered already, or its caller gave up.
    fn is_closed(&self) -> bool {
        self.tx.as_ref().is_none_or(|tx| tx.is_closed())
    }

    /// Times it out if its deadline is past at `now`; else, while it still waits, its deadline.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        if self.is_closed() {
            None
        } else if self.deadline <= now {
            self.send(Err(CallError::Timeout));
            None
        } else {
            Some(self.deadline)
        }
    }
}

/// Who waits for one command's reply.
enum Waiter {
    One(Reply),
    /// An `FCALL` of one decision's function (and, a fixed_window take's, as
    /// [`Batched::plain`]).
    Fcall(Reply, Option<(u64, i64)>),
    /// A `batch` call: its reply holds the answers of these decisions, in this order.
    Batch(Vec<Batched>),
    /// The `TIME` before a write's plain takes ([`super::plain`]).
    Time,
    /// A plain take's `HINCRBY` (or a peek's `HGET`); `last`: the last decision of its write
    /// (no `batch` after it), whose reply lets the next write of decisions go.
    Plain {
        reply: Reply,
        take: Take,
        last: bool,
    },
    /// A plain take's `fixed_window_mend` (`what`): the take's hit is in Redis already, so if
    /// the connection drops before it is written, its caller learns that its call may have
    /// run (never "not sent": deciding it again elsewhere would count the hit twice), and a
    /// `settle`'s housekeeping is carried to the next connection ([`State::carry`]).
    Mend(Reply, Take, &'static str),
    /// A carried mend's housekeeping, which nobody waits for.
    Carried(Take),
}

/// A decision in a `batch` call: who waits for it, and how `batch` answers it.
struct Batched {
    reply: Reply,
    /// A fast path's, flat (`flags remaining reset`, after the batch's clock): `Some`, holding
    /// the `now` it was given (`None`: the Redis clock). `batch.lua`'s, whole: `None`.
    fast: Option<Option<i64>>,
    /// A fixed_window take a plain take could make next time: its key's fingerprint and its
    /// window, to remember the key once the batch charged it.
    plain: Option<(u64, i64)>,
}

#[derive(Default)]
struct State {
    /// Connected, with the function library loaded.
    up: bool,
    /// Encoded commands not written yet.
    out: Vec<u8>,
    /// How many of `waiting`'s last entries are for commands still in `out`.
    unsent: usize,
    /// One per command written or queued, in order: the replies arrive in this order.
    waiting: VecDeque<Waiter>,
    /// The decisions queued for the next `FCALL`.
    queued: Queued,
    /// An `FCALL` of decisions awaits its reply: the next one waits for it, gathering every
    /// decision queued meanwhile (see [`task::serve`]).
    fcall_in_flight: bool,
    /// Drop the connection and dial again (it reached a server that is no primary).
    redial: bool,
    /// The earliest deadline of a caller, as far as the connection's task knows to wake for
    /// it: a caller with an earlier one wakes the task to set its timer again.
    timer: Option<Instant>,
    /// Redis' clock and the keys charged in their window, for plain takes.
    plain: Plain,
    /// Plain takes that made a fresh field whose `settle` never left a dropped connection:
    /// the next connection sends their housekeeping (`forget`: the key's expiry set, earlier
    /// windows dropped), so no key is left without a TTL. (A `retake`'s give-back is not
    /// carried: on another server after a failover it could give back a hit never counted
    /// there; its hit stays counted, the safe side.)
    carry: Vec<Take>,
}

/// The most mends [`State::carry`] keeps.
const MAX_CARRY: usize = 4096;

impl State {
    /// Queues the carried mends' housekeeping first on a new connection.
    fn send_carried(&mut self) {
        for take in std::mem::take(&mut self.carry) {
            Plain::encode_mend(&mut self.out, LIBRARY.mend(), &take, "forget");
            self.waiting.push_back(Waiter::Carried(take));
            self.unsent += 1;
        }
    }

    /// Adds a caller with `deadline`: whether the task must set its timer again.
    fn arm(&mut self, deadline: Instant) -> bool {
        let earlier = self.timer.is_none_or(|t| deadline < t);
        if earlier {
            self.timer = Some(deadline);
        }
        earlier
    }

    /// Times out every caller past its deadline; returns the earliest deadline left (also
    /// kept as [`State::timer`]).
    // Callers' deadlines, stalls and redirect pauses are real time, kept on tokio's timers.
    #[allow(clippy::disallowed_methods)]
    fn expire(&mut self) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut keep = |d: Option<Instant>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        };
        for w in &mut self.waiting {
            match w {
                Waiter::One(r)
                | Waiter::Mend(r, ..)
                | Waiter::Fcall(r, _)
                | Waiter::Plain { reply: r, .. } => keep(r.expire(now)),
                Waiter::Batch(rs) => rs.iter_mut().for_each(|b| keep(b.reply.expire(now))),
                Waiter::Time | Waiter::Carried(_) => {}
            }
        }
        for e in &mut self.queued.entries {
            keep(e.reply.expire(now));
        }
        self.timer = next;
        next
    }
}

/// Between reconnection attempts: the first at once, then doubling to at most this, so a
/// restarted Redis is found within a quarter second.
const MAX_RETRY: Duration = Duration::from_millis(250);

/// How often a failing connection attempt is logged at `warn` (every attempt at `debug`).
const WARN_EVERY: Duration = Duration::from_secs(5);

/// How often the connection checks that replies keep coming while commands wait.
const STALL_CHECK: Duration = Duration::from_millis(250);

/// A new id for a connection's drop (ids are unique in the process).
fn new_drop() -> u64 {
    static DROPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    DROPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection is gone: callers of unwritten commands may go elsewhere, the others
    /// learn that theirs may have run.
    fn close(&self, why: &str) {
        let mut s = self.lock();
        s.up = false;
        s.redial = false;
        s.out.clear();
        s.fcall_in_flight = false;
        s.timer = None;
        s.plain.clear();
        let unsent = std::mem::take(&mut s.unsent);
        let written = s.waiting.len() - unsent;
        let drop = new_drop();
        let mut carry = std::mem::take(&mut s.carry);
        for (i, w) in s.waiting.drain(..).enumerate() {
            let e = || {
                if i < written {
                    CallError::Lost(why.to_string(), drop)
                } else {
                    CallError::NotSent
                }
            };
            match w {
                // A peek wrote nothing: it may be decided elsewhere.
                Waiter::Plain {
                    reply: mut r, take, ..
                } if take.peek => r.send(Err(CallError::NotSent)),
                Waiter::One(mut r)
                | Waiter::Fcall(mut r, _)
                | Waiter::Plain { reply: mut r, .. } => r.send(Err(e())),
                Waiter::Mend(mut r, take, what) => {
                    r.send(Err(CallError::Lost(why.to_string(), drop)));
                    if i >= written && what == "settle" {
                        carry.push(take);
                    }
                }
                Waiter::Carried(take) => {
                    if i >= written {
                        carry.push(take);
                    }
                }
                Waiter::Batch(rs) => rs.into_iter().for_each(|mut b| b.reply.send(Err(e()))),
                Waiter::Time => {}
            }
        }
        // Bounded, should the link never come back with the library.
        carry.truncate(MAX_CARRY);
        s.carry = carry;
        for mut e in s.queued.entries.drain(..) {
            e.reply.send(Err(CallError::NotSent));
        }
        s.queued.clear();
    }
}

/// Marks the link down when its task ends (aborted with the store), so no caller waits on a
/// connection nobody serves.
struct Down(Arc<Shared>);

impl Drop for Down {
    fn drop(&mut self) {
        self.0.close("the store was dropped");
    }
}
