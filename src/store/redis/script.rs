//! The decision scripts (`decide.lua`, `fixed_window.lua`, `sliding_log.lua`): which one a
//! call runs, its argument layout and its reply.
//!
//! `decide.lua` decides every check it is given atomically; its layout is documented at the
//! top of the script and written only here. Adding an algorithm means a Lua port next to the
//! others in the script and a code in [`algorithm_code`]. A request of one check of some
//! algorithms runs a script of that algorithm alone instead ([`fast_path`]): the same decision
//! on the same state for a fraction of the Redis CPU (fixed_window: one HINCRBY; sliding_log:
//! its function's O(log n) sorted-set commands without `decide.lua`'s per-call setup).
//! `sliding_log.lua` goes before `decide.lua` in [`LUA`]: the general policy decides a log with
//! its functions (`log_evaluate`, O(log n) too), and the short layout (several plain takes)
//! calls its fast-path function for a sliding_log beside fixed windows.
//!
//! A check's boolean options (refund, charge always, dry run, quota) travel as one integer of
//! [`flag`] bits, in every layout: a new option is a new bit, and no argument moves.

use std::borrow::Borrow;
use std::sync::LazyLock;

use fred::bytes::Bytes;
use fred::types::Value;

use crate::algorithm::{Algorithm, Limit};
use crate::model::Micros;
use crate::store::{Charge, Check, ErrorKind, StoreError, Verdict};

/// The Lua source; its SHA-1 names it in `EVALSHA`. `sliding_log.lua`'s definitions are
/// `decide.lua`'s state of a log (its per-call part is `fast_main`'s, not included here).
pub const LUA: &str = concat!(
    include_str!("expiry.lua"),
    include_str!("division.lua"),
    include_str!("sliding_log.lua"),
    include_str!("decide.lua")
);

/// The fast paths' files: each defines its decision function, `NAME(key, now, ARGV[2..6])`
/// answering flags, remaining and reset (fixed_window; sliding_log; token_bucket, leaky_bucket
/// and gcra, one meter; sliding_window). `expiry.lua` (the grace past a key's state, `ttl_ms`
/// and `expire`) goes before each of them and before `decide.lua`, `division.lua` (exact
/// integer division) before those that divide, and before `decide.lua`.
const FIXED_WINDOW_FN: &str = concat!(include_str!("expiry.lua"), include_str!("fixed_window.lua"));
const SLIDING_LOG_FN: &str = concat!(include_str!("expiry.lua"), include_str!("sliding_log.lua"));
const BUCKET_FN: &str = concat!(
    include_str!("expiry.lua"),
    include_str!("division.lua"),
    include_str!("bucket.lua")
);
const SLIDING_WINDOW_FN: &str = concat!(
    include_str!("expiry.lua"),
    include_str!("division.lua"),
    include_str!("sliding_window.lua")
);

/// A fast path's per-call part, the same for all: `now` from `ARGV[1]` ('' reads the Redis
/// clock), then its function on `KEYS[1]` and `ARGV[2..6]`, answered as
/// `{ now, flags, remaining, reset }`. It ends the fast path's script, and the function
/// library (`library.rs`) wraps it as the fast path's own function.
pub fn fast_main(name: &str) -> String {
    format!(
        "local now = tonumber(ARGV[1])\n\
         if now == nil then\n  local t = redis.call('TIME')\n  \
         now = tonumber(t[1]) * 1000000 + tonumber(t[2])\nend\n\
         return {{ now, {name}(KEYS[1], now, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) }}\n"
    )
}

/// Each script's source (indexed by [`ScriptId::code`] - 1) and its SHA-1, made once.
static SOURCES: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    ScriptId::ALL
        .iter()
        .map(|id| {
            let source = match id.argc() {
                None => LUA.to_string(),
                Some(_) => format!(
                    "{}\n-- sluice:main\n{}",
                    id.definitions(),
                    fast_main(id.name())
                ),
            };
            let sha = Value::from(fred::util::sha1_hash(&source));
            (source, sha)
        })
        .collect()
});

/// Every script a decision may call: each is loaded (`SCRIPT LOAD`) wherever one is.
pub fn scripts() -> impl Iterator<Item = &'static str> {
    ScriptId::ALL.iter().map(|id| id.lua())
}

/// Which script a call runs: its code in the function library's `batch`, its function's
/// name there, and where in its `ARGV` it reads `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptId {
    Decide,
    FixedWindow,
    SlidingLog,
    Bucket,
    SlidingWindow,
}

