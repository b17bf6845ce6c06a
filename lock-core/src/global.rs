//! The process-wide client that `#[distributed_lock]` functions use when
//! they name none.

use std::sync::RwLock;

use crate::LockClient;

static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

/// Installs `client` as the process-wide client, the one
/// `#[distributed_lock]` functions without a `client = ...` option lock
/// with. Returns the client installed before, if any (it keeps working for
/// whoever still holds it).
///
/// ```
/// let previous = distlock_core::set_global_client(distlock_core::LockClient::memory());
/// assert!(previous.is_none());
/// assert!(distlock_core::global_client().is_some());
/// ```
pub fn set_global_client(client: LockClient) -> Option<LockClient> {
    let mut global = GLOBAL
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    global.replace(client)
}

/// The process-wide client installed by [`set_global_client`], if any.
pub fn global_client() -> Option<LockClient> {
    GLOBAL
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}
