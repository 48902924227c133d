//! Redis Cluster hash tags that name a slot: for each of the 16,384 slots, the shortest hex
//! string whose CRC16 falls in it. A reservation record's key carries the tag of its first
//! counter's slot, so that the record and that counter's refund are one script call, atomic
//! (a script may touch one slot only). Only the cluster cares, but every store's ids are
//! built alike, so a record outlives a change of topology.

use std::sync::LazyLock;

const SLOTS: usize = 16_384;

/// Per slot, the number whose lowercase hex digits (no leading zeros) are its tag.
static TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; SLOTS];
    let mut left = SLOTS;
    let mut buf = [0u8; 8];
    // About a million candidates cover every slot (each misses a slot with odds e^-64).
    let mut n: u32 = 0;
    while left > 0 {
        let slot = usize::from(slot_of(hex(n, &mut buf)));
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

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, the bytes between the
/// first `{` and the next `}` when not empty, else of the whole key, modulo 16,384.
pub fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// CRC16-CCITT as Redis Cluster uses it (XMODEM: polynomial 0x1021, initial 0).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
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
    fn slots_are_redis_cluster_slots() {
        // Known values: `CLUSTER KEYSLOT` on a real server, and the check value of CRC16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b""), 0);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"{user1000}.followers"), slot_of(b"user1000"));
        // An empty tag, or no closing brace: the whole key.
        assert_eq!(slot_of(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16_384);
        assert_eq!(slot_of(b"foo{bar"), crc16(b"foo{bar") % 16_384);
        // Only the first tag counts.
        assert_eq!(slot_of(b"{a}{b}"), slot_of(b"a"));
        assert_eq!(slot_of(b"x{{bar}}"), crc16(b"{bar") % 16_384);
    }

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