impl ScriptId {
    pub const ALL: [ScriptId; 5] = [
        ScriptId::Decide,
        ScriptId::FixedWindow,
        ScriptId::SlidingLog,
        ScriptId::Bucket,
        ScriptId::SlidingWindow,
    ];

    /// 1-based, as Lua tables: the index into [`Self::ALL`] plus one.
    pub fn code(self) -> u8 {
        match self {
            ScriptId::Decide => 1,
            ScriptId::FixedWindow => 2,
            ScriptId::SlidingLog => 3,
            ScriptId::Bucket => 4,
            ScriptId::SlidingWindow => 5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScriptId::Decide => "decide",
            ScriptId::FixedWindow => "fixed_window",
            ScriptId::SlidingLog => "sliding_log",
            ScriptId::Bucket => "bucket",
            ScriptId::SlidingWindow => "sliding_window",
        }
    }

    /// The script `EVALSHA` runs.
    pub fn lua(self) -> &'static str {
        &SOURCES[usize::from(self.code()) - 1].0
    }

    /// Its SHA-1, which names it in `EVALSHA`.
    pub fn sha(self) -> &'static Value {
        &SOURCES[usize::from(self.code()) - 1].1
    }

    /// Its file: for a fast path, the definitions its script and the library share (the
    /// script adds [`fast_main`]).
    pub fn definitions(self) -> &'static str {
        match self {
            ScriptId::Decide => LUA,
            ScriptId::FixedWindow => FIXED_WINDOW_FN,
            ScriptId::SlidingLog => SLIDING_LOG_FN,
            ScriptId::Bucket => BUCKET_FN,
            ScriptId::SlidingWindow => SLIDING_WINDOW_FN,
        }
    }

    /// A fast path's library-only companion, which keeps a decision's converted values for
    /// the batch's repeats of it (the fast path's `keep` hook, `<name>_again`): only the
    /// library has it, since an `EVALSHA` would make its closure on every call for nothing.
    pub fn kept(self) -> Option<&'static str> {
        match self {
            ScriptId::FixedWindow => Some(concat!(
                include_str!("fixed_window_again.lua"),
                include_str!("fixed_window_mend.lua")
            )),
            _ => None,
        }
    }

    /// A fast path's number of `ARGV` values (`now` first), which its function takes as
    /// positional values in the library's `batch`; `None` for `decide.lua` (a variable
    /// number, passed as tables).
    pub fn argc(self) -> Option<usize> {
        match self {
            ScriptId::Decide => None,
            ScriptId::FixedWindow | ScriptId::SlidingLog => Some(5),
            ScriptId::Bucket | ScriptId::SlidingWindow => Some(6),
        }
    }

    /// The `ARGV` index of `now` ('' to read the Redis clock).
    pub fn now_at(self) -> usize {
        match self {
            ScriptId::Decide => 2,
            _ => 1,
        }
    }
}

/// Values per check in `ARGV` (must match `FIELDS` in the script).
const FIELDS: usize = 13;

/// The bits of a check's boolean options, sent as one integer (`expiry.lua` names the same
/// bits `FLAG_*`): a new option is a new bit, and no argument moves.
pub mod flag {
    pub const REFUND: i64 = 1;
    /// `charge: always`.
    pub const ALWAYS: i64 = 2;
    pub const DRY_RUN: i64 = 4;
    pub const QUOTA: i64 = 8;
}

/// A check's options as [`flag`] bits.
fn flags(c: &Check<'_>) -> i64 {
    let bit = |on: bool, bit: i64| if on { bit } else { 0 };
    bit(c.ask.refund, flag::REFUND)
        | bit(c.charge == Charge::Always, flag::ALWAYS)
        | bit(c.ask.dry_run, flag::DRY_RUN)
        | bit(c.quota, flag::QUOTA)
}

/// The largest integer a Lua number holds exactly; larger inputs are clamped to it (such a
/// limit or hit count is unreachable in practice, and saturates in Rust too).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// What the script is asked to do with the checks it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The checks are the whole request: the exact [`batch`](crate::store::batch) policy.
    All,
    /// Some descriptors of a request spread over Redis Cluster slots: decide them as if every
    /// descriptor elsewhere passes; the caller undoes the charges if the request is rejected.
    Part,
    /// Give back the hits of every check (charged earlier by a [`Scope::Part`] call).
    Undo,
    /// Settle a reservation: if the claim key (a record, or its claim in another slot) is
    /// there and not a settlement's marker, decide the checks as [`Scope::All`] and replace it
    /// by the marker (the second field; empty: delete it), in the one call; else change
    /// nothing and answer `now` -1 ([`Reply::unclaimed`]).
    Settle(&'a [u8], &'a [u8]),
}

