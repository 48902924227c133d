//! The Redis store: every decision is one `FCALL` of sluice's Function library ([`library`]),
//! run atomically by Redis, shared by any number of sluice instances. Every connection loads
//! the library when it opens: Redis 7.0+ or Valkey 7.2+ (and an ACL allowing `FUNCTION LOAD`
//! and `FCALL`), one copy of the scripts. A serving thread's own connection sends the
//! decisions of several requests in one `FCALL` (per hash slot on a Cluster node).
//!
//! # Guarantees per topology
//!
//! * **Standalone and Sentinel**: one script call carries every check of the request (an
//!   `FCALL` may carry other requests too, each decided whole, in turn); the script
//!   applies the [`batch`](super::batch) policy exactly (the same verdicts as the in-memory
//!   store given the same states and time), atomically: no other request interleaves.
//! * **Cluster**: each descriptor's keys share one hash slot (the `{...}` tag of
//!   [`key`](super::key)), but different descriptors usually live on different slots and
//!   nodes, and a script can touch only one slot. So the checks are split by slot and each
//!   part runs as one script call (concurrently: pipelined per node, nodes in parallel). Each
//!   part is atomic and decided as if the descriptors elsewhere pass ("optimistic"). When the
//!   request turns out rejected by a descriptor elsewhere, the hits charged optimistically are
//!   given back by a second script call per slot (the `undo` mode of the same script): a second
//!   round trip only on that path. Consequences, and only these: (1) between the two round
//!   trips, other requests see the optimistic charge and may be rejected early, never
//!   admitted wrongly; (2) the verdicts of checks given back report the allowance after the
//!   refund (with no concurrent request, exactly what one node reports); (3) if the window
//!   ends between the two round trips the refund lands in the new window, where it floors at
//!   zero; (4) a check charged anyway (`charge: always`, a refund) that shares its key with a
//!   check given back in the same request reports a verdict computed on top of the
//!   optimistic charge (the stored count is right after the refund); (5) if a part fails, the
//!   request fails (the failure policy answers) and the charges of the parts that answered
//!   are given back in the background, best effort; (6) if giving back fails, the hits stay
//!   charged until their window ends (over-counting, never under) and the verdicts say
//!   `charged`. Checks charged anyway are otherwise exact, admission (quota mode included)
//!   is computed over all descriptors exactly as on one node, and if every check lands in
//!   one slot (a single descriptor, or a domain with `redis_hash_tag: domain`, whose keys
//!   share the domain's tag) the decision is exact as on one node.
//! * **Algorithms**: all of them, each a Lua port of its `src/algorithm` function in the one
//!   script, deciding bit for bit as the in-memory store (the `distinct` HyperLogLog included:
//!   our estimator over our registers, not Redis' `PFCOUNT`). Each state is one string per
//!   key (layouts in ALGORITHMS.md, "On Redis"). Calendar windows are computed here from the tz
//!   database and passed as bounds; with the Redis clock, the windows around sluice's clock
//!   are passed and the script picks the one holding Redis' time. The Cluster `undo` of a
//!   check is the algorithm's refund of its hits, which restores exactly what one node would
//!   hold, except: a `distinct` value stays counted (a refund of distinct changes nothing; the
//!   verdict says `charged`), and a `sliding_log` whose entries lie in the future (clocks
//!   skewed) drops those newest entries rather than the ones just added. A HyperLogLog
//!   `distinct` (limits above 1000) reads 16 KiB per call and writes it per new value (on a
//!   loaded 2-core box, about 0.2 ms of Redis CPU per call against 0.08 ms for a
//!   fixed_window); the other states are a few hundred bytes (a sliding_log up to about 10 KB).
//! * **Every topology**: keys expire by themselves, so memory is bounded by the active keys:
//!   `SET .. PX` with the state's expiry taken relative to the time of the decision (equal to
//!   `PEXPIREAT expires_at` with the Redis clock, and unlike it still right when sluice's
//!   clock and Redis' differ), plus one second of grace for instances whose clocks run behind.
//!   A call that times out may still run in Redis later (its charge stands, unseen). Hit counts and limits are clamped to 2^53 - 1
//!   (Lua numbers are doubles); below that the arithmetic is identical to Rust's.
//! * **Connections**: one client, sluice's own ([`link`]): `--redis-pool-size` shared links
//!   ([`link::LinkSet`]) on the runtime that connected the store, for records, probes and
//!   the decisions of threads without a link of their own; and one link
//!   per gRPC serving thread ([`RedisStore::attach_thread`]) driven by that thread's runtime,
//!   so a request crosses no thread, and the decisions queued while its previous `FCALL` was
//!   out leave as one `FCALL`. A thread whose own link is not up uses the shared links, and
//!   so does a command that never left it.
//!   The breaker, readiness and status are the store's, over all of them. Cluster: sluice routes by slot
//!   itself ([`nodes`]): shared links and a breaker per primary, shared by every thread, so a dead
//!   primary or a reshard costs only the slots concerned (`cluster/redirect.rs` follows `MOVED`, `ASK`
//!   and `TRYAGAIN`: a redirected call did not run, so it is sent again); and a serving
//!   thread's own connection per primary ([`Inner::node_link`], opened on its first call
//!   there), on which the calls of a tick leave in one write, one `FCALL` per hash slot (a
//!   call may touch one slot only), with the node's shared links for what it cannot carry (not up yet, a
//!   request redirected by `ASK` or `TRYAGAIN`, which leaves its batch).
//! * **Clock**: by default the script reads Redis' `TIME`, so instances with skewed clocks
//!   agree (in Cluster, each node's clock decides its own keys). `--clock local` passes
//!   sluice's clock instead.
//! * **Failures**: a call that fails or exceeds `--redis-command-timeout` (or nine tenths of
//!   what is left of the request's gRPC deadline, when less: [`Deadline`])
//!   is an error with its [`ErrorKind`] (the caller's failure policy decides); a script call is never retried on another connection,
//!   since it may have run. A function not found (Redis restarted or failed over without its
//!   data, `FUNCTION FLUSH`) loads the library again there and retries once. A server that
//!   refuses the library (before Redis 7, or an ACL without `FUNCTION`) keeps every link
//!   down, with the reason logged: decisions fail as an outage. A [`breaker`] (one per Cluster primary)
//!   stops calling Redis after consecutive outage failures ([`ErrorKind::is_outage`]: not
//!   script errors; client-side failures are outages, see [`errors`]) and the
//!   monitor PINGs it until it answers again. Readiness ([`RedisStore::ready`]) waits for
//!   a shared link up, the library loaded (Cluster: on every slot's primary).

