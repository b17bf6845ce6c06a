//! Where a data key's fence lives: a hash in the data key's cluster slot.
//!
//! The fence of data key `K` is the hash `<prefix>{T}:K`, where `T` is a hash
//! tag that hashes to `K`'s slot:
//!
//! - `K`'s own hash tag when it has one, by Redis's rule (the bytes between
//!   the first `{` and the next `}`, when not empty): `user:{42}:cart` ->
//!   `fence:{42}:user:{42}:cart`;
//! - else `K` itself, when it has no `}` and is not empty: `order:42` ->
//!   `fence:{order:42}:order:42`;
//! - else (an empty key, or one with a `}` but no hash tag, such as `a}b`)
//!   a short base-36 string chosen to hash to `K`'s slot: `fence:{x1}:a}b`.
//!
//! The prefix has no brace, so the first `{...}` of the fence key is `{T}`
//! and the fence hashes to `K`'s slot in every case. `T` has no `}`, so the
//! fence key names `K` unambiguously (`K` follows the first `}:`).

use std::sync::OnceLock;

/// The number of Redis Cluster slots.
const SLOTS: u16 = 16384;

/// The cluster slot of `bytes` as a whole (CRC16/XMODEM modulo 16384).
fn slot_of(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes) % SLOTS
}

/// The hash tag Redis uses for `key`: the bytes between the first `{` and
/// the next `}`, when there are such and they are not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let (_, rest) = key.split_once('{')?;
    let close = rest.find('}')?;
    rest.get(..close).filter(|tag| !tag.is_empty())
}

/// The fence key of `key` under `prefix` (which has no brace).
pub(crate) fn fence_key(prefix: &str, key: &str) -> String {
    let mut out = String::with_capacity(
        prefix
            .len()
            .saturating_add(key.len().saturating_mul(2))
            .saturating_add(4),
    );
    out.push_str(prefix);
    out.push('{');
    match hash_tag(key) {
        Some(tag) => out.push_str(tag),
        None if !key.is_empty() && !key.contains('}') => out.push_str(key),
        None => push_slot_tag(&mut out, slot_of(key.as_bytes())),
    }
    out.push_str("}:");
    out.push_str(key);
    out
}

/// Appends a short string that hashes to `slot`: the first base-36 number
/// in counting order that does, so every process derives the same one.
fn push_slot_tag(out: &mut String, slot: u16) {
    static TAGS: OnceLock<Vec<u32>> = OnceLock::new();
    let table = TAGS.get_or_init(build_tags);
    let index = table.get(usize::from(slot % SLOTS)).copied().unwrap_or(0);
    push_base36(out, index);
}

/// For each slot, the first base-36 number whose digits hash to it (about
/// 170,000 candidates, a few milliseconds, once per process).
fn build_tags() -> Vec<u32> {
    let mut table = vec![u32::MAX; usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut index: u32 = 0;
    let mut digits = String::with_capacity(8);
    while missing > 0 && index < u32::MAX {
        digits.clear();
        push_base36(&mut digits, index);
        if let Some(entry) = table.get_mut(usize::from(slot_of(digits.as_bytes()))) {
            if *entry == u32::MAX {
                *entry = index;
                missing = missing.saturating_sub(1);
            }
        }
        index = index.saturating_add(1);
    }
    table
}

fn push_base36(out: &mut String, mut n: u32) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = Vec::with_capacity(7);
    loop {
        if let Some(&digit) = DIGITS.get((n % 36) as usize) {
            digits.push(char::from(digit));
        }
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.extend(digits.iter().rev());
}

/// The slot Redis puts `key` in, by the hash-tag rule.
pub(crate) fn key_slot(key: &str) -> u16 {
    slot_of(hash_tag(key).unwrap_or(key).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_hashes_to_the_slot_of_its_key() {
        for key in [
            "order:42",
            "user:{42}:cart",
            "{}x",
            "a}b",
            "}",
            "",
            "{a",
            "x{}{y}",
            "{{a}}",
            "a{b}c}d",
            "é{ü}",
        ] {
            let fence = fence_key("fence:", key);
            assert_eq!(key_slot(&fence), key_slot(key), "{key:?} -> {fence:?}");
            assert!(fence.ends_with(key), "{fence:?}");
        }
        assert_eq!(fence_key("fence:", "order:42"), "fence:{order:42}:order:42");
        assert_eq!(
            fence_key("fence:", "user:{42}:cart"),
            "fence:{42}:user:{42}:cart"
        );
    }

    #[test]
    fn every_slot_has_a_tag() {
        for slot in 0..SLOTS {
            let mut tag = String::new();
            push_slot_tag(&mut tag, slot);
            assert_eq!(slot_of(tag.as_bytes()), slot);
            assert!(!tag.contains(['{', '}']));
        }
    }
}