impl Scope<'_> {
    fn as_str(self) -> &'static str {
        match self {
            Scope::All => "all",
            Scope::Part => "part",
            Scope::Undo => "undo",
            Scope::Settle(..) => "settle",
        }
    }
}

/// The script's code for an algorithm (its `ALGORITHMS` table). Every algorithm has a Lua
/// port: a new one must get a code here (the match is exhaustive) and a port in the script.
pub fn algorithm_code(a: Algorithm) -> i64 {
    match a {
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingWindow => 2,
        Algorithm::SlidingLog => 3,
        Algorithm::TokenBucket => 4,
        Algorithm::LeakyBucket => 5,
        Algorithm::Gcra => 6,
        Algorithm::Distinct => 7,
        Algorithm::Concurrency => 8,
    }
}

/// The algorithm's parameter beyond rate and window: a bucket's burst, a sliding window's
/// precision.
fn param(limit: &Limit) -> u64 {
    match limit.algorithm {
        Algorithm::SlidingWindow => u64::from(limit.precision),
        a if a.has_burst() => limit.burst,
        _ => 0,
    }
}

/// Calendar window bounds, which only Rust can compute (the tz database): the window of
/// `local` (sluice's clock), and when the script reads the Redis clock also the start of the
/// window before and the end of the one after, so that a Redis clock on the other side of a
/// boundary still finds its window. `None`: the script aligns the window to the epoch itself.
fn window_bounds(
    limit: &Limit,
    local: Micros,
    script_reads_clock: bool,
) -> Option<[Option<Micros>; 4]> {
    limit.calendar?;
    if !limit.algorithm.has_windows() {
        return None;
    }
    let f = limit.frame(local);
    let (prev, next) = if script_reads_clock {
        (
            Some(limit.frame(f.window_start - 1).window_start),
            Some(limit.frame(f.window_end).window_end),
        )
    } else {
        (None, None)
    };
    Some([Some(f.window_start), Some(f.window_end), prev, next])
}

fn clamp(n: u64) -> i64 {
    n.min(MAX_SAFE) as i64
}

/// An empty argument (no value, no window bound, the Redis clock): shared, never allocated.
const EMPTY: Value = Value::Bytes(Bytes::from_static(b""));

/// `KEYS` and `ARGV` of one call over `checks` (a subset of a request, in request order).
/// `now`: `None` to let the script read the Redis clock; `local`: sluice's time, from which
/// calendar windows are computed when `now` is `None`.
pub fn encode<'k, C: Borrow<Check<'k>>>(
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) -> (Vec<&'k [u8]>, Vec<Value>) {
    let keys = keys_of(checks, scope);
    let mut args = Vec::with_capacity(3 + checks.len() * FIELDS);
    push_argv(&mut args, &keys, checks, scope, now, local);
    (keys, args)
}

/// The check a fast path decides exactly as `decide.lua` would, and that path: the only check
/// of a whole request, a fixed_window with an epoch-aligned window (calendar windows need the
/// bounds only Rust computes) or a sliding_log. Both take the same arguments and answer in
/// the same short layout.
pub fn fast_path<'a, 'k, C: Borrow<Check<'k>>>(
    checks: &'a [C],
    scope: Scope<'_>,
) -> Option<(&'a Check<'k>, ScriptId)> {
    let [c] = checks else { return None };
    let c = c.borrow();
    // A dry run takes the general script, the one that knows it.
    if scope != Scope::All || c.limit.calendar.is_some() || c.ask.dry_run {
        return None;
    }
    let id = match c.limit.algorithm {
        Algorithm::FixedWindow => ScriptId::FixedWindow,
        Algorithm::SlidingLog => ScriptId::SlidingLog,
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => ScriptId::Bucket,
        Algorithm::SlidingWindow => ScriptId::SlidingWindow,
        _ => return None,
    };
    Some((c, id))
}

/// Whether `decide.lua` gets the checks in its short layout (scope 'fixed'): several takes of
/// a whole request, on distinct keys, each a fixed_window with an epoch-aligned window or (at
/// most one) a sliding_log, none a refund, dry run, charge-always or quota check. The script
/// charges the fixed windows by one `HINCRBY` each and the sliding_log by its own O(log n)
/// function when all are allowed, and otherwise decides them as the long layout would.
fn short_layout<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'_>) -> bool {
    let logs = checks
        .iter()
        .filter(|&c| Borrow::<Check<'k>>::borrow(c).limit.algorithm == Algorithm::SlidingLog)
        .count();
    scope == Scope::All
        && checks.len() > 1
        && logs <= 1
        && checks.iter().enumerate().all(|(i, c)| {
            let c = c.borrow();
            matches!(
                c.limit.algorithm,
                Algorithm::FixedWindow | Algorithm::SlidingLog
            ) && c.limit.calendar.is_none()
                && c.ask.hits > 0
                && !c.ask.refund
                && !c.ask.dry_run
                && c.charge != Charge::Always
                && !c.quota
                // Requests carry a handful of checks: pairwise beats a set.
                && checks[..i].iter().all(|d| d.borrow().key != c.key)
        })
}

