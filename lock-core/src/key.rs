//! Lock names and the Redis keys derived from them.

use std::sync::Arc;

use crate::LockError;

/// The longest lock name accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// A validated lock name with the Redis keys and channel derived from it.
///
/// `order:42` under prefix `lock:` is stored as `lock:{order:42}`; its fencing
/// counter is `lock:{order:42}:fence` and its wake-up channel
/// `lock:{order:42}:released`. The shared `{...}` hash tag puts all three in
/// one cluster slot.
#[derive(Debug, Clone)]
pub(crate) struct LockKey {
    pub(crate) name: Arc<str>,
    pub(crate) lock: Arc<str>,
    pub(crate) fence: Arc<str>,
    pub(crate) channel: Arc<str>,
}

impl LockKey {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, LockError> {
        if name.is_empty() {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "a lock name must not be empty",
            });
        }
        if name.len() > MAX_KEY_LEN {
            return Err(LockError::InvalidKey {
                key: display_name(name),
                reason: "a lock name must be at most 1024 bytes",
            });
        }
        // One buffer for the three names (this runs on every acquisition).
        let mut buf = String::with_capacity(prefix.len() + name.len() + 2 + ":released".len());
        buf.push_str(prefix);
        buf.push('{');
        buf.push_str(name);
        buf.push('}');
        let lock: Arc<str> = Arc::from(buf.as_str());
        let base = buf.len();
        buf.push_str(":fence");
        let fence: Arc<str> = Arc::from(buf.as_str());
        buf.truncate(base);
        buf.push_str(":released");
        Ok(LockKey {
            name: name.into(),
            lock,
            fence,
            channel: buf.into(),
        })
    }
}

/// A lock name cut to a length that fits an error message.
pub(crate) fn display_name(name: &str) -> String {
    const SHOWN: usize = 64;
    if name.len() <= SHOWN {
        return name.to_owned();
    }
    let mut end = SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let key = LockKey::new("lock:", "order:42").unwrap();
        assert_eq!(&*key.lock, "lock:{order:42}");
        assert_eq!(&*key.fence, "lock:{order:42}:fence");
        assert_eq!(&*key.channel, "lock:{order:42}:released");
    }

    #[test]
    fn empty_and_oversized_names_are_rejected() {
        assert!(matches!(
            LockKey::new("lock:", ""),
            Err(LockError::InvalidKey { .. })
        ));
        let long = "x".repeat(MAX_KEY_LEN + 1);
        match LockKey::new("lock:", &long) {
            Err(LockError::InvalidKey { key, .. }) => {
                assert!(key.starts_with("xxxx") && key.len() < 100, "{key}")
            }
            other => panic!("{other:?}"),
        }
        assert!(LockKey::new("lock:", &"x".repeat(MAX_KEY_LEN)).is_ok());
    }
}
