//! [`MemoryFence`]: the highest token per key, in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::FenceError;

/// Claim-on-read fences kept in this process's memory: for a resource that
/// only one process serves (a single-process downstream service behind
/// [`FenceLayer`](crate::FenceLayer), a test), and the reference model of the
/// rule the Redis and PostgreSQL fences implement.
///
/// The rule, for every read and every write of `key` with `token`: refused
/// with [`FenceError::Stale`] when `token` is lower than the highest token
/// seen for `key`; otherwise `token` becomes the highest seen. Clones share
/// the fences.
#[derive(Debug, Clone, Default)]
pub struct MemoryFence {
    seen: Arc<Mutex<HashMap<String, u64>>>,
}

impl MemoryFence {
    /// No fences yet: every key has seen token 0.
    pub fn new() -> Self {
        MemoryFence::default()
    }

    /// Claims `key` for `token`: refused when a higher token has claimed it,
    /// else records `token` as the highest seen.
    pub fn claim(&self, key: &str, token: u64) -> Result<(), FenceError> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match seen.get_mut(key) {
            Some(highest) if token < *highest => Err(FenceError::Stale {
                key: key.to_owned(),
                token,
                seen: *highest,
            }),
            Some(highest) => {
                *highest = token;
                Ok(())
            }
            None => {
                seen.insert(key.to_owned(), token);
                Ok(())
            }
        }
    }

    /// The highest token that has claimed `key` (0 when none has), without
    /// claiming it.
    pub fn seen(&self, key: &str) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(key).copied().unwrap_or(0)
    }
}
