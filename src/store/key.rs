//! Storage keys, built in one place for every store.
//!
//! `[prefix]sluice:v2:{<domain>|<k>=<v>|...}:<shape>`, or with `redis_hash_tag: domain`
//! `[prefix]sluice:v2:{<domain>}|<k>=<v>|...:<shape>` (every key of the domain in one slot).
//! A reservation record of the native API is `[prefix]sluice:v2:reservation:{<tag>}<random>`
//! ([`reservation`]).
//!
//! * Every user-supplied byte outside `[A-Za-z0-9._/@-]` is percent-encoded, `%` included, so
//!   the encoding is injective and the separators `|`, `=`, `~`, `:`, `{`, `}` never come from
//!   user data: two different descriptors can never share a key (envoyproxy/ratelimit's
//!   `key_value` joining can), and the `{...}` Redis Cluster hash tag always covers exactly the
//!   descriptor, so all limits of one descriptor share a slot.
//! * An entry counted per pattern rather than per value (`share_threshold`) is written
//!   `<k>~<pattern>`; the last entry of a `distinct` limit, whose values are what the state
//!   counts, is written `<k>#` (its value stays out of the key).
//! * The shape (algorithm, window, the layout-changing parameters `p=<precision>`,
//!   `tz=<zone>` and `set=hll`, and the limit's name inside `rate_limits`) is part of the key
//!   so a changed algorithm never misreads old state; the numbers (requests per unit, burst)
//!   are not, so raising a limit keeps the count. Optional parameters contain `=`, which a
//!   name never does (it is escaped), so the fields cannot be confused.

use super::slot_tag;
use crate::algorithm::Limit;
use crate::model::Entry;

/// The version of the key layout; bump it when the layout or a state encoding changes.
pub const VERSION: &str = "v2";

/// The key of a reservation record. The id is sluice's own (hex digits, never a client's
/// bytes: [`reservation`] refuses anything else), so it cannot collide with a counter's key,
/// whose `{` is followed by an escaped domain and a `|`. An id `<random>.<tag>` (see
/// [`reservation_id`]) keys `...:reservation:{<tag>}<random>`, in the slot of the counter the
/// tag names; an id of hex digits alone (older sluice) keys `...:reservation:{<id>}`.
pub fn reservation(prefix: &[u8], id: &str) -> Option<Vec<u8>> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let (tag, rest) = match id.split_once('.') {
        Some((random, tag)) if hex(random) && hex(tag) => (tag, random),
        None if hex(id) => (id, ""),
        _ => return None,
    };
    let mut out = Vec::with_capacity(prefix.len() + 40 + id.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(b"sluice:");
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b":reservation:{");
    out.extend_from_slice(tag.as_bytes());
    out.push(b'}');
    out.extend_from_slice(rest.as_bytes());
    Some(out)
}

/// The id of a new reservation whose record shares the Redis Cluster slot of counter key
/// `near` (`random`: hex digits).
pub fn reservation_id(random: &str, near: &[u8]) -> String {
    format!("{random}.{}", slot_tag::tag(slot_tag::slot_of(near)))
}

/// The claim a reservation keeps in `slot` besides its record (a record's counters may span
/// slots; see `RedisStore`'s settle): the record's key with that slot's tag in front of its
/// own, so each record has one claim per slot.
pub fn reservation_claim(record: &[u8], slot: u16) -> Vec<u8> {
    let tag = slot_tag::tag(slot);
    let open = record
        .iter()
        .position(|&b| b == b'{')
        .unwrap_or(record.len());
    let mut out = Vec::with_capacity(record.len() + tag.len() + 3);
    out.extend_from_slice(&record[..open]);
    out.push(b'{');
    out.extend_from_slice(tag.as_bytes());
    out.push(b'}');
    out.extend_from_slice(&record[open..]);
    out
}

/// One entry of a descriptor as it enters a key.
#[derive(Clone, Copy, Debug)]
pub enum Part<'a> {
    /// Counted per value.
    Value { key: &'a [u8], value: &'a [u8] },
    /// Counted per wildcard pattern, shared by every value matching it.
    Shared { key: &'a [u8], pattern: &'a [u8] },
    /// The entry whose distinct values a `distinct` limit counts.
    Counted { key: &'a [u8] },
}

/// What the `{...}` Redis Cluster hash tag of a key covers: a word of the rule vocabulary.
pub use crate::rules::policy::HashTag;

/// Builds the key of one limit of one descriptor into `out` (cleared first), hash tag per
/// descriptor.
pub fn build<'a>(
    out: &mut Vec<u8>,
    prefix: &[u8],
    domain: &str,
    parts: impl IntoIterator<Item = Part<'a>>,
    limit: &Limit,
    limit_name: Option<&str>,
) {
    build_tagged(
        out,
        prefix,
        domain,
        HashTag::Descriptor,
        parts,
        limit,
        limit_name,
    );
}

