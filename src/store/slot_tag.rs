//! Redis Cluster hash tags that name a slot: for each of the 16,384 slots, the shortest hex
//! string whose CRC16 falls in it. A reservation record's key carries the tag of its first
//! counter's slot, so that the record and that counter's refund are one script call, atomic
//! (a script may touch one slot only). Only the cluster cares, but every store's ids are
//! built alike, so a record outlives a change of topology.

use std::sync::LazyLock;

use fred::util::redis_keyslot;

const SLOTS: usize = 16_384;

/// Per slot, the number whose lowercase hex digits (no leading zeros) are its tag.
static TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; SLOTS];
    let mut left = SLOTS;
    let mut buf = [0u8; 8];
    // About a million candidates cover every slot (each misses a slot with odds e^-64).
    let mut n: u32 = 0;
    while left > 0 {
        let slot = usize::from(redis_keyslot(hex(n, &mut buf)));
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            left -= 1;
        }
        n += 1;
    }
    tags.into_boxed_slice()
});

fn hex(n: u32, buf: &mut [u8; 8]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = DIGITS[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// The slot of `key` (its `{...}` hash tag's, when it has one).
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    redis_keyslot(key)
}

/// The tag of `slot` (taken modulo the slot count).
pub(crate) fn tag(slot: u16) -> String {
    let mut buf = [0u8; 8];
    let n = TAGS[usize::from(slot) % SLOTS];
    String::from_utf8_lossy(hex(n, &mut buf)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in (0..SLOTS as u16).step_by(97).chain([0, 16_383]) {
            let t = tag(slot);
            assert!(t.len() <= 6 && t.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(slot_of(t.as_bytes()), slot, "tag {t}");
            assert_eq!(slot_of(format!("a:{{{t}}}b").as_bytes()), slot);
        }
    }
}
