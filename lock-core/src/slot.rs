//! Redis Cluster slots: which slot a key hashes to, and a short hash tag for
//! every slot (the per-slot fencing counters live under it).

use std::sync::OnceLock;

/// The number of cluster slots.
pub(crate) const SLOTS: u16 = 16384;

/// The slot of a hash tag: CRC16/XMODEM of its bytes, modulo 16384, as Redis
/// (and the `redis` crate's router) compute it. The caller passes the tag
/// itself, not a whole key.
pub(crate) fn of_tag(tag: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// A short hash tag that hashes to `slot` (base-36 digits): the first in
/// counting order, so every process derives the same one.
pub(crate) fn tag(slot: u16) -> String {
    let table = TAGS.get_or_init(build_tags);
    let index = table.get(usize::from(slot % SLOTS)).copied().unwrap_or(0);
    base36(index)
}

static TAGS: OnceLock<Vec<u32>> = OnceLock::new();

/// For each slot, the index of the first base-36 number whose digits hash to
/// it (about 170,000 candidates; a few milliseconds, once per process).
fn build_tags() -> Vec<u32> {
    let mut table = vec![u32::MAX; usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut index: u32 = 0;
    while missing > 0 && index < u32::MAX {
        let slot = usize::from(of_tag(base36(index).as_bytes()));
        if let Some(entry) = table.get_mut(slot) {
            if *entry == u32::MAX {
                *entry = index;
                missing -= 1;
            }
        }
        index += 1;
    }
    table
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = Vec::with_capacity(4);
    loop {
        digits.push(DIGITS.get((n % 36) as usize).copied().unwrap_or(b'0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn slots_agree_with_the_redis_crate() {
        // `redis` does not expose the number, but compares equal slots.
        for key in ["foo", "123456789", "order:42", "über 🔒", "a"] {
            let ours = Slot::new(of_tag(key.as_bytes())).unwrap();
            assert_eq!(ours, Slot::for_key(format!("x{{{key}}}y")), "{key}");
        }
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(of_tag(b"foo"), 12182);
        assert_eq!(of_tag(b"123456789"), 12739);
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = tag(slot);
            assert!(!tag.is_empty() && tag.len() <= 4, "{tag}");
            assert_eq!(of_tag(tag.as_bytes()), slot);
        }
    }
}