/// [`build`] with the hash tag covering `tag`.
pub fn build_tagged<'a>(
    out: &mut Vec<u8>,
    prefix: &[u8],
    domain: &str,
    tag: HashTag,
    parts: impl IntoIterator<Item = Part<'a>>,
    limit: &Limit,
    limit_name: Option<&str>,
) {
    out.clear();
    append_tagged(out, prefix, domain, tag, parts, limit, limit_name);
}

/// Appends the key of one limit of one descriptor to `out`: every entry by its value, except
/// an entry counted per wildcard pattern (`shared_pattern(i)` gives the pattern of entry `i`),
/// and, for a limit that `counts_values` (`distinct`), the last entry, whose values the state
/// counts; then the limit's part, `tail` ([`limit_tail`]). Returns where in `out` the tail
/// begins: what comes before is the descriptor's, the same for its other limits that do not
/// count values (a copy of it and their own tail make their keys).
#[allow(clippy::too_many_arguments)]
pub fn append_descriptor<'a>(
    out: &mut Vec<u8>,
    prefix: &[u8],
    domain: &str,
    tag: HashTag,
    entries: &'a [Entry],
    shared_pattern: impl Fn(usize) -> Option<&'a [u8]>,
    counts_values: bool,
    tail: &[u8],
) -> usize {
    let counted = if counts_values {
        entries.len().checked_sub(1)
    } else {
        None
    };
    let parts = entries.iter().enumerate().map(|(i, e)| {
        if Some(i) == counted {
            return Part::Counted { key: &e.key };
        }
        match shared_pattern(i) {
            Some(pattern) => Part::Shared {
                key: &e.key,
                pattern,
            },
            None => Part::Value {
                key: &e.key,
                value: &e.value,
            },
        }
    });
    append_head(out, prefix, domain, tag, parts);
    let head = out.len();
    out.extend_from_slice(tail);
    head
}

/// The limit's part of its keys (after the descriptor's), the same for every request: the
/// rule set keeps it once built (`RuleLimit::key_tail`).
pub fn limit_tail(tag: HashTag, limit: &Limit, limit_name: Option<&str>) -> Box<[u8]> {
    let mut out = Vec::new();
    append_limit(&mut out, tag, limit, limit_name);
    out.into()
}

/// [`build_tagged`] appending to `out` (several keys of a request share one buffer).
pub fn append_tagged<'a>(
    out: &mut Vec<u8>,
    prefix: &[u8],
    domain: &str,
    tag: HashTag,
    parts: impl IntoIterator<Item = Part<'a>>,
    limit: &Limit,
    limit_name: Option<&str>,
) {
    append_head(out, prefix, domain, tag, parts);
    append_limit(out, tag, limit, limit_name);
}

/// The descriptor's part of a key: the prefix, the domain and the entries.
fn append_head<'a>(
    out: &mut Vec<u8>,
    prefix: &[u8],
    domain: &str,
    tag: HashTag,
    parts: impl IntoIterator<Item = Part<'a>>,
) {
    out.extend_from_slice(prefix);
    out.extend_from_slice(b"sluice:");
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b":{");
    escape_into(out, domain.as_bytes());
    if tag == HashTag::Domain {
        out.push(b'}');
    }
    for part in parts {
        out.push(b'|');
        match part {
            Part::Value { key, value } => {
                escape_into(out, key);
                out.push(b'=');
                escape_into(out, value);
            }
            Part::Shared { key, pattern } => {
                escape_into(out, key);
                out.push(b'~');
                escape_into(out, pattern);
            }
            Part::Counted { key } => {
                escape_into(out, key);
                out.push(b'#');
            }
        }
    }
}

/// The limit's part of a key, after its descriptor's.
fn append_limit(out: &mut Vec<u8>, tag: HashTag, limit: &Limit, limit_name: Option<&str>) {
    out.extend_from_slice(if tag == HashTag::Domain { b":" } else { b"}:" });
    out.extend_from_slice(limit.algorithm().as_str().as_bytes());
    out.push(b':');
    push_decimal(out, limit.window() as u64);
    if let Some(p) = limit.precision() {
        out.extend_from_slice(b":p=");
        push_decimal(out, u64::from(p.get()));
    }
    if let Some(cal) = limit.calendar() {
        out.extend_from_slice(b":tz=");
        escape_into(out, cal.tz.name().as_bytes());
    }
    if limit.is_approximate() {
        out.extend_from_slice(b":set=hll");
    }
    if let Some(name) = limit_name {
        out.push(b':');
        escape_into(out, name.as_bytes());
    }
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'@' | b'-')
}

fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    // Most values are all plain: copied whole (a push per byte checked the capacity per
    // byte).
    if bytes.iter().all(|&b| is_plain(b)) {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        if is_plain(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests;
