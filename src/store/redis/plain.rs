//! The commonest decision without a script: a take of one hit of a lone fixed_window limit
//! (`--clock redis`, no refund, no charge-always), on a key this connection has already seen
//! charged in the current window, goes to Redis as the one command `fixed_window.lua`'s
//! common case runs, `HINCRBY key <window start> 1`, and sluice decides from its result (a
//! key seen at its limit: `HGET`, below).
//!
//! Why: at the same round trips per decision, Redis spends about half the CPU on a plain
//! `HINCRBY` that it spends on a script call doing it (the call, the arguments handed to Lua,
//! the reply converted back: bench/why.md), and a script can carry no more decisions per
//! round trip than its thread has in flight.
//!
//! What keeps it the script's decision:
//! - The write that carries plain takes starts with `TIME`, which Redis runs just before
//!   them; a take counts only when that clock is in the window it was sent for (sluice names
//!   the window from Redis' clock as last seen, so only a take sent across a window's edge
//!   misses). One that misses is given back and decided again by the library's
//!   `fixed_window_mend` (`retake`).
//! - A plain take only goes to a key this connection saw charged in that window ([`Plain`]'s
//!   cache), whose key then has its expiry and only that window's field. A take that finds
//!   the field absent anyway (the key was deleted or evicted, the server replaced) has made
//!   the window's field (`count + 1` = 1: the window's mark, nothing counted): `settle` does
//!   what a window's first take does (drops earlier windows, sets the expiry), then decides.
//! - Nothing is given back fire-and-forget: a key is taken plain only while its count last
//!   seen was below its limit, and a plain take that still finds the limit reached (sent
//!   before that was seen, or counted by another connection) is decided again by
//!   `fixed_window_mend` (`retake`: its hit given back and the script's decision, in one call
//!   its caller waits for; if the connection drops first, the caller learns that its call may
//!   have run).
//! - A key seen at its limit in the current window (the take that reached it, or a script's
//!   rejection) is *peeked*: `HGET key <window start>`, and the take is rejected when the
//!   count read leaves no room, in the window of the write's `TIME`, writing nothing, as the
//!   script would reject it. A peek that finds room (a refund gave hits back), another window,
//!   no field or a superseded one is decided by `fixed_window_mend` (`decide`: nothing to give
//!   back). Rejected load, the case a limiter under abuse sees most, so costs Redis one read
//!   per decision rather than a script's take and give-back.
//! - A window replaced by a later one keeps its field as a mark (`SUPERSEDED`, expiry.lua)
//!   that no count reaches: a take that finds it is `retake`n, and counts in the later window
//!   as the scripts' rule says. So no take is answered from a field that a later window's
//!   write removes (a take making a fresh field beside a later window, with its successors
//!   counting on it, over-admitted). A key is learnt charged only from a script's charge in
//!   the window of Redis' clock, not in a later window the key held.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use super::resp::{self, Frame};
use crate::algorithm::{fixed_window, Ask, Window, COUNT_CAP};
use crate::model::Micros;

use super::script::MAX_SAFE;

/// How many keys a connection remembers as charged in their window before it forgets them
/// all (about 30 bytes each): enough for every hot key of a thread, bounded for an attacker
/// spreading requests over many keys (those are decided by the script, as before).
const REMEMBERED: usize = 65_536;

/// A plain take's limit and window (µs), when a fast call is one ([`Args::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Args {
    pub limit: i64,
    pub window: i64,
}

impl Args {
    /// The fixed_window fast call's `now` and values (limit, window, hits, mode), when a
    /// plain take can decide it: the Redis clock, one hit, mode 0 (no refund, no
    /// charge-always), a limit of at least 1 below the count cap (where the script's common
    /// case decides alone).
    pub(super) fn of(now: Option<Micros>, ints: &[i64]) -> Option<Args> {
        match (now, ints) {
            (None, &[limit, window, 1, 0]) if limit >= 1 && limit as u64 <= COUNT_CAP => {
                Some(Args { limit, window })
            }
            _ => None,
        }
    }
}

/// A take sent plain: who it is for is the link's business; this is what deciding needs.
#[derive(Debug)]
pub(super) struct Take {
    /// The key as a RESP bulk string (as the link queued it).
    pub key: Vec<u8>,
    pub fingerprint: u64,
    pub args: Args,
    /// The window it was sent for.
    pub start: Micros,
    /// A read (`HGET`) rather than a take: the key was last seen at its limit in that window,
    /// so the take is rejected from the count alone, writing nothing ([`Plain::decide`]).
    pub peek: bool,
}