/// The script a call over `checks` runs (what [`evalsha`] names).
pub fn script_of<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'_>) -> ScriptId {
    fast_path(checks, scope).map_or(ScriptId::Decide, |(_, id)| id)
}

/// The source of the script a call over `checks` runs.
pub fn lua_for<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'_>) -> &'static str {
    script_of(checks, scope).lua()
}

/// A fast path's decision before it is encoded: its script, its one key and its `ARGV`
/// (`now`, `None` for the Redis clock, then [`FastCall::ints`]). A thread's own connection
/// writes it straight into its buffer; [`FastCall::evalsha`] lists it for `EVALSHA`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastCall<'k> {
    pub id: ScriptId,
    pub key: &'k [u8],
    pub now: Option<Micros>,
    pub(super) ints: [i64; 5],
    pub(super) n: usize,
}

impl<'k> FastCall<'k> {
    /// `ARGV[2..]`: limit, window, hits, flags, and a bucket's burst or a sliding window's
    /// precision (fixed_window and sliding_log need nothing more).
    pub fn ints(&self) -> &[i64] {
        &self.ints[..self.n]
    }

    /// Its `EVALSHA` argument list (`sha 1 key now ints..`).
    pub fn evalsha(&self) -> Vec<Value> {
        let mut args = Vec::with_capacity(4 + self.n);
        args.push(Value::clone(self.id.sha()));
        args.push(Value::Integer(1));
        args.push(Value::Bytes(Bytes::copy_from_slice(self.key)));
        args.push(self.now.map_or(EMPTY, Value::Integer));
        args.extend(self.ints().iter().copied().map(Value::Integer));
        args
    }
}

/// The fast path's call over `checks`, when they take one ([`fast_path`]).
pub fn fast_call<'k, C: Borrow<Check<'k>>>(
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
) -> Option<FastCall<'k>> {
    let (c, id) = fast_path(checks, scope)?;
    let mut ints = [
        clamp(c.limit.requests),
        c.limit.window.clamp(1, MAX_SAFE as i64),
        clamp(c.ask.hits),
        // A fast path never sees a dry run or quota mode (`fast_path`).
        flags(c),
        0,
    ];
    let mut n = 4;
    if matches!(id, ScriptId::Bucket | ScriptId::SlidingWindow) {
        ints[4] = clamp(param(c.limit));
        n = 5;
    }
    debug_assert_eq!(id.argc(), Some(1 + n));
    Some(FastCall {
        id,
        key: c.key,
        now,
        ints,
        n,
    })
}

/// One call over a request's checks, before it is encoded: a fast path's values (which a
/// thread's own connection writes straight into its buffer), or `decide.lua`'s `EVALSHA`
/// arguments.
pub enum Call<'k> {
    Fast(FastCall<'k>),
    Whole(Vec<Value>),
}

impl Call<'_> {
    /// The script it runs.
    pub fn id(&self) -> ScriptId {
        match self {
            Call::Fast(f) => f.id,
            Call::Whole(_) => ScriptId::Decide,
        }
    }

    /// Its `EVALSHA` argument list (`sha numkeys KEYS.. ARGV..`).
    pub fn evalsha(&self) -> std::borrow::Cow<'_, [Value]> {
        match self {
            Call::Fast(f) => f.evalsha().into(),
            Call::Whole(args) => args.as_slice().into(),
        }
    }
}

/// The call over `checks` (see [`evalsha`]).
pub fn call<'k, C: Borrow<Check<'k>>>(
    sha: &Value,
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) -> Call<'k> {
    match fast_call(checks, scope, now) {
        Some(f) => Call::Fast(f),
        // `evalsha` asks `fast_path` again: a few compares, not worth a second entry point.
        None => Call::Whole(evalsha(sha, checks, scope, now, local)),
    }
}

