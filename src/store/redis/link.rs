//! A serving thread's own Redis connection: our RESP client, for the hot decision path only.
//!
//! Why not fred here: fred 10.1 flushes the socket after every `EVALSHA` (even inside a
//! pipeline), so each decision cost sluice a `writev` and Redis a read and an epoll wake-up
//! (bench/why.md). A link queues the decisions of every request its thread decides and one
//! task writes them all with one write when it next runs: on a current-thread runtime that is
//! after every request task woken in the same tick has queued its own. Replies come back in
//! order and are matched to their callers first in, first out.
//!
//! Where the connection loaded the function library ([`super::library`]: Redis 7 and later,
//! unless an ACL forbids `FUNCTION LOAD`), the decisions of one tick go as ONE command: an
//! `FCALL` of the decision's function when there is one, of `batch` when there are several,
//! whose reply holds one answer per decision; before it, after one `TIME`, the one-hit
//! fixed_window takes that need no script ([`super::plain`]), one `HINCRBY` each. Elsewhere
//! each decision is its own `EVALSHA`.
//! On a Cluster node (`batch` off) one call may touch one slot only: the decisions of a tick
//! leave in one write, one `FCALL` per slot.
//!
//! A link is "up" once connected, authenticated and named ([`super::dial`]); callers use the
//! shared pool whenever it is not, and a command that never left the queue when the
//! connection dropped is reported [`CallError::NotSent`], so it can be sent on the pool
//! instead: no request fails because a thread's own connection is down while the pool is up.
//! A command that was written is never sent again (it may have run).
//!
//! A caller waits at most until its deadline, which the connection's task keeps: one timer,
//! set to the earliest deadline it knows of, rather than a timer per request (registering and
//! cancelling one cost about 1,100 instructions, a fiftieth of a request's, bench/why.md).

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fred::types::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::dial::{Dial, Stream};
use super::library::LIBRARY;
use super::plain::{self, Outcome, Plain, Take};
use super::resp::{self, ArgumentError, Frame};
use super::script::{Call, FastCall, ScriptId};

/// How a call on a link failed.
#[derive(Debug)]
pub(super) enum CallError {
    /// The command was never written: safe to send elsewhere.
    NotSent,
    /// The connection was lost after the command was written: it may have run. With the
    /// drop's id (every caller of one drop gets the same): one drop is one failure for the
    /// breaker, however many calls it cut ([`Breaker::failure_of_drop`]).
    ///
    /// [`Breaker::failure_of_drop`]: super::breaker::Breaker::failure_of_drop
    Lost(String, u64),
    /// No reply within the call's timeout (it may still run).
    Timeout,
    Argument(ArgumentError),
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
    // Callers' deadlines and stalls are real time, kept on tokio's timers.
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
    /// A plain take's `HINCRBY`; `last`: the last decision of its write (no `batch` after it),
    /// whose reply lets the next write of decisions go.
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
    /// the `now` it was given (`None`: the Redis clock). `decide.lua`'s, whole: `None`.
    fast: Option<Option<i64>>,
    /// A fixed_window take a plain take could make next time: its key's fingerprint and its
    /// window, to remember the key once the batch charged it.
    plain: Option<(u64, i64)>,
}

#[derive(Default)]
struct State {
    up: bool,
    /// The connection loaded the function library: decisions go as `FCALL`s, batched.
    functions: bool,
    /// Encoded commands not written yet.
    out: Vec<u8>,
    /// How many of `waiting`'s last entries are for commands still in `out`.
    unsent: usize,
    /// One per command written or queued, in order: the replies arrive in this order.
    waiting: VecDeque<Waiter>,
    /// The decisions queued for the next `FCALL` (with `functions` only).
    queued: Queued,
    /// An `FCALL` of decisions awaits its reply: the next one waits for it, gathering every
    /// decision queued meanwhile (see [`serve`]).
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
    /// Queues the carried mends' housekeeping first on a new connection (with the library:
    /// without it they cannot run, and are dropped).
    fn send_carried(&mut self) {
        if !self.functions {
            self.carry.clear();
            return;
        }
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
    // Callers' deadlines and stalls are real time, kept on tokio's timers.
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

/// Decisions waiting for the next write, already encoded: their keys, and per decision its
/// script's code followed (for `decide.lua`) by its key and argument counts and then by its
/// arguments (the layout of `batch`'s `ARGV`).
#[derive(Default)]
struct Queued {
    entries: Vec<Entry>,
    keys: Vec<u8>,
    args: Vec<u8>,
    /// A Cluster node's queue: each decision's hash slot is kept, to write one `FCALL` per
    /// slot (a standalone queue does not pay for the hash).
    by_slot: bool,
}

/// One queued decision: where its parts are in [`Queued`]'s buffers.
struct Entry {
    id: ScriptId,
    nkeys: usize,
    keys: std::ops::Range<usize>,
    /// Its code, counts and arguments in `args`; its own arguments start at `own`.
    args: std::ops::Range<usize>,
    own: usize,
    nargs: usize,
    /// As [`Batched::fast`].
    fast: Option<Option<i64>>,
    /// Its (first) key's hash slot on a Cluster node's queue (else 0): the decisions of one
    /// slot may share a Cluster `FCALL`.
    slot: u16,
    /// A fixed_window take a plain take may decide: its key's fingerprint and values.
    plain: Option<(u64, plain::Args)>,
    reply: Reply,
}

/// What [`Queued::push`] learns from encoding a decision.
struct Parts<'c> {
    nkeys: usize,
    own: usize,
    nargs: usize,
    fast: Option<Option<i64>>,
    /// Its first key, whose hash slot a Cluster node's queue keeps.
    first_key: Option<&'c [u8]>,
    plain: Option<plain::Args>,
}

impl Queued {
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a decision.
    fn push(&mut self, call: &Call<'_>, reply: Reply) -> Result<(), ArgumentError> {
        let (k, a) = (self.keys.len(), self.args.len());
        let parts = match call {
            Call::Fast(f) => Ok(self.encode_fast(f)),
            Call::Whole(evalsha) => self.encode_whole(evalsha),
        };
        let parts = match parts {
            Ok(p) => p,
            Err(e) => {
                self.keys.truncate(k);
                self.args.truncate(a);
                return Err(e);
            }
        };
        let slot = match parts.first_key {
            Some(key) if self.by_slot => fred::util::redis_keyslot(key),
            _ => 0,
        };
        // Plain takes go on standalone and Sentinel connections only (with `batch`).
        let plain = parts
            .plain
            .filter(|_| !self.by_slot)
            .map(|a| (Plain::fingerprint(&self.keys[k..]), a));
        self.entries.push(Entry {
            id: call.id(),
            nkeys: parts.nkeys,
            keys: k..self.keys.len(),
            args: a..self.args.len(),
            own: parts.own,
            nargs: parts.nargs,
            fast: parts.fast,
            slot,
            plain,
            reply,
        });
        Ok(())
    }