pub mod breaker;
mod calls;
mod cluster;
pub(crate) mod connect;
mod errors;
pub mod library;
mod link;
mod monitor;
mod pipelined;
mod plain;
mod records;
pub mod script;

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::breaker::{record, Breaker, BreakerOptions};
use self::calls::{fcall, MIN_TIMEOUT, REJECTED};
pub(crate) use self::cluster::nodes;
pub use self::connect::{ConnectOptions, RedisSettingsError, Topology};
pub use self::dial::CLIENT_NAME;
use self::errors::{breaker_open, error, from_call, from_reply};
use self::link::dial::{self, Dial};
pub use self::link::resp;
use self::link::{CallError, Link, LinkSet};
use self::nodes::Nodes;
pub use self::pipelined::PipelinedConnection;
use self::resp::{Frame, Value};
use self::script::{Answer, Scope};
use super::batch::admission;
use super::{Charge, Check, Deadline, ErrorKind, Store, StoreError, Verdict};
use crate::model::Micros;
pub use crate::store::slot_tag::slot_of as key_slot;
use crate::store::slot_tag::slot_of;

const BACKEND: &str = "redis";

/// Whose clock decides: a word of the rule vocabulary.
pub use crate::rules::policy::ClockSource;

/// Everything the Redis store is configured with.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub connect: ConnectOptions,
    /// The longest one round trip may take; then the call fails.
    pub command_timeout: Duration,
    pub clock: ClockSource,
    pub breaker: BreakerOptions,
}

/// What metrics and health report about the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisStatus {
    /// At least one shared link is up (Cluster: to some primary).
    pub connected: bool,
    /// The circuit breaker is open: calls fail at once.
    pub breaker_open: bool,
}

/// A Redis-backed [`Store`]; cheap to clone (clones share the connections).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

/// How the store reaches Redis.
enum Links {
    /// Standalone and Sentinel: the shared links (and the serving threads' own).
    Shared(LinkSet),
    /// Cluster: shared links and a breaker per primary, routed by slot here ([`nodes`]).
    Cluster(Box<Nodes>),
}