/// The whole `EVALSHA` argument list (`sha numkeys KEYS.. ARGV..`) built in one allocation.
/// `sha` names `decide.lua`; a fast path names its own. Both scripts answer in the layout
/// [`decode`] reads.
pub fn evalsha<'k, C: Borrow<Check<'k>>>(
    sha: &Value,
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) -> Vec<Value> {
    if let Some(fast) = fast_call(checks, scope, now) {
        return fast.evalsha();
    }
    if short_layout(checks, scope) {
        return short_evalsha(sha, checks, now);
    }
    let keys = keys_of(checks, scope);
    let mut args = Vec::with_capacity(2 + keys.len() + 3 + checks.len() * FIELDS);
    args.push(sha.clone());
    args.push(Value::Integer(keys.len() as i64));
    args.extend(keys.iter().map(|k| Value::Bytes(Bytes::copy_from_slice(k))));
    push_argv(&mut args, &keys, checks, scope, now, local);
    args
}

/// `decide.lua`'s short layout (see [`short_layout`] and the script's header).
fn short_evalsha<'k, C: Borrow<Check<'k>>>(
    sha: &Value,
    checks: &[C],
    now: Option<Micros>,
) -> Vec<Value> {
    let int = Value::Integer;
    let n = checks.len();
    let mut args = Vec::with_capacity(2 + n + 4 + 4 * n);
    args.push(sha.clone());
    args.push(int(n as i64));
    args.extend(
        checks
            .iter()
            .map(|c| Value::Bytes(Bytes::copy_from_slice(c.borrow().key))),
    );
    args.push(Value::Bytes(Bytes::from_static(b"fixed")));
    args.push(now.map_or(EMPTY, int));
    args.push(int(n as i64));
    // Check i in group i - 1 (a descriptor each, in order) is said by ''.
    let in_order = checks
        .iter()
        .enumerate()
        .all(|(i, c)| c.borrow().group as usize == i);
    if in_order {
        args.push(EMPTY);
    } else {
        let groups: Vec<String> = checks
            .iter()
            .map(|c| c.borrow().group.to_string())
            .collect();
        args.push(Value::from(groups.join(" ")));
    }
    for c in checks {
        let c = c.borrow();
        args.push(int(clamp(c.limit.requests)));
        args.push(int(c.limit.window.clamp(1, MAX_SAFE as i64)));
        args.push(int(clamp(c.ask.hits)));
        args.push(int(algorithm_code(c.limit.algorithm)));
    }
    args
}

/// The script's `KEYS`: the checks' keys, then the claim of [`Scope::Settle`].
fn keys_of<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'k>) -> Vec<&'k [u8]> {
    let mut keys = distinct_keys(checks);
    if let Scope::Settle(claim, _) = scope {
        keys.push(claim);
    }
    keys
}

/// The checks' keys, each once, in order of first use.
fn distinct_keys<'k, C: Borrow<Check<'k>>>(checks: &[C]) -> Vec<&'k [u8]> {
    let mut keys: Vec<&'k [u8]> = Vec::with_capacity(checks.len());
    for c in checks {
        let key = c.borrow().key;
        // Requests carry a handful of keys: a linear search beats a map.
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

fn push_argv<'k, C: Borrow<Check<'k>>>(
    args: &mut Vec<Value>,
    keys: &[&'k [u8]],
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) {
    let int = Value::Integer;
    args.push(Value::Bytes(Bytes::from_static(scope.as_str().as_bytes())));
    args.push(now.map_or(EMPTY, int));
    args.push(int(checks.len() as i64));
    for c in checks {
        let c = c.borrow();
        let index = keys.iter().position(|k| *k == c.key).unwrap_or(0);
        args.push(int(index as i64 + 1));
        args.push(int(algorithm_code(c.limit.algorithm)));
        args.push(int(clamp(c.limit.requests)));
        args.push(int(c.limit.window.clamp(1, MAX_SAFE as i64)));
        args.push(int(clamp(param(c.limit))));
        if c.limit.algorithm == Algorithm::Distinct {
            args.push(Value::from(format!("{:016x}", c.ask.value)));
        } else {
            args.push(EMPTY);
        }
        args.push(int(clamp(c.ask.hits)));
        args.push(int(flags(c)));
        args.push(int(i64::from(c.group)));
        let bounds = window_bounds(c.limit, now.unwrap_or(local), now.is_none());
        for b in bounds.unwrap_or([None; 4]) {
            args.push(b.map_or(EMPTY, int));
        }
    }
    // After the checks: the marker a settlement leaves in its claim's place.
    if let Scope::Settle(_, marker) = scope {
        args.push(Value::Bytes(Bytes::copy_from_slice(marker)));
    }
}

/// One check's answer from the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub verdict: Verdict,
    /// Whether the check was allowed in the policy's first pass (what admission is computed
    /// from).
    pub first_allowed: bool,
}

/// The script's reply: the time it decided at, and one answer per check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub now: Micros,
    pub answers: Vec<Answer>,
}