    /// A fast path's decision, its values encoded as they are (no argument list is built).
    fn encode_fast<'c>(&mut self, f: &FastCall<'c>) -> Parts<'c> {
        resp::bulk_int(&mut self.args, i64::from(f.id.code()));
        let own = self.args.len();
        match f.now {
            Some(t) => resp::bulk_int(&mut self.args, t),
            None => resp::bulk(&mut self.args, b""),
        }
        for &n in f.ints() {
            resp::bulk_int(&mut self.args, n);
        }
        resp::bulk(&mut self.keys, f.key);
        Parts {
            nkeys: 1,
            own,
            nargs: 1 + f.ints().len(),
            fast: Some(f.now),
            first_key: Some(f.key),
            plain: (f.id == ScriptId::FixedWindow)
                .then(|| plain::Args::of(f.now, f.ints()))
                .flatten(),
        }
    }

    /// `decide.lua`'s decision from its `EVALSHA` argument list (`sha numkeys KEYS.. ARGV..`):
    /// its key and argument counts, then its arguments.
    fn encode_whole<'c>(&mut self, evalsha: &'c [Value]) -> Result<Parts<'c>, ArgumentError> {
        let nkeys = evalsha
            .get(1)
            .and_then(Value::as_i64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| 2 + n <= evalsha.len())
            .ok_or_else(|| ArgumentError("decision without its key count".into()))?;
        let (keys, argv) = evalsha[2..].split_at(nkeys);
        resp::bulk_int(&mut self.args, i64::from(ScriptId::Decide.code()));
        resp::bulk_int(&mut self.args, nkeys as i64);
        resp::bulk_int(&mut self.args, argv.len() as i64);
        let own = self.args.len();
        resp::encode_args(&mut self.keys, keys)?;
        resp::encode_args(&mut self.args, argv)?;
        Ok(Parts {
            nkeys,
            own,
            nargs: argv.len(),
            fast: None,
            first_key: keys.first().and_then(Value::as_bytes),
            plain: None,
        })
    }

    /// Encodes what is queued into `out` and empties the queue: the takes `plain` may send
    /// plain after one `TIME`, then the rest as one command; their waiters join `waiting`.
    /// Whether it wrote anything. A decision whose caller has gone (its deadline passed while
    /// an `FCALL` was out) is left out: it would charge for an answer nobody reads.
    fn write(&mut self, out: &mut Vec<u8>, plain: &Plain, waiting: &mut VecDeque<Waiter>) -> bool {
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|e| !e.reply.is_closed());
        let mut takes = Vec::new();
        let now = plain.estimate();
        entries.retain_mut(|e| {
            let take = e
                .plain
                .zip(now)
                .and_then(|((fp, a), now)| plain.take(now, &self.keys[e.keys.clone()], fp, a));
            match take {
                Some(t) => {
                    // The entry is dropped: its caller's reply goes with the take.
                    let gone = Reply {
                        tx: None,
                        deadline: e.reply.deadline,
                    };
                    takes.push((std::mem::replace(&mut e.reply, gone), t));
                    false
                }
                None => true,
            }
        });
        let wrote = !takes.is_empty() || !entries.is_empty();
        if !takes.is_empty() {
            Plain::encode_time(out);
            waiting.push_back(Waiter::Time);
            let n = takes.len();
            for (i, (reply, take)) in takes.into_iter().enumerate() {
                Plain::encode_take(out, &take, 1);
                waiting.push_back(Waiter::Plain {
                    reply,
                    take,
                    last: i + 1 == n && entries.is_empty(),
                });
            }
        }
        waiting.extend(self.encode(out, &mut entries));
        // Emptied, its capacity kept for the next batch.
        self.entries = entries;
        self.clear();
        wrote
    }

    /// Encodes what is queued into `out` as one command per hash slot (one script may touch
    /// one slot only: a Cluster node), the decisions of one slot in their order, and empties
    /// the queue; their waiters join `waiting`. A hot key's decisions still share one `FCALL`.
    fn write_by_slot(&mut self, out: &mut Vec<u8>, waiting: &mut VecDeque<Waiter>) {
        let mut slots: Vec<(u16, Vec<Entry>)> = Vec::new();
        for e in std::mem::take(&mut self.entries) {
            if e.reply.is_closed() {
                continue;
            }
            match slots.iter_mut().find(|(s, _)| *s == e.slot) {
                Some((_, same)) => same.push(e),
                None => slots.push((e.slot, vec![e])),
            }
        }
        for (_, mut entries) in slots {
            waiting.extend(self.encode(out, &mut entries));
        }
        self.clear();
    }

    /// `entries` as one command: an `FCALL` of the decision's function when alone, of `batch`
    /// when several.
    fn encode(&self, out: &mut Vec<u8>, entries: &mut Vec<Entry>) -> Option<Waiter> {
        if entries.len() <= 1 {
            return entries.pop().map(|e| self.fcall(out, e));
        }
        // FCALL batch numkeys KEYS.. count (code [nkeys nargs] ARGV.. | =)..
        let nkeys: usize = entries.iter().map(|e| e.nkeys).sum();
        let repeats = repeats(entries, &self.args);
        // Each decision's code, and decide.lua's two counts, before its arguments; a repeat
        // is its one `=`.
        let nargs: usize = entries
            .iter()
            .zip(&repeats)
            .map(|(e, &again)| match (again, e.fast.is_some()) {
                (true, _) => 1,
                (false, true) => 1 + e.nargs,
                (false, false) => 3 + e.nargs,
            })
            .sum();
        resp::command_header(out, 3 + nkeys + 1 + nargs);
        resp::bulk(out, b"FCALL");
        resp::bulk(out, LIBRARY.batch().as_bytes());
        resp::bulk_int(out, nkeys as i64);
        for e in entries.iter() {
            out.extend_from_slice(&self.keys[e.keys.clone()]);
        }
        resp::bulk_int(out, entries.len() as i64);
        for (e, again) in entries.iter().zip(repeats) {
            if again {
                resp::bulk(out, b"=");
            } else {
                out.extend_from_slice(&self.args[e.args.clone()]);
            }
        }
        let replies = entries
            .drain(..)
            .map(|e| Batched {
                reply: e.reply,
                fast: e.fast,
                plain: e.plain.map(|(fp, a)| (fp, a.window)),
            })
            .collect();
        Some(Waiter::Batch(replies))
    }

    /// `FCALL function numkeys KEYS.. ARGV..` of one decision.
    fn fcall(&self, out: &mut Vec<u8>, e: Entry) -> Waiter {
        resp::command_header(out, 3 + e.nkeys + e.nargs);
        resp::bulk(out, b"FCALL");
        resp::bulk(out, LIBRARY.function(e.id).as_bytes());
        resp::bulk_int(out, e.nkeys as i64);
        out.extend_from_slice(&self.keys[e.keys]);
        out.extend_from_slice(&self.args[e.own..e.args.end]);
        Waiter::Fcall(e.reply, e.plain.map(|(fp, a)| (fp, a.window)))
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.keys.clear();
        self.args.clear();
    }
}