struct Inner {
    links: Links,
    /// To open the serving threads' own connections ([`RedisStore::attach_thread`]);
    /// `None` in Cluster mode.
    dial: Option<Dial>,
    /// How long an own connection may leave commands unanswered before it is replaced.
    stall: Duration,
    /// The serving threads' links' tasks (aborted with the store, like the shared links').
    threads: Mutex<Vec<JoinHandle<()>>>,
    topology: Topology,
    command_timeout: Duration,
    clock: ClockSource,
    /// Standalone and Sentinel's breaker (a Cluster has one per primary).
    breaker: Breaker,
    breaker_opts: BreakerOptions,
    /// Turns true once a shared link is up (connected, the library loaded).
    ready: watch::Receiver<bool>,
    monitor: OnceLock<JoinHandle<()>>,
    /// The shared links' tasks.
    connections: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The connection tasks would otherwise reconnect forever.
        if let Some(m) = self.monitor.get() {
            m.abort();
        }
        for c in &self.connections {
            c.abort();
        }
        abort_all(&mut self.threads);
    }
}

/// Aborts the serving threads' connection tasks (each on its thread's runtime).
fn abort_all(tasks: &mut Mutex<Vec<JoinHandle<()>>>) {
    for t in tasks.get_mut().unwrap_or_else(|e| e.into_inner()).iter() {
        t.abort();
    }
}

thread_local! {
    /// This thread's own connections, one per store attached to it (keyed by the store's
    /// address): a link's task runs on the runtime that started it, so a serving thread that
    /// uses its own link sends and receives without waking another thread.
    static THREAD_LINKS: RefCell<Vec<(Weak<Inner>, Link)>> = const { RefCell::new(Vec::new()) };
    /// Cluster stores attached to this thread: it opens its own connection to each of their
    /// nodes on its first call there ([`Inner::node_link`]).
    static CLUSTER_THREADS: RefCell<Vec<Weak<Inner>>> = const { RefCell::new(Vec::new()) };
    /// This thread's own connections to Cluster nodes, keyed by the node (a node dropped from
    /// the slot map aborts its connections' tasks).
    static NODE_LINKS: RefCell<Vec<(Weak<nodes::Node>, Link)>> = const { RefCell::new(Vec::new()) };
}

/// The decision command (what `script::fcall`'s arguments follow).
const FCALL: &str = "FCALL";

impl RedisStore {
    /// Starts connecting in the background and returns at once: Redis being down is not an
    /// error here (calls fail, per the breaker, until it is up); an invalid configuration is.
    /// Must be called within a Tokio runtime.
    pub fn connect(opts: RedisOptions) -> Result<RedisStore, RedisSettingsError> {
        let (_, topology) = connect::config(&opts.connect)?;
        let dial = Dial::new(&opts.connect)?;
        // A stalled server is noticed and its connection replaced after this long.
        let stall = stall(&opts.connect);
        let (links, connections) = match &dial {
            None => (
                Links::Cluster(Box::new(Nodes::new(&opts.connect, opts.breaker)?)),
                Vec::new(),
            ),
            Some(dial) => {
                let (set, tasks) = LinkSet::start(dial, opts.connect.pool_size, stall, true);
                (Links::Shared(set), tasks)
            }
        };
        let (ready_tx, ready) = watch::channel(false);
        let inner = Arc::new(Inner {
            links,
            dial,
            stall,
            threads: Mutex::new(Vec::new()),
            topology,
            command_timeout: opts.command_timeout,
            clock: opts.clock,
            breaker: Breaker::new(opts.breaker),
            breaker_opts: opts.breaker,
            ready,
            monitor: OnceLock::new(),
            connections,
        });
        // Spawned once the store exists: the task holds it weakly and ends with it.
        let monitor = tokio::spawn(monitor::run(Arc::downgrade(&inner), ready_tx));
        let _ = inner.monitor.set(monitor);
        Ok(RedisStore { inner })
    }

    /// Gives the calling thread its own connection ([`link`]: our RESP client, which writes
    /// the commands of one scheduler tick with one write), driven by the runtime it runs, for
    /// the requests it decides: a serving thread of `--grpc-threads`. Requests on other
    /// threads, and on this one while its connection is not up, use the shared links. The
    /// breaker, readiness and status stay the store's as a whole. Must be called within the
    /// thread's (current-thread) Tokio runtime; a second call on one thread does nothing.
    pub fn attach_thread(&self) -> Result<(), RedisSettingsError> {
        let id = Arc::as_ptr(&self.inner);
        // Cluster: a connection per node, opened on the thread's first call there (the nodes
        // are learnt from the slot map, and change with it).
        let Some(dial) = &self.inner.dial else {
            CLUSTER_THREADS.with(|t| {
                let mut t = t.borrow_mut();
                t.retain(|s| s.strong_count() > 0);
                if !t.iter().any(|s| s.as_ptr() == id) {
                    t.push(Arc::downgrade(&self.inner));
                }
            });
            return Ok(());
        };
        let attached = THREAD_LINKS.with(|t| {
            let mut t = t.borrow_mut();
            // Links of stores dropped meanwhile (their tasks ended with them).
            t.retain(|(s, _)| s.strong_count() > 0);
            t.iter().any(|(s, _)| s.as_ptr() == id)
        });
        if attached {
            return Ok(());
        }
        let (link, task) = Link::start(dial.clone(), self.inner.stall, true);
        self.inner
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        THREAD_LINKS.with(|t| t.borrow_mut().push((Arc::downgrade(&self.inner), link)));
        Ok(())
    }

