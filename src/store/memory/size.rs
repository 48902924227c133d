//! What the in-memory store's byte cap counts, as the process really holds it: each key's and
//! state's heap block as the allocator rounds it, and each shard's hash table as allocated
//! (slots, control bytes and the free slots hashbrown keeps), read from the table itself.

use crate::algorithm::{distinct, State};

/// glibc malloc's minimum chunk.
const MIN_CHUNK: usize = 32;
/// From this size glibc maps blocks of whole pages (its default `M_MMAP_THRESHOLD`).
const MMAP_THRESHOLD: usize = 128 * 1024;

/// The bytes a heap block of `n` requested bytes takes: glibc's 8-byte header, 16-byte
/// granules and 32-byte minimum; whole pages from 128 KiB. Other allocators round
/// similarly or less.
pub fn allocated(n: usize) -> usize {
    match n {
        0 => 0,
        n if n >= MMAP_THRESHOLD => (n + 16).next_multiple_of(4096),
        n => (n + 8).next_multiple_of(16).max(MIN_CHUNK),
    }
}

/// The heap bytes of one entry outside its table slot: the boxed key and the state's own
/// allocation, if any.
pub fn entry_bytes(key: &[u8], state: &State) -> usize {
    allocated(key.len()) + allocated(state_heap(state))
}

/// Requested heap bytes of a state beyond its inline size.
fn state_heap(state: &State) -> usize {
    let words = |n: usize| n * 8;
    match state {
        State::FixedWindow(_) | State::Bucket(_) => 0,
        State::SlidingWindow(s) => words(s.counts.capacity()),
        State::SlidingLog(s) => words(s.log.capacity()),
        // (expiry, leases): two words per group.
        State::Concurrency(s) => words(2 * s.leases.capacity()),
        State::Distinct(s) => match &s.values {
            distinct::Values::Exact(v) => words(v.capacity()),
            distinct::Values::Hll(r) => r.len(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::allocated;

    #[test]
    fn rounding_follows_glibc() {
        let cases = [
            (0, 0),
            (1, 32),
            (24, 32),
            (25, 48),
            (54, 64),
            (56, 64),
            (57, 80),
            (128 * 1024, 128 * 1024 + 4096),
        ];
        for (n, want) in cases {
            assert_eq!(allocated(n), want, "{n}");
        }
    }
}