/// Which decisions of a batch are sent as `=`: a fast path's whose script code and values
/// (`now` included) are those of the fast path's decision before it in the batch, so `batch`
/// reuses them and only its key travels (a thread's requests mostly hit one rule at one
/// instant: each repeat saves Redis parsing and interning its values).
fn repeats(entries: &[Entry], args: &[u8]) -> Vec<bool> {
    let mut last: Option<&[u8]> = None;
    entries
        .iter()
        .map(|e| {
            if e.fast.is_none() {
                return false;
            }
            let own = &args[e.args.clone()];
            let again = last == Some(own);
            last = Some(own);
            again
        })
        .collect()
}

/// Between reconnection attempts: the first at once, then doubling to at most this, so a
/// restarted Redis is found within a quarter second.
const MAX_RETRY: Duration = Duration::from_millis(250);

/// How often a failing connection attempt is logged at `warn` (every attempt at `debug`).
const WARN_EVERY: Duration = Duration::from_secs(5);

/// How often the connection checks that replies keep coming while commands wait.
const STALL_CHECK: Duration = Duration::from_millis(250);

impl Link {
    /// Starts connecting on the calling task's runtime, in the background; the task ends when
    /// aborted (with the store). `batch`: the decisions of a tick may share one `FCALL` (on a
    /// Cluster node, where one call touches one slot, only those of one slot do).
    pub(super) fn start(dial: Dial, stall: Duration, batch: bool) -> (Link, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queued: Queued {
                    by_slot: !batch,
                    ..Queued::default()
                },
                ..State::default()
            }),
            wake: Notify::new(),
            batch,
        });
        let task = tokio::spawn(run(shared.clone(), dial, stall));
        (Link { shared }, task)
    }

    pub(super) fn is_up(&self) -> bool {
        self.shared.lock().up
    }

    /// Decides `call`: with the function library, in the `FCALL` that carries every decision
    /// of this tick; else as its `EVALSHA`. An error reply is an `Ok(Frame::Error)`.
    pub(super) async fn decide(
        &self,
        call: &Call<'_>,
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = {
            let mut s = self.shared.lock();
            if !s.up {
                return Err(CallError::NotSent);
            }
            if s.functions {
                let first = s.out.is_empty() && s.queued.is_empty();
                let (tx, rx) = Reply::new(timeout);
                let earlier = s.arm(tx.deadline);
                s.queued.push(call, tx).map_err(CallError::Argument)?;
                if first || earlier {
                    // Later decisions of this tick join the same FCALL.
                    self.shared.wake.notify_one();
                }
                Some(rx)
            } else {
                None
            }
        };
        match rx {
            Some(rx) => wait(rx).await,
            None => self.call("EVALSHA", &call.evalsha(), timeout).await,
        }
    }

    /// Drops the connection (when up) and connects again.
    pub(super) fn redial(&self) {
        self.shared.lock().redial = true;
        self.shared.wake.notify_one();
    }

    /// Sends `name args..` with the commands queued in this tick and waits for its reply (an
    /// error reply is an `Ok(Frame::Error)`).
    pub(super) async fn call(
        &self,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let rx = {
            let mut s = self.shared.lock();
            if !s.up {
                return Err(CallError::NotSent);
            }
            let first = s.out.is_empty() && s.queued.is_empty();
            resp::encode(&mut s.out, name, args).map_err(CallError::Argument)?;
            let (tx, rx) = Reply::new(timeout);
            let earlier = s.arm(tx.deadline);
            s.waiting.push_back(Waiter::One(tx));
            s.unsent += 1;
            if first || earlier {
                // Later commands of this tick join the same write.
                self.shared.wake.notify_one();
            }
            rx
        };
        wait(rx).await
    }
}