/// `now` of a [`Scope::Settle`] call whose claim was gone: nothing was decided.
const UNCLAIMED: Micros = -1;

impl Reply {
    /// A [`Scope::Settle`] call found its claim gone and changed nothing.
    pub fn unclaimed(&self) -> bool {
        self.now == UNCLAIMED
    }

    /// The verdicts alone, in a vector of their own: collected in place, the answers'
    /// allocation would be shrunk (a `realloc` on every request).
    pub fn verdicts(self) -> Vec<Verdict> {
        let mut v = Vec::with_capacity(self.answers.len());
        v.extend(self.answers.into_iter().map(|a| a.verdict));
        v
    }
}

/// Parses the flat integer reply for `n` checks: `decide.lua`'s, its short one for the short
/// layout (every check allowed and charged: remaining and reset each), or a fast path's for
/// its single check.
pub fn decode(reply: Vec<i64>, n: usize) -> Result<Reply, StoreError> {
    if n > 1 && reply.len() == 1 + 2 * n {
        let answers = reply[1..]
            .chunks_exact(2)
            .map(|a| Answer {
                verdict: Verdict {
                    allowed: true,
                    remaining: u64::try_from(a[0]).unwrap_or(0),
                    reset: a[1],
                    charged: true,
                    cached: false,
                },
                first_allowed: true,
            })
            .collect();
        return Ok(Reply {
            now: reply[0],
            answers,
        });
    }
    if reply == [UNCLAIMED] {
        return Ok(Reply {
            now: UNCLAIMED,
            answers: Vec::new(),
        });
    }
    if let ([now, flags, remaining, reset], 1) = (reply.as_slice(), n) {
        let allowed = flags & 1 != 0;
        return Ok(Reply {
            now: *now,
            answers: vec![Answer {
                verdict: Verdict {
                    allowed,
                    remaining: u64::try_from(*remaining).unwrap_or(0),
                    reset: *reset,
                    charged: flags & 2 != 0,
                    cached: false,
                },
                first_allowed: allowed,
            }],
        });
    }
    if reply.len() != 1 + n * 5 {
        return Err(StoreError::new(
            "redis",
            ErrorKind::Script,
            format!(
                "decision script answered {} values for {n} checks",
                reply.len()
            ),
        ));
    }
    let answers = reply[1..]
        .chunks_exact(5)
        .map(|a| Answer {
            verdict: Verdict {
                allowed: a[0] != 0,
                remaining: u64::try_from(a[1]).unwrap_or(0),
                reset: a[2],
                charged: a[3] != 0,
                cached: false,
            },
            first_allowed: a[4] != 0,
        })
        .collect();
    Ok(Reply {
        now: reply[0],
        answers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Ask;

    #[test]
    fn repeated_keys_share_an_index_and_fields_line_up() {
        let l = Limit::fixed_window(u64::MAX, 60_000_000);
        let mk = |key: &'static [u8], group| Check {
            key,
            limit: &l,
            ask: Ask::take(2),
            charge: Charge::Always,
            group,
            quota: true,
            on_error: None,
        };
        let (a, b, c) = (mk(b"a", 0), mk(b"b", 1), mk(b"a", 2));
        let (keys, args) = encode(&[&a, &b, &c], Scope::All, Some(7), 7);
        assert_eq!(keys, [b"a".as_slice(), b"b".as_slice()]);
        assert_eq!(args.len(), 3 + 3 * FIELDS);
        let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
        assert_eq!(ints[1], Some(7));
        // third check: key index 1 again, limit clamped to 2^53 - 1, group 2
        let third = &ints[3 + 2 * FIELDS..];
        assert_eq!(third[0], Some(1));
        assert_eq!(third[2], Some(MAX_SAFE as i64));
        assert_eq!(third[7], Some(flag::ALWAYS | flag::QUOTA));
        assert_eq!(third[8], Some(2));
    }

    #[test]
    fn plain_fixed_window_takes_of_distinct_keys_take_the_short_layout() {
        let l = Limit::fixed_window(u64::MAX, 60_000_000);
        let mut cal = l.clone();
        cal.calendar = Some(crate::algorithm::Calendar {
            unit: crate::model::Unit::Hour,
            tz: chrono_tz::UTC,
        });
        let log = Limit::new(Algorithm::SlidingLog, 10, 60_000_000);
        let mk = |key: &'static [u8], limit, group| Check {
            key,
            limit,
            ask: Ask::take(2),
            charge: Charge::IfAdmitted,
            group,
            quota: false,
            on_error: None,
        };
        let (a, b) = (mk(b"a", &l, 0), mk(b"b", &l, 1));
        let sha = Value::from("decide");
        let args = evalsha(&sha, &[&a, &b], Scope::All, None, 5);
        let s = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
        // sha, 2 keys, 'fixed', now, n, groups, then limit, window, hits, algorithm each.
        assert_eq!(args.len(), 2 + 2 + 4 + 4 * 2);
        assert_eq!((s(&args[2]), s(&args[3])), ("a".into(), "b".into()));
        assert_eq!(s(&args[4]), "fixed");
        assert_eq!(
            (s(&args[5]), args[6].as_i64(), s(&args[7])),
            ("".into(), Some(2), "".into())
        );
        assert_eq!(args[8].as_i64(), Some(MAX_SAFE as i64));
        assert_eq!(
            (args[9].as_i64(), args[10].as_i64()),
            (Some(60_000_000), Some(2))
        );
        // Groups not in check order are spelled out.
        let (c, d) = (mk(b"c", &l, 0), mk(b"d", &l, 0));
        assert_eq!(
            s(&evalsha(&sha, &[&a, &c, &d], Scope::All, None, 5)[8]),
            "0 0 0"
        );
        // Anything else keeps the long layout.
        let long = |checks: &[&Check<'_>], scope| {
            let args = evalsha(&sha, checks, scope, None, 5);
            s(&args[2 + args[1].as_i64().unwrap() as usize])
        };
        assert_eq!(long(&[&a, &a], Scope::All), "all");
        assert_eq!(long(&[&a, &b], Scope::Part), "part");
        assert_eq!(long(&[&a, &mk(b"c", &cal, 1)], Scope::All), "all");
        // One sliding_log beside fixed windows is short; two are not.
        let log_args = evalsha(&sha, &[&a, &mk(b"c", &log, 1)], Scope::All, None, 5);
        assert_eq!(s(&log_args[4]), "fixed");
        assert_eq!(log_args[15].as_i64(), Some(3));
        let two_logs = [&a, &mk(b"c", &log, 1), &mk(b"d", &log, 2)];
        assert_eq!(long(&two_logs, Scope::All), "all");
        let mut refund = mk(b"c", &l, 1);
        refund.ask.refund = true;
        let mut quota = mk(b"c", &l, 1);
        quota.quota = true;
        let mut always = mk(b"c", &l, 1);
        always.charge = Charge::Always;
        let mut zero = mk(b"c", &l, 1);
        zero.ask.hits = 0;
        for other in [&refund, &quota, &always, &zero] {
            assert_eq!(long(&[&a, other], Scope::All), "all");
        }
        // A short reply: every check allowed and charged.
        let r = decode(vec![9, 4, 100, 0, 50], 2).unwrap();
        assert_eq!(r.now, 9);
        assert!(r
            .answers
            .iter()
            .all(|a| a.verdict.allowed && a.verdict.charged && a.first_allowed));
        assert_eq!(
            (r.answers[1].verdict.remaining, r.answers[1].verdict.reset),
            (0, 50)
        );
    }

    #[test]
    fn every_algorithm_has_its_own_code() {
        let codes: std::collections::HashSet<i64> =
            Algorithm::ALL.into_iter().map(algorithm_code).collect();
        assert_eq!(codes.len(), Algorithm::ALL.len());
        // The script's table holds codes 1..=8.
        assert!(codes.iter().all(|c| (1..=8).contains(c)));
        assert!(LUA.contains("[7] = new_distinct"));
        assert!(LUA.contains("[8] = new_concurrency"));
    }

    #[test]
    fn distinct_values_and_calendar_bounds_are_passed() {
        use crate::algorithm::{Calendar, Frame};
        use crate::model::Unit;
        let mut l = Limit::new(Algorithm::Distinct, 5, 3_600_000_000);
        l.calendar = Some(Calendar {
            unit: Unit::Hour,
            tz: chrono_tz::Asia::Kolkata,
        });
        let c = Check {
            key: b"k",
            limit: &l,
            ask: Ask {
                value: 0xab,
                ..Ask::take(1)
            },
            charge: Charge::IfAdmitted,
            group: 0,
            quota: false,
            on_error: None,
        };
        let now = 1_700_000_000_000_000;
        let Frame {
            window_start,
            window_end,
            ..
        } = l.frame(now);
        let (_, local) = encode(&[&c], Scope::All, Some(now), now);
        let (_, redis) = encode(&[&c], Scope::All, None, now);
        let s = |v: &Value| v.as_str().map(|s| s.to_string()).unwrap_or_default();
        assert_eq!(s(&local[3 + 5]), "00000000000000ab");
        // After the value: hits, flags, group, then the four window bounds.
        assert_eq!(local[3 + 9].as_i64(), Some(window_start));
        assert_eq!(local[3 + 10].as_i64(), Some(window_end));
        assert_eq!(
            (s(&local[3 + 11]), s(&local[3 + 12])),
            (String::new(), String::new())
        );
        assert_eq!(redis[3 + 11].as_i64(), Some(window_start - 3_600_000_000));
        assert_eq!(redis[3 + 12].as_i64(), Some(window_end + 3_600_000_000));
        assert_eq!(local.len(), 3 + FIELDS, "a check's fields, all");
    }

    #[test]
    fn only_a_lone_epoch_aligned_window_a_sliding_log_or_a_bucket_takes_a_fast_path() {
        let fixed = Limit::fixed_window(10, 60_000_000);
        let mut calendar = fixed.clone();
        calendar.calendar = Some(crate::algorithm::Calendar {
            unit: crate::model::Unit::Hour,
            tz: chrono_tz::UTC,
        });
        let mut gcra = Limit::new(Algorithm::Gcra, 10, 60_000_000);
        gcra.burst = 4;
        let distinct = Limit::new(Algorithm::Distinct, 10, 60_000_000);
        let mk = |limit| Check {
            key: b"k",
            limit,
            ask: Ask {
                refund: true,
                ..Ask::take(3)
            },
            charge: Charge::Always,
            group: 0,
            quota: false,
            on_error: None,
        };
        let (one, cal, other, bucket) = (mk(&fixed), mk(&calendar), mk(&distinct), mk(&gcra));
        let log = Limit::new(Algorithm::SlidingLog, 10, 60_000_000);
        let log = mk(&log);
        assert!(fast_path(&[&one], Scope::All).is_some());
        assert!(fast_path(&[&one], Scope::Part).is_none());
        assert!(fast_path(&[&one, &one], Scope::All).is_none());
        assert!(fast_path(&[&cal], Scope::All).is_none());
        assert!(fast_path(&[&other], Scope::All).is_none());
        assert_eq!(lua_for(&[&log], Scope::All), ScriptId::SlidingLog.lua());
        assert_eq!(
            evalsha(&Value::Null, &[&log], Scope::All, None, 5)[0],
            *ScriptId::SlidingLog.sha()
        );
        assert_eq!(lua_for(&[&log, &log], Scope::All), LUA);
        let sha = Value::from("decide");
        let args = evalsha(&sha, &[&one], Scope::All, None, 5);
        assert_eq!(args[0], *ScriptId::FixedWindow.sha());
        let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
        // numkeys, key, now ('' = Redis clock), limit, window, hits, flags (REFUND | ALWAYS)
        assert_eq!(ints[1], Some(1));
        assert_eq!(args[3], EMPTY);
        assert_eq!(&ints[4..], [Some(10), Some(60_000_000), Some(3), Some(3)]);
        assert_eq!(evalsha(&sha, &[&other], Scope::All, None, 5)[0], sha);
        // A bucket's fast path also takes its burst.
        let args = evalsha(&sha, &[&bucket], Scope::All, None, 5);
        assert_eq!(args[0], *ScriptId::Bucket.sha());
        assert_eq!(script_of(&[&bucket], Scope::All), ScriptId::Bucket);
        let ints: Vec<Option<i64>> = args.iter().map(|v| v.as_i64()).collect();
        assert_eq!(
            &ints[4..],
            [Some(10), Some(60_000_000), Some(3), Some(3), Some(4)]
        );
    }

    #[test]
    fn reply_of_the_wrong_length_is_an_error() {
        assert!(decode(vec![0, 1, 2], 1).is_err());
        let r = decode(vec![5, 1, 3, 10, 1, 1], 1).unwrap();
        assert_eq!(r.now, 5);
        assert!(r.answers[0].verdict.allowed && r.answers[0].first_allowed);
        assert_eq!(r.answers[0].verdict.remaining, 3);
        // fixed_window.lua's: now, flags (1 allowed + 2 charged), remaining, reset
        let fast = decode(vec![5, 2, 0, 10], 1).unwrap().answers[0];
        assert!(!fast.verdict.allowed && fast.verdict.charged && !fast.first_allowed);
        assert_eq!(fast.verdict.reset, 10);
        assert!(decode(vec![5, 2, 0, 10], 2).is_err());
    }
}
