//! Redis Cluster key slots: CRC16 (XMODEM) of the key or of its hash tag, modulo 16384.

/// Number of hash slots in a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The cluster slot of `key`, computed as Redis does (`CLUSTER KEYSLOT`).
///
/// If the key contains a hash tag, a `{...}` part whose `{` is the first `{` of the key and
/// whose `}` is the first `}` after it, with at least one byte in between, only the bytes
/// between the braces are hashed; so `{user1}.a` and `{user1}.b` share a slot. The hash is
/// CRC16-XMODEM (polynomial 0x1021, initial value 0), taken modulo 16384.
///
/// ```
/// use lock_test_support::key_slot;
///
/// assert_eq!(key_slot(b"foo"), 12182);
/// assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % CLUSTER_SLOTS
}

/// The part of `key` that is hashed: the hash tag if there is a non-empty one, else the key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// CRC16-XMODEM, bit by bit (the inputs are tiny).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_reference_check_value() {
        // The check value of CRC-16/XMODEM, also used in the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_redis() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{foo}.bar"), key_slot(b"foo"));
        assert_eq!(key_slot(b"x{foo}y{bar}"), key_slot(b"foo"));
        // Empty tag: the whole key is hashed.
        assert_eq!(hash_tag(b"{}foo"), b"{}foo");
        // No closing brace: the whole key is hashed.
        assert_eq!(hash_tag(b"{foo"), b"{foo");
        // The first '}' after the first '{' ends the tag.
        assert_eq!(hash_tag(b"{{foo}}"), b"{foo");
        assert_eq!(hash_tag(b"a}{b}"), b"b");
    }
}
