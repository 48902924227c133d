//! What the in-memory store's byte cap counts, as the process really holds it: each key's and
//! state's heap block as the allocator rounds it, and each shard's hash table as allocated
//! (slots, control bytes and the free slots hashbrown keeps), read from the table itself and
//! rounded the same way.

use crate::algorithm::State;

/// glibc malloc's minimum chunk.
const MIN_CHUNK: usize = 32;
/// From this size glibc maps blocks of whole pages (its default `M_MMAP_THRESHOLD`).
const MMAP_THRESHOLD: usize = 128 * 1024;

/// The bytes a heap block of `n` requested bytes takes, under whichever of the two allocators
/// sluice runs on rounds it up more: the binary's jemalloc (`jemalloc`) or glibc's malloc (the
/// library's default). Under-counting jemalloc's rounding let large keys and tables (up to
/// 25% above their request) push the resident set past 1.25 times the cap.
pub(crate) fn allocated(n: usize) -> usize {
    glibc(n).max(jemalloc(n))
}

/// glibc: an 8-byte header, 16-byte granules and a 32-byte minimum; whole pages from 128 KiB.
fn glibc(n: usize) -> usize {
    match n {
        0 => 0,
        n if n >= MMAP_THRESHOLD => (n + 16).next_multiple_of(4096),
        n => (n + 8).next_multiple_of(16).max(MIN_CHUNK),
    }
}

/// jemalloc's size classes (x86-64, 4 KiB pages): 8, then multiples of 16 up to 128, then four
/// classes per doubling (160, 192, 224, 256, 320, ...), small and large alike; no header.
fn jemalloc(n: usize) -> usize {
    match n {
        0 => 0,
        1..=8 => 8,
        9..=128 => n.next_multiple_of(16),
        n => {
            let group = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            n.next_multiple_of(group / 4)
        }
    }
}

/// The heap bytes of one entry outside its table slot: the boxed key and the state's own
/// allocation, if any.
pub(crate) fn entry_bytes(key: &[u8], state: &State) -> usize {
    allocated(key.len()) + allocated(state.heap_bytes())
}

#[cfg(test)]
mod tests {
    use super::allocated;

    #[test]
    fn rounding_follows_the_larger_of_glibc_and_jemalloc() {
        let cases = [
            (0, 0),
            (1, 32),
            (24, 32),
            (25, 48),
            (54, 64),
            (57, 80),
            (129, 160),
            (257, 320),
            (4097, 5120),
            (16_385, 20_480),
            (128 * 1024, 128 * 1024 + 4096),
            (1_048_577 + 16_384, 1_310_720),
        ];
        for (n, want) in cases {
            assert_eq!(allocated(n), want, "{n}");
        }
    }
}
