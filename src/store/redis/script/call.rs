//! A call's arguments: `KEYS` and `ARGV` of a fast path, the short layout or the long one.

use super::*;
use crate::store::redis::library::LIBRARY;

/// A fast path's decision before it is encoded: its script, its one key and its `ARGV`
/// (`now`, `None` for the Redis clock, then [`FastCall::ints`]). A thread's own connection
/// writes it straight into its buffer; [`FastCall::fcall`] lists it for a lone `FCALL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastCall<'k> {
    pub id: ScriptId,
    pub key: &'k [u8],
    pub now: Option<Micros>,
    pub(in crate::store::redis) ints: [i64; 5],
    pub(in crate::store::redis) n: usize,
}

impl<'k> FastCall<'k> {
    /// `ARGV[2..]`: limit, window, hits, flags, and a bucket's burst or a sliding window's
    /// precision (fixed_window and sliding_log need nothing more).
    pub fn ints(&self) -> &[i64] {
        &self.ints[..self.n]
    }

    /// Its `FCALL` argument list (`function 1 key now ints..`).
    pub fn fcall(&self) -> Vec<Value> {
        let mut args = Vec::with_capacity(4 + self.n);
        args.push(Value::from(LIBRARY.function(self.id)));
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
        clamp(c.limit.requests()),
        c.limit.window().clamp(1, MAX_SAFE as i64),
        clamp(c.ask.hits),
        // A fast path never sees a dry run or quota mode (`fast_path`).
        flags(c),
        0,
    ];
    let mut n = 4;
    if matches!(id, ScriptId::Bucket | ScriptId::SlidingWindow) {
        ints[4] = clamp(c.limit.param());
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
/// thread's own connection writes straight into its buffer), or `batch.lua`'s `FCALL`
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

    /// Its `FCALL` argument list (`function numkeys KEYS.. ARGV..`).
    pub fn fcall(&self) -> std::borrow::Cow<'_, [Value]> {
        match self {
            Call::Fast(f) => f.fcall().into(),
            Call::Whole(args) => args.as_slice().into(),
        }
    }
}

/// The call over `checks` (see [`fcall`]).
pub fn call<'k, C: Borrow<Check<'k>>>(
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) -> Call<'k> {
    match fast_call(checks, scope, now) {
        Some(f) => Call::Fast(f),
        // `fcall` asks `fast_path` again: a few compares, not worth a second entry point.
        None => Call::Whole(fcall(checks, scope, now, local)),
    }
}

/// The whole `FCALL` argument list (`function numkeys KEYS.. ARGV..`) built in one
/// allocation: the library's function of `batch.lua` (`decide`), or of the fast path the
/// checks take. Both answer in the layout [`decode`] reads.
pub fn fcall<'k, C: Borrow<Check<'k>>>(
    checks: &[C],
    scope: Scope<'k>,
    now: Option<Micros>,
    local: Micros,
) -> Vec<Value> {
    if let Some(fast) = fast_call(checks, scope, now) {
        return fast.fcall();
    }
    let decide = Value::from(LIBRARY.function(ScriptId::Decide));
    if short_layout(checks, scope) {
        return short_fcall(decide, checks, now);
    }
    let keys = keys_of(checks, scope);
    let mut args = Vec::with_capacity(2 + keys.len() + 3 + checks.len() * FIELDS);
    args.push(decide);
    args.push(Value::Integer(keys.len() as i64));
    args.extend(keys.iter().map(|k| Value::Bytes(Bytes::copy_from_slice(k))));
    push_argv(&mut args, &keys, checks, scope, now, local);
    args
}

/// `batch.lua`'s short layout (see [`short_layout`] and the script's header).
pub(super) fn short_fcall<'k, C: Borrow<Check<'k>>>(
    decide: Value,
    checks: &[C],
    now: Option<Micros>,
) -> Vec<Value> {
    let int = Value::Integer;
    let n = checks.len();
    let mut args = Vec::with_capacity(2 + n + 4 + 4 * n);
    args.push(decide);
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
        args.push(int(clamp(c.limit.requests())));
        args.push(int(c.limit.window().clamp(1, MAX_SAFE as i64)));
        args.push(int(clamp(c.ask.hits)));
        args.push(int(algorithm_code(c.limit.algorithm())));
    }
    args
}

/// The script's `KEYS`: the checks' keys, then the claim of [`Scope::Settle`].
pub(super) fn keys_of<'k, C: Borrow<Check<'k>>>(checks: &[C], scope: Scope<'k>) -> Vec<&'k [u8]> {
    let mut keys = distinct_keys(checks);
    if let Scope::Settle(claim, _) = scope {
        keys.push(claim);
    }
    keys
}

/// The checks' keys, each once, in order of first use.
pub(super) fn distinct_keys<'k, C: Borrow<Check<'k>>>(checks: &[C]) -> Vec<&'k [u8]> {
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

pub(super) fn push_argv<'k, C: Borrow<Check<'k>>>(
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
        args.push(int(algorithm_code(c.limit.algorithm())));
        args.push(int(clamp(c.limit.requests())));
        args.push(int(c.limit.window().clamp(1, MAX_SAFE as i64)));
        args.push(int(clamp(c.limit.param())));
        if c.limit.algorithm().counts_values() {
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
