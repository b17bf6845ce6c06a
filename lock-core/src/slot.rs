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
#[cfg(test)]
pub(crate) fn tag(slot: u16) -> String {
    let mut tag = String::new();
    push_tag(&mut tag, slot);
    tag
}

/// Appends the tag of `slot` (see [`tag`]) to `out`.
pub(crate) fn push_tag(out: &mut String, slot: u16) {
    let table = TAGS.get_or_init(build_tags);
    let index = table.get(usize::from(slot % SLOTS)).copied().unwrap_or(0);
    push_base36(out, index);
}

static TAGS: OnceLock<Vec<u32>> = OnceLock::new();

/// For each slot, the index of the first base-36 number whose digits hash to
/// it (about 170,000 candidates; a few milliseconds, once per process).
fn build_tags() -> Vec<u32> {
    let mut table = vec![u32::MAX; usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut index: u32 = 0;
    let mut digits = String::with_capacity(8);
    while missing > 0 && index < u32::MAX {
        digits.clear();
        push_base36(&mut digits, index);
        let slot = usize::from(of_tag(digits.as_bytes()));
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

fn push_base36(out: &mut String, mut n: u32) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // u32::MAX has 7 base-36 digits; written from the right.
    let mut digits = [b'0'; 7];
    let mut at = digits.len();
    loop {
        at -= 1;
        if let (Some(slot), Some(&digit)) = (digits.get_mut(at), DIGITS.get((n % 36) as usize)) {
            *slot = digit;
        }
        n /= 36;
        if n == 0 || at == 0 {
            break;
        }
    }
    for &digit in digits.get(at..).unwrap_or_default() {
        out.push(char::from(digit));
    }
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
    fn base36_digits() {
        for (n, text) in [(0, "0"), (35, "z"), (36, "10"), (u32::MAX, "1z141z3")] {
            let mut out = String::new();
            push_base36(&mut out, n);
            assert_eq!(out, text);
        }
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
