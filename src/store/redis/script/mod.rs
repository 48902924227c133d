//! The decision scripts (`lua/`): which one a call runs, its argument layout and its reply.
//!
//! `lua/` holds one file per algorithm, each mirroring `src/algorithm/<name>.rs`: its port
//! (`read`, `evaluate`, `write`, defined once) and its lone entry point. `batch.lua` (the port
//! of `store/batch.rs`) decides every check it is given atomically; its layout is documented
//! at the top of the file and written only here. A request of one check of some algorithms
//! runs its algorithm's entry point instead ([`fast_path`]): the one-check policy
//! (`alone.lua`) over the same evaluation, without the batch's tables of checks and passes
//! (each algorithm's evaluation is one function of values that its port wraps in tables;
//! fixed_window first tries its take counted in place, one HINCRBY, which `batch.lua`'s short
//! layout shares). Adding an
//! algorithm means its file in `lua/`, a row in `batch.lua`'s `ALGORITHMS` and a code in
//! [`algorithm_code`].
//!
//! A check's boolean options (refund, charge always, dry run, quota) travel as one integer of
//! [`flag`] bits, in every layout: a new option is a new bit, and no argument moves.

use std::borrow::Borrow;

use bytes::Bytes;

use crate::store::redis::resp::Value;

use crate::algorithm::{Algorithm, Limit};
use crate::model::Micros;
use crate::store::{Charge, Check, ErrorKind, StoreError, Verdict};

/// The Lua files every script starts with: the expiry rule and flag bits, exact division,
/// what the algorithms' ports share (`algorithm.lua`) and the one-check policy (`alone.lua`).
macro_rules! common_lua {
    ($($file:literal),*) => {
        concat!(
            include_str!("../lua/expiry.lua"),
            include_str!("../lua/division.lua"),
            include_str!("../lua/algorithm.lua"),
            include_str!("../lua/alone.lua"),
            $(include_str!($file)),*
        )
    };
}

/// `batch.lua`'s script: every algorithm's file (each `src/algorithm/<name>.rs`'s port and its
/// lone entry point), then the batch policy: what the function library is built of.
pub const LUA: &str = common_lua!(
    "../lua/fixed_window.lua",
    "../lua/sliding_window.lua",
    "../lua/sliding_log.lua",
    "../lua/bucket.lua",
    "../lua/distinct.lua",
    "../lua/concurrency.lua",
    "../lua/batch.lua"
);

/// A fast path's per-call part, the same for all: `now` from `ARGV[1]` ('' reads the Redis
/// clock), then its function on `KEYS[1]` and `ARGV[2..6]`, answered as
/// `{ now, flags, remaining, reset }`: the function library (`library.rs`) wraps it as the
/// fast path's own function.
pub fn fast_main(name: &str) -> String {
    format!(
        "local now = tonumber(ARGV[1])\n\
         if now == nil then\n  local t = redis.call('TIME')\n  \
         now = tonumber(t[1]) * 1000000 + tonumber(t[2])\nend\n\
         return {{ now, {name}(KEYS[1], now, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) }}\n"
    )
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

    /// Whether the library's batch decides a repeat of this script's decision (`=`) from the
    /// values the decision kept (`<name>_again`, `functions.lua`).
    pub fn repeats(self) -> bool {
        self == ScriptId::FixedWindow
    }

    /// A fast path's number of `ARGV` values (`now` first), which its function takes as
    /// positional values in the library's `batch`; `None` for `batch.lua` (a variable
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

/// Calendar window bounds, which only Rust can compute (the tz database): the window of
/// `local` (sluice's clock), and when the script reads the Redis clock also the start of the
/// window before and the end of the one after, so that a Redis clock on the other side of a
/// boundary still finds its window. `None`: the script aligns the window to the epoch itself.
fn window_bounds(
    limit: &Limit,
    local: Micros,
    script_reads_clock: bool,
) -> Option<[Option<Micros>; 4]> {
    limit.calendar()?;
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

/// The check a fast path decides exactly as `batch.lua` would, and that path: the only check
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
    if scope != Scope::All || c.limit.calendar().is_some() || c.ask.dry_run {
        return None;
    }
    let id = match c.limit.algorithm() {
        Algorithm::FixedWindow => ScriptId::FixedWindow,
        Algorithm::SlidingLog => ScriptId::SlidingLog,
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => ScriptId::Bucket,
        Algorithm::SlidingWindow => ScriptId::SlidingWindow,
        _ => return None,
    };
    Some((c, id))
}

/// Whether `batch.lua` gets the checks in its short layout (scope 'fixed'): several takes of
/// a whole request, on distinct keys, each a fixed_window with an epoch-aligned window or (at
/// most one) a sliding_log, none a refund, dry run, charge-always or quota check. The script
/// charges the fixed windows by one `HINCRBY` each and the sliding_log by its own O(log n)
/// function when all are allowed, and otherwise decides them as the long layout would.
fn short_layout<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'_>) -> bool {
    let logs = checks
        .iter()
        .filter(|&c| Borrow::<Check<'k>>::borrow(c).limit.algorithm() == Algorithm::SlidingLog)
        .count();
    scope == Scope::All
        && checks.len() > 1
        && logs <= 1
        && checks.iter().enumerate().all(|(i, c)| {
            let c = c.borrow();
            matches!(
                c.limit.algorithm(),
                Algorithm::FixedWindow | Algorithm::SlidingLog
            ) && c.limit.calendar().is_none()
                && c.ask.hits > 0
                && !c.ask.refund
                && !c.ask.dry_run
                && c.charge != Charge::Always
                && !c.quota
                // Requests carry a handful of checks: pairwise beats a set.
                && checks[..i].iter().all(|d| d.borrow().key != c.key)
        })
}

/// The script a call over `checks` runs (whose function [`fcall`] names).
pub fn script_of<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'_>) -> ScriptId {
    fast_path(checks, scope).map_or(ScriptId::Decide, |(_, id)| id)
}

mod call;
mod reply;
#[cfg(test)]
mod tests;

pub use call::*;
pub use reply::*;