/// A new id for a connection's drop (ids are unique in the process).
fn new_drop() -> u64 {
    static DROPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    DROPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The answer to a call (its deadline is kept by the connection's task, see [`Reply`]).
async fn wait(rx: Answer) -> Result<Frame, CallError> {
    rx.await
        .unwrap_or_else(|_| Err(CallError::Lost("connection task ended".into(), new_drop())))
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
        s.functions = false;
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

/// Connects, serves, and connects again, for as long as the link exists.
// Callers' deadlines and stalls are real time, kept on tokio's timers.
#[allow(clippy::disallowed_methods)]
async fn run(shared: Arc<Shared>, dial: Dial, stall: Duration) {
    let _down = Down(shared.clone());
    let mut delay = Duration::ZERO;
    let mut warned: Option<std::time::Instant> = None;
    loop {
        match dial.connect().await {
            Ok(mut stream) => {
                let functions = match dial.load_library(&mut stream).await {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::debug!(target: "sluice::store::redis", error = %e, "thread connection lost while loading the functions");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).clamp(Duration::from_millis(20), MAX_RETRY);
                        continue;
                    }
                };
                delay = Duration::ZERO;
                warned = None;
                {
                    let mut s = shared.lock();
                    s.up = true;
                    s.functions = functions;
                    s.redial = false;
                    s.send_carried();
                }
                tracing::debug!(target: "sluice::store::redis", "thread connection up");
                let why = serve(&shared, stream, stall).await;
                tracing::debug!(target: "sluice::store::redis", reason = %why, "thread connection closed");
                shared.close(&why);
            }
            Err(e) => {
                if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    warned = Some(crate::clock::monotonic());
                    tracing::warn!(target: "sluice::store::redis", error = %e, "thread connection to redis failed (its requests use the shared pool); retrying");
                } else {
                    tracing::debug!(target: "sluice::store::redis", error = %e, "thread connection to redis failed");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).clamp(Duration::from_millis(20), MAX_RETRY);
    }
}

/// Writes what is queued and hands out replies until the connection fails; returns why.
// Callers' deadlines and stalls are real time, kept on tokio's timers.
#[allow(clippy::disallowed_methods)]
async fn serve(shared: &Shared, mut stream: Stream, stall: Duration) -> String {
    let mut inbox: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut batch: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut check = tokio::time::interval(STALL_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut progress = crate::clock::monotonic();
    // The callers' deadlines: armed at the earliest one the task knows of (see `Reply`).
    let mut expiry = pin!(tokio::time::sleep_until(Instant::now()));
    let mut armed: Option<Instant> = None;
    let mut woken = false;
    loop {
        {
            let mut s = shared.lock();
            if s.redial {
                return "asked to reconnect".into();
            }
            if s.timer != armed {
                armed = s.timer;
                if let Some(t) = armed {
                    expiry.as_mut().reset(t);
                }
            }
            std::mem::swap(&mut s.out, &mut batch);
            // After the commands queued before it, as its waiter comes after theirs. One FCALL
            // of decisions at a time: what is queued while one is out leaves, as one, when its
            // reply is in. Redis then wakes once per round trip rather than once per tick, at
            // most one round trip later for a decision queued just after a write.
            let s = &mut *s;
            if !shared.batch {
                s.queued.write_by_slot(&mut batch, &mut s.waiting);
            } else if !s.fcall_in_flight && s.queued.write(&mut batch, &s.plain, &mut s.waiting) {
                s.fcall_in_flight = true;
            }
            s.unsent = 0;
        }
        if !batch.is_empty() {
            // One write for every command queued since the last: the point of the link.
            // Deadlines still pass while Redis reads nothing (a full socket buffer).
            let mut written = pin!(async {
                stream.write_all(&batch).await?;
                stream.flush().await
            });
            let began = crate::clock::monotonic();
            let written = loop {
                tokio::select! {
                    biased;
                    w = &mut written => break w,
                    // A caller with an earlier deadline than the timer's (the wake-up is
                    // consumed here: the loop goes round once more after the write).
                    _ = shared.wake.notified() => {
                        woken = true;
                        let t = shared.lock().timer;
                        if t != armed {
                            armed = t;
                            if let Some(t) = t {
                                expiry.as_mut().reset(t);
                            }
                        }
                    }
                    _ = &mut expiry, if armed.is_some() => {
                        armed = shared.lock().expire();
                        if let Some(t) = armed {
                            expiry.as_mut().reset(t);
                        }
                    }
                    _ = check.tick() => {
                        if began.elapsed() >= stall {
                            return format!("no write for {stall:?}");
                        }
                    }
                }
            };
            if let Err(e) = written {
                return format!("write failed: {e}");
            }
            batch.clear();
            if std::mem::take(&mut woken) {
                continue;
            }
        }
        tokio::select! {
            biased;
            _ = shared.wake.notified() => {}
            read = read_more(&mut stream, &mut inbox) => match read {
                Ok(0) => return "closed by redis".into(),
                Err(e) => return format!("read failed: {e}"),
                Ok(_) => {
                    progress = crate::clock::monotonic();
                    if let Err(e) = deliver(shared, &mut inbox) {
                        return e;
                    }
                }
            },
            _ = &mut expiry, if armed.is_some() => {
                armed = shared.lock().expire();
                if let Some(t) = armed {
                    expiry.as_mut().reset(t);
                }
            }
            _ = check.tick() => {
                if shared.lock().waiting.is_empty() {
                    progress = crate::clock::monotonic();
                } else if progress.elapsed() >= stall {
                    return format!("no reply for {stall:?}");
                }
            }
        }
    }
}

/// Whether Redis refused the `FCALL` itself, so that it ran nothing and its decisions may go
/// elsewhere (the pool), and sets the connection right: the library is not on the server
/// (`FUNCTION FLUSH`, a server restarted with an old dataset): reconnect, which loads it
/// again; an ACL allows `FUNCTION LOAD` but not `FCALL`: decide by `EVALSHA` on this
/// connection from now on. Each `FCALL` written meanwhile (one with `batch`, several on a
/// Cluster node) is refused alike, and so sent elsewhere: none of them ran.
fn fcall_refused(s: &mut State, f: &Frame) -> bool {
    let Frame::Error(e) = f else { return false };
    if e.contains("Function not found") {
        s.redial = true;
        true
    } else if e.starts_with("NOPERM") {
        tracing::warn!(target: "sluice::store::redis", error = %e, "redis refused FCALL: this connection decides by EVALSHA");
        s.functions = false;
        true
    } else {
        false
    }
}

/// Each decision's answer from a `batch` reply (see `functions.lua`): a fast path's three
/// integers become the reply its script gives (`now flags remaining reset`), `now` being the
/// one it was given or the batch's clock. `None` if the reply is not of that layout.
fn unbatch(items: Vec<Frame>, ws: &[Batched]) -> Option<Vec<Frame>> {
    let mut items = items.into_iter();
    let Some(Frame::Integer(clock)) = items.next() else {
        return None;
    };
    let mut answers = Vec::with_capacity(ws.len());
    for w in ws {
        let first = items.next()?;
        answers.push(match (w.fast, first) {
            (_, e @ Frame::Error(_)) | (None, e) => e,
            (Some(now), Frame::Integer(flags)) => {
                let (Some(Frame::Integer(rem)), Some(Frame::Integer(reset))) =
                    (items.next(), items.next())
                else {
                    return None;
                };
                let now = Frame::Integer(now.unwrap_or(clock));
                let ints = [
                    now,
                    Frame::Integer(flags),
                    Frame::Integer(rem),
                    Frame::Integer(reset),
                ];
                Frame::Array(Some(ints.into()))
            }
            (Some(_), _) => return None,
        });
    }
    items.next().is_none().then_some(answers)
}

/// A fixed_window script's answer (`now flags remaining reset`) for a key a plain take may
/// decide next: Redis' clock, and the key if charged.
fn learn(plain: &mut Plain, fingerprint: u64, window: i64, answer: &Frame) {
    let Frame::Array(Some(a)) = answer else {
        return;
    };
    if let [Frame::Integer(now), Frame::Integer(flags), _, Frame::Integer(reset)] = a[..] {
        plain.saw_clock(now);
        if flags & 2 != 0 {
            plain.learn(fingerprint, window, now, reset);
        }
    }
}

async fn read_more(stream: &mut Stream, inbox: &mut Vec<u8>) -> std::io::Result<usize> {
    inbox.reserve(8 * 1024);
    stream.read_buf(inbox).await
}

/// Hands every whole reply in `inbox` to its caller, in order.
fn deliver(shared: &Shared, inbox: &mut Vec<u8>) -> Result<(), String> {
    let mut at = 0;
    let mut s = shared.lock();
    while let Some((frame, used)) = resp::parse(&inbox[at..]).map_err(|e| e.to_string())? {
        at += used;
        // A caller that gave up (timeout) is simply gone.
        match s.waiting.pop_front() {
            Some(Waiter::One(mut w) | Waiter::Mend(mut w, ..)) => w.send(Ok(frame)),
            Some(Waiter::Carried(_)) => {}
            Some(Waiter::Fcall(mut w, plain)) => {
                s.fcall_in_flight = false;
                if fcall_refused(&mut s, &frame) {
                    w.send(Err(CallError::NotSent));
                } else {
                    if let Some((fp, window)) = plain {
                        learn(&mut s.plain, fp, window, &frame);
                    }
                    w.send(Ok(frame));
                }
            }
            Some(Waiter::Time) => {
                // Not a clock (an error): the write's plain takes are decided again.
                s.plain.saw_time(&frame);
            }
            Some(Waiter::Plain {
                mut reply,
                take,
                last,
            }) => {
                if last {
                    s.fcall_in_flight = false;
                }
                let Frame::Integer(c) = frame else {
                    // Refused (a replica, out of memory): nothing ran.
                    reply.send(Ok(frame));
                    continue;
                };
                let s = &mut *s;
                match s.plain.decide(&take, c) {
                    Outcome::Answer(a) => reply.send(Ok(a)),
                    // Sent even when its caller has gone: the take's hit is in Redis.
                    Outcome::Mend(what) => {
                        Plain::encode_mend(&mut s.out, LIBRARY.mend(), &take, what);
                        s.waiting.push_back(Waiter::Mend(reply, take, what));
                        s.unsent += 1;
                    }
                }
            }
            Some(Waiter::Batch(ws)) => match frame {
                Frame::Error(_) if fcall_refused(&mut s, &frame) => {
                    s.fcall_in_flight = false;
                    for mut w in ws {
                        w.reply.send(Err(CallError::NotSent));
                    }
                }
                // The call as a whole failed (a replica, a script killed): each decision
                // learns why.
                Frame::Error(e) => {
                    s.fcall_in_flight = false;
                    for mut w in ws {
                        w.reply.send(Ok(Frame::Error(e.clone())));
                    }
                }
                frame => {
                    let n = ws.len();
                    let answers = match frame {
                        Frame::Array(Some(items)) => unbatch(items, &ws),
                        _ => None,
                    }
                    .ok_or_else(|| format!("a batch of {n} answered out of its layout"))?;
                    s.fcall_in_flight = false;
                    for (mut w, a) in ws.into_iter().zip(answers) {
                        if let Some((fp, window)) = w.plain {
                            learn(&mut s.plain, fp, window, &a);
                        }
                        w.reply.send(Ok(a));
                    }
                }
            },
            None => return Err("a reply that no command asked for".into()),
        }
    }
    drop(s);
    inbox.drain(..at);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands encoded in `out`, each as its arguments' text.
    fn commands(out: &[u8]) -> Vec<Vec<String>> {
        let mut commands = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let (Frame::Array(Some(parts)), used) = resp::parse(&out[at..]).unwrap().unwrap()
            else {
                panic!("not a command");
            };
            at += used;
            let text = parts
                .iter()
                .map(|f| match f {
                    Frame::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("{other:?}"),
                })
                .collect();
            commands.push(text);
        }
        commands
    }

    /// A fast fixed_window decision of one hit on `key` (60 s windows).
    fn fixed_window(key: &'static str, now: Option<i64>, limit: i64) -> Call<'static> {
        Call::Fast(FastCall {
            id: ScriptId::FixedWindow,
            key: key.as_bytes(),
            now,
            ints: [limit, 60_000_000, 1, 0, 0],
            n: 4,
        })
    }

    fn batched(fast: Option<Option<i64>>) -> (Batched, Answer) {
        let (reply, rx) = Reply::new(Duration::from_secs(60));
        (
            Batched {
                reply,
                fast,
                plain: None,
            },
            rx,
        )
    }

    #[test]
    fn a_batch_reply_is_split_into_each_decisions_own_reply() {
        use Frame::{Array, Error, Integer};
        let ws: Vec<Batched> = [Some(None), Some(Some(7)), None, Some(None)]
            .into_iter()
            .map(|f| batched(f).0)
            .collect();
        let whole = Array(Some(vec![Integer(100), Integer(1), Integer(2)]));
        let items = vec![
            Integer(42),
            // A fast path on the Redis clock, one given its own now, decide.lua's whole
            // reply, and a fast path's error.
            Integer(3),
            Integer(9),
            Integer(60),
            Integer(1),
            Integer(8),
            Integer(61),
            whole.clone(),
            Error("WRONGTYPE".into()),
        ];
        let four = |a, b, c, d| Array(Some(vec![Integer(a), Integer(b), Integer(c), Integer(d)]));
        assert_eq!(
            unbatch(items, &ws),
            Some(vec![
                four(42, 3, 9, 60),
                four(7, 1, 8, 61),
                whole,
                Error("WRONGTYPE".into())
            ])
        );
    }

    #[test]
    fn a_fast_decision_with_the_values_of_the_one_before_travels_as_a_repeat() {
        let mut q = Queued::default();
        let fw = fixed_window;
        let decide = Call::Whole(vec![
            Value::from("sha"),
            Value::Integer(1),
            Value::from("x"),
            Value::from("all"),
        ]);
        let mut waiting = Vec::new();
        let mut push = |call: &Call<'_>| {
            let (reply, rx) = Reply::new(Duration::from_secs(60));
            waiting.push(rx);
            q.push(call, reply).unwrap();
        };
        push(&fw("a", None, 10));
        push(&fw("b", None, 10)); // a repeat
        push(&decide);
        push(&fw("c", None, 10)); // a repeat of a's: decide.lua between
        push(&fw("d", None, 11));
        push(&fw("e", Some(7), 11)); // its own now
        let (mut out, mut waiting) = (Vec::new(), VecDeque::new());
        assert!(q.write(&mut out, &Plain::default(), &mut waiting));
        let [text] = &commands(&out)[..] else {
            panic!("not one command");
        };
        let code = ScriptId::FixedWindow.code().to_string();
        let d = ScriptId::Decide.code().to_string();
        // FCALL batch 6 keys.., 6 decisions, then each one's code and values, or `=`.
        let tail: Vec<&str> = text[3 + 6..].iter().map(String::as_str).collect();
        let want = [
            "6", &code, "", "10", "60000000", "1", "0", "=", &d, "1", "1", "all", "=", &code, "",
            "11", "60000000", "1", "0", &code, "7", "11", "60000000", "1", "0",
        ];
        assert_eq!(tail, want);
        assert_eq!(text[2], "6");
        assert_eq!(&text[3..9], ["a", "b", "x", "c", "d", "e"]);
    }

    #[test]
    fn a_take_of_a_key_charged_in_this_window_goes_plain_after_one_time() {
        let shared = Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            batch: true,
        };
        let now = 1_800_000_000_123_456;
        let start = now - now % 60_000_000;
        let mut rxs = Vec::new();
        {
            let mut s = shared.lock();
            s.plain.saw_clock(now);
            for key in ["a", "b"] {
                let mut bulk = Vec::new();
                resp::bulk(&mut bulk, key.as_bytes());
                s.plain.learn(
                    Plain::fingerprint(&bulk),
                    60_000_000,
                    now,
                    start + 60_000_000 - now,
                );
            }
            // `a` and `b` charged in this window; `c` not seen; `d` of two hits.
            for (key, hits) in [("a", 1), ("b", 1), ("c", 1), ("d", 2)] {
                let (reply, rx) = Reply::new(Duration::from_secs(60));
                rxs.push(rx);
                let mut call = fixed_window(key, None, 3);
                if let Call::Fast(f) = &mut call {
                    f.ints[2] = hits;
                }
                s.queued.push(&call, reply).unwrap();
            }
            let s = &mut *s;
            let mut out = Vec::new();
            assert!(s.queued.write(&mut out, &s.plain, &mut s.waiting));
            let ws = start.to_string();
            let cmds = commands(&out);
            assert_eq!(cmds[0], ["TIME"]);
            assert_eq!(cmds[1], ["HINCRBY", "a", &ws, "1"]);
            assert_eq!(cmds[2], ["HINCRBY", "b", &ws, "1"]);
            assert_eq!(cmds[3][..2], ["FCALL", LIBRARY.batch()]);
            assert_eq!(cmds.len(), 4);
        }
        // TIME, then: `a` rejected (its count 4 over 3), `b` on a field it found absent.
        let secs = now / 1_000_000;
        let us = now % 1_000_000;
        let mut inbox = format!(
            "*2\r\n${}\r\n{secs}\r\n${}\r\n{us}\r\n:5\r\n:1\r\n",
            secs.to_string().len(),
            us.to_string().len()
        )
        .into_bytes();
        deliver(&shared, &mut inbox).unwrap();
        assert!(inbox.is_empty());
        assert!(rxs[0].try_recv().is_err(), "a waits for its retake");
        assert!(rxs[1].try_recv().is_err(), "b waits for its mend");
        let s = shared.lock();
        let ws = start.to_string();
        assert_eq!(
            commands(&s.out),
            vec![
                vec![
                    "FCALL",
                    LIBRARY.mend(),
                    "1",
                    "a",
                    "retake",
                    &ws,
                    "3",
                    "60000000"
                ],
                vec![
                    "FCALL",
                    LIBRARY.mend(),
                    "1",
                    "b",
                    "settle",
                    &ws,
                    "3",
                    "60000000"
                ],
            ]
        );
        assert_eq!(s.unsent, 2);
        // Still waiting: the batch (c and d), then the two mends.
        assert!(matches!(
            s.waiting.iter().collect::<Vec<_>>()[..],
            [Waiter::Batch(_), Waiter::Mend(..), Waiter::Mend(..)]
        ));
        drop(s);
        // The connection drops before the mends leave: their takes' hits are in Redis, so
        // their callers learn that their calls may have run (not "not sent": deciding them
        // again elsewhere would count twice).
        shared.close("killed");
        for rx in &mut rxs[..2] {
            assert!(matches!(rx.try_recv(), Ok(Err(CallError::Lost(_, _)))));
        }
        // `b`'s settle (the key's expiry) goes on the next connection, before anything else;
        // `a`'s give-back does not (its hit stays counted).
        let mut s = shared.lock();
        s.functions = true;
        s.send_carried();
        assert_eq!(
            commands(&s.out),
            vec![vec![
                "FCALL",
                LIBRARY.mend(),
                "1",
                "b",
                "forget",
                &ws,
                "3",
                "60000000"
            ]]
        );
        assert!(matches!(
            s.waiting.iter().collect::<Vec<_>>()[..],
            [Waiter::Carried(_)]
        ));
        assert!(s.carry.is_empty());
    }

    #[test]
    fn on_a_cluster_node_the_decisions_of_one_slot_share_an_fcall() {
        let mut q = Queued {
            by_slot: true,
            ..Queued::default()
        };
        let fw = |key| fixed_window(key, None, 10);
        // `{a}x` is in `a`'s slot; `b` and `c` each in another.
        let keys = ["a", "b", "c", "{a}x"];
        let mut rxs = Vec::new();
        for key in keys {
            let (reply, rx) = Reply::new(Duration::from_secs(60));
            rxs.push(rx);
            q.push(&fw(key), reply).unwrap();
        }
        // A caller gone meanwhile is left out.
        drop(rxs.remove(1));
        let (mut out, mut waiting) = (Vec::new(), VecDeque::new());
        q.write_by_slot(&mut out, &mut waiting);
        assert!(q.is_empty());
        assert!(
            matches!(waiting.make_contiguous(), [Waiter::Batch(two), Waiter::Fcall(..)] if two.len() == 2)
        );
        let code = ScriptId::FixedWindow.code().to_string();
        let (batch, one) = (LIBRARY.batch(), LIBRARY.function(ScriptId::FixedWindow));
        let want: [Vec<&str>; 2] = [
            vec![
                "FCALL", batch, "2", "a", "{a}x", "2", &code, "", "10", "60000000", "1", "0", "=",
            ],
            vec!["FCALL", one, "1", "c", "", "10", "60000000", "1", "0"],
        ];
        assert_eq!(commands(&out), want);
    }

    #[test]
    fn a_batch_reply_out_of_its_layout_is_refused() {
        use Frame::{Array, Integer};
        let ws = vec![batched(Some(None)).0];
        // Too short, too long, no clock, and a fast path answered as a whole.
        for items in [
            vec![Integer(1), Integer(3), Integer(9)],
            vec![Integer(1), Integer(3), Integer(9), Integer(60), Integer(0)],
            vec![Integer(3), Integer(9), Integer(60)],
            vec![Integer(1), Array(Some(vec![]))],
        ] {
            assert_eq!(unbatch(items.clone(), &ws), None, "{items:?}");
        }
    }

    // Callers' deadlines and stalls are real time, kept on tokio's timers.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn callers_past_their_deadline_are_timed_out_and_their_decisions_not_sent() {
        let mut s = State::default();
        let fw = |key| fixed_window(key, None, 10);
        // Written and waiting: one past its deadline, one not.
        let (gone, mut gone_rx) = Reply::new(Duration::ZERO);
        let (late, mut late_rx) = Reply::new(Duration::from_secs(60));
        assert!(s.arm(gone.deadline));
        assert!(!s.arm(late.deadline), "a later deadline keeps the timer");
        s.waiting.push_back(Waiter::Fcall(gone, None));
        s.waiting.push_back(Waiter::Batch(vec![Batched {
            reply: late,
            fast: Some(None),
            plain: None,
        }]));
        // Queued, not written: past its deadline, so never sent.
        let (queued, mut queued_rx) = Reply::new(Duration::ZERO);
        s.queued.push(&fw("a"), queued).unwrap();
        let next = s.expire();
        assert!(next.is_some_and(|n| n > Instant::now() + Duration::from_secs(50)));
        assert_eq!(s.timer, next);
        assert!(matches!(gone_rx.try_recv(), Ok(Err(CallError::Timeout))));
        assert!(matches!(queued_rx.try_recv(), Ok(Err(CallError::Timeout))));
        assert!(late_rx.try_recv().is_err(), "still waiting");
        let mut out = Vec::new();
        let mut waiting = VecDeque::new();
        assert!(!s.queued.write(&mut out, &s.plain, &mut waiting));
        assert!(out.is_empty(), "a timed-out decision is not sent");
        // Its reply, when it comes, goes to no one; the other caller gets its own.
        let Some(Waiter::Fcall(mut r, _)) = s.waiting.pop_front() else {
            panic!("not the FCALL's waiter");
        };
        r.send(Ok(Frame::Integer(1)));
        let Some(Waiter::Batch(mut rs)) = s.waiting.pop_front() else {
            panic!("not the batch");
        };
        rs[0].reply.send(Ok(Frame::Integer(2)));
        assert_eq!(late_rx.try_recv().unwrap().unwrap(), Frame::Integer(2));
    }
}