    /// Waits until the store can answer: a shared link connected with the library loaded
    /// (Cluster: every slot's primary). Health waits for it before saying SERVING.
    pub async fn ready(&self) {
        let mut rx = self.inner.ready.clone();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Whether [`Self::ready`] has returned (it stays so).
    pub fn is_ready(&self) -> bool {
        *self.inner.ready.borrow()
    }

    pub fn topology(&self) -> Topology {
        self.inner.topology
    }

    /// Connection and breaker state, for metrics and tests.
    pub fn status(&self) -> RedisStatus {
        match &self.inner.links {
            Links::Shared(set) => RedisStatus {
                // The shared links only: they are every thread's fallback, so "connected"
                // must mean a request on any thread finds a connection (a serving thread's
                // own link may be up while another thread's is not yet).
                connected: set.is_up(),
                breaker_open: self.inner.breaker.is_open(),
            },
            // Cluster: connected when some primary is; "open" when some primary's is (its
            // slots fail at once, the others' do not).
            Links::Cluster(nodes) => {
                let all = nodes.all();
                RedisStatus {
                    connected: all.iter().any(|n| n.links.is_up()),
                    breaker_open: all.iter().any(|n| n.breaker.is_open()),
                }
            }
        }
    }

    /// Decides and charges `checks` (see the module docs for the guarantees).
    pub async fn decide_checks(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> Result<Vec<Verdict>, StoreError> {
        let inner = &*self.inner;
        let now = When {
            script: match inner.clock {
                ClockSource::Redis => None,
                ClockSource::Local => Some(now),
            },
            local: now,
            deadline,
        };
        let timeout = inner.timeout(deadline);
        match &inner.links {
            // Boxed, as the shared links' path below: each is far larger than the own
            // link's, and a request's future is moved (copied) several times on its way to
            // the runtime.
            Links::Cluster(nodes) => {
                Box::pin(inner.decide_cluster(nodes, checks, now, timeout)).await
            }
            Links::Shared(set) => {
                if !inner.breaker.allows() {
                    return Err(breaker_open());
                }
                let on_link = match inner.own_link() {
                    Some(link) => inner.decide_on_link(&link, checks, now, timeout).await,
                    None => None,
                };
                // Told to the breaker there (a drop counts once, not once per call).
                if let Some(r) = on_link {
                    return r;
                }
                // No own link up, or the command never left it: a shared link, one
                // `FCALL` per request.
                let result = Box::pin(inner.run(set.next(), checks, Scope::All, now, timeout))
                    .await
                    .map(script::Reply::verdicts);
                record(&inner.breaker, &result);
                result
            }
        }
    }
}

/// The time of a decision: what the script is given (`None`: it reads Redis' clock) and
/// sluice's own, from which calendar windows are computed when the script reads its own;
/// and the request's deadline.
#[derive(Clone, Copy, Debug)]
struct When {
    script: Option<Micros>,
    local: Micros,
    deadline: Deadline,
}

impl When {
    fn at(t: Micros, deadline: Deadline) -> When {
        When {
            script: Some(t),
            local: t,
            deadline,
        }
    }
}

impl Inner {
    /// The timeout of this request's round trips: `--redis-command-timeout`, or less when the
    /// request's deadline leaves less (see [`Deadline::budget`]).
    fn timeout(&self, deadline: Deadline) -> Duration {
        match deadline.budget() {
            // Never zero: a call must have some time to be answered.
            Some(b) => self.command_timeout.min(b).max(MIN_TIMEOUT),
            None => self.command_timeout,
        }
    }
}

/// How long a link may leave commands unanswered before its connection is replaced.
fn stall(opts: &ConnectOptions) -> Duration {
    opts.connect_timeout.max(Duration::from_secs(1))
}

impl Store for RedisStore {
    fn decide(
        &self,
        checks: &[Check<'_>],
        now: Micros,
        deadline: Deadline,
    ) -> impl std::future::Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        self.decide_checks(checks, now, deadline)
    }
}