/// What a plain take's reply decides.
#[derive(Debug, PartialEq)]
pub(super) enum PlainReply {
    /// The answer, as the fixed_window script gives it (`now flags remaining reset`).
    Answer(Frame),
    /// Not decided: the library's `fixed_window_mend` is to decide it (`retake`, `settle`, or
    /// `decide` after a read).
    Mend(&'static str),
}

/// What a connection last saw of a key: charged in the window starting at `start`, and
/// whether that left it at its limit (`full`: its next takes are read, not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    start: Micros,
    full: bool,
}

/// A connection's knowledge for plain takes: Redis' clock as last seen, and the keys seen
/// charged in their current window.
#[derive(Default)]
pub(super) struct Plain {
    /// Redis' clock (µs) at its last reply that told it, and when that reply was read.
    clock: Option<(Micros, std::time::Instant)>,
    /// The `TIME` that began the write whose replies are being read.
    written_at: Option<Micros>,
    /// A key's fingerprint -> the window it was charged in, and whether it was full.
    charged: HashMap<u64, Seen, BuildHasherDefault<DefaultHasher>>,
}

impl Plain {
    /// Forgets everything (a new connection may reach another server).
    pub(super) fn clear(&mut self) {
        *self = Plain::default();
    }

    /// A reply told Redis' clock.
    // Estimates Redis' clock from the real time since a reply told it.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn saw_clock(&mut self, now: Micros) {
        if now > 0 {
            self.clock = Some((now, crate::clock::monotonic()));
        }
    }

    /// Redis' clock now, as far as this connection can tell (it lags by the reply's trip).
    // Estimates Redis' clock from the real time since a reply told it.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn estimate(&self) -> Option<Micros> {
        let (at, read) = self.clock?;
        let since = i64::try_from(read.elapsed().as_micros()).unwrap_or(i64::MAX);
        Some(at.saturating_add(since))
    }

    /// The fingerprint the cache knows a key by (its RESP bulk string).
    pub(super) fn fingerprint(key: &[u8]) -> u64 {
        BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
    }

    /// The key was charged in the window starting at `start`; `full`: up to its limit.
    pub(super) fn charged(&mut self, fingerprint: u64, start: Micros, full: bool) {
        if self.charged.len() >= REMEMBERED && !self.charged.contains_key(&fingerprint) {
            self.charged.clear();
        }
        self.charged.insert(fingerprint, Seen { start, full });
    }

    /// A script's answer for a one-hit fixed_window take at `now`, in the window ending
    /// `reset` later: `charged` (the take counted), or rejected, which for one hit means the
    /// count is at the limit; `full` when either leaves the key at its limit. Only the window
    /// of `now` counts: a key holding a later window must not send takes to the window of
    /// `now`.
    pub(super) fn learn(
        &mut self,
        fingerprint: u64,
        window: i64,
        now: Micros,
        reset: Micros,
        full: bool,
    ) {
        let w = Window::epoch_aligned(now, window);
        if now.saturating_add(reset) == w.window_end.min(MAX_SAFE as i64) {
            self.charged(fingerprint, w.window_start, full);
        }
    }

    /// The take to send plain for a queued fixed_window decision on `key`, if it may go so
    /// (`now`: [`Plain::estimate`], read once per write).
    pub(super) fn take(
        &self,
        now: Micros,
        key: &[u8],
        fingerprint: u64,
        args: Args,
    ) -> Option<Take> {
        let start = Window::epoch_aligned(now, args.window).window_start;
        let seen = self
            .charged
            .get(&fingerprint)
            .filter(|s| s.start == start)?;
        Some(Take {
            key: key.to_vec(),
            fingerprint,
            args,
            start,
            peek: seen.full,
        })
    }

    /// The `TIME` that begins a write of plain takes.
    pub(super) fn encode_time(out: &mut Vec<u8>) {
        resp::encode_strs(out, &[b"TIME"]);
    }

    /// `HINCRBY key <start> 1`, or `HGET key <start>` for a peek.
    pub(super) fn encode_take(out: &mut Vec<u8>, t: &Take) {
        if t.peek {
            resp::command_header(out, 3);
            resp::bulk(out, b"HGET");
        } else {
            resp::command_header(out, 4);
            resp::bulk(out, b"HINCRBY");
        }
        out.extend_from_slice(&t.key);
        resp::bulk_int(out, t.start);
        if !t.peek {
            resp::bulk_int(out, 1);
        }
    }

    /// `FCALL <fixed_window_mend> 1 key what start limit window`.
    pub(super) fn encode_mend(out: &mut Vec<u8>, function: &str, t: &Take, what: &str) {
        resp::command_header(out, 8);
        resp::bulk(out, b"FCALL");
        resp::bulk(out, function.as_bytes());
        resp::bulk_int(out, 1);
        out.extend_from_slice(&t.key);
        resp::bulk(out, what.as_bytes());
        resp::bulk_int(out, t.start);
        resp::bulk_int(out, t.args.limit);
        resp::bulk_int(out, t.args.window);
    }

    /// The reply to the write's `TIME` (`[seconds, microseconds]`); false if it is not one.
    pub(super) fn saw_time(&mut self, f: &Frame) -> bool {
        self.written_at = None;
        let Frame::Array(Some(parts)) = f else {
            return false;
        };
        let number = |f: &Frame| match f {
            Frame::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
            _ => None,
        };
        let (Some(s), Some(us)) = (
            parts.first().and_then(number),
            parts.get(1).and_then(number),
        ) else {
            return false;
        };
        let now = s.saturating_mul(1_000_000).saturating_add(us);
        self.written_at = Some(now);
        self.saw_clock(now);
        true
    }

    /// Decides a plain take from its reply, as `fixed_window.lua`'s common case does; `None`
    /// when the reply is not one (an error: Redis refused the command, nothing ran), which is
    /// then the caller's answer.
    pub(super) fn decide(&mut self, t: &Take, reply: &Frame) -> Option<PlainReply> {
        match (t.peek, reply) {
            (false, Frame::Integer(c)) => Some(self.decide_take(t, *c)),
            (true, Frame::Bulk(None)) => Some(self.undecided(t)),
            (true, Frame::Bulk(Some(b))) => {
                let c = std::str::from_utf8(b).ok()?.parse::<i64>().ok()?;
                Some(self.decide_peek(t, c))
            }
            _ => None,
        }
    }

    /// A peek that cannot reject: the script decides the take (nothing was written).
    fn undecided(&mut self, t: &Take) -> PlainReply {
        self.charged.remove(&t.fingerprint);
        PlainReply::Mend("decide")
    }

    /// A peek's `HGET` reply (`c`: the field, `count + 1`): the take is rejected when the
    /// algorithm rejects one hit on the count read, in the window of the write's `TIME`, as
    /// the script rejects it (a count read, nothing written: linearised at that read). Anything
    /// else (another window, a superseded field, room after a refund) goes to the script,
    /// which charges what it admits.
    fn decide_peek(&mut self, t: &Take, c: i64) -> PlainReply {
        let Some(now) = self.written_at else {
            return self.undecided(t);
        };
        let w = Window::epoch_aligned(now, t.args.window);
        let count = c - 1;
        if w.window_start != t.start || !(0..=COUNT_CAP as i64).contains(&count) {
            return self.undecided(t);
        }
        let state = fixed_window::State {
            window_start: t.start,
            count: count as u64,
        };
        let o = fixed_window::evaluate(t.args.limit as u64, Some(&state), w, Ask::take(1));
        if o.allowed {
            return self.undecided(t);
        }
        PlainReply::Answer(Frame::Array(Some(vec![
            Frame::Integer(now),
            Frame::Integer(0),
            Frame::Integer(0),
            Frame::Integer(o.reset),
        ])))
    }

    /// A take's `HINCRBY` reply (`c`: the field after it, `count + 1`).
    fn decide_take(&mut self, t: &Take, c: i64) -> PlainReply {
        let Some(now) = self.written_at else {
            return PlainReply::Mend("retake");
        };
        let w = Window::epoch_aligned(now, t.args.window);
        if w.window_start != t.start {
            // Sent across a window's edge: the hit is in a window Redis is not in.
            self.charged.remove(&t.fingerprint);
            return PlainReply::Mend("retake");
        }
        let count = c - 1;
        if count > COUNT_CAP as i64 {
            // The window was superseded by a later one (`SUPERSEDED`, expiry.lua), which is
            // where the take counts: the script decides it.
            self.charged.remove(&t.fingerprint);
            return PlainReply::Mend("retake");
        }
        if c < 2 {
            // The field was absent: this take made its window's mark.
            self.charged.remove(&t.fingerprint);
            return PlainReply::Mend("settle");
        }
        let end = w.window_end.min(MAX_SAFE as i64);
        let answer = |flags: i64, remaining: i64| {
            Frame::Array(Some(vec![
                Frame::Integer(now),
                Frame::Integer(flags),
                Frame::Integer(remaining),
                Frame::Integer(end - now),
            ]))
        };
        if count < t.args.limit {
            PlainReply::Answer(answer(3, t.args.limit - count))
        } else if count == t.args.limit {
            // The last hit: the key's next takes are peeks, which reject without writing, so
            // no plain take needs giving back (but those already sent).
            self.charged(t.fingerprint, t.start, true);
            PlainReply::Answer(answer(3, 0))
        } else {
            // Sent before the limit was seen reached: the script gives the hit back and
            // decides, in one call the caller waits for (no give-back left behind).
            self.charged.remove(&t.fingerprint);
            PlainReply::Mend("retake")
        }
    }
}

#[cfg(test)]
mod tests;
