//! Settings that the orchestrator, the workers and the checker share: the checker's bounds
//! are computed from what the workers and the servers were configured with.

use std::time::Duration;

/// Response timeout of the workers' lock clients (part of the documented `lost()` bound).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// `min-replicas-max-lag` with `--min-replicas-to-write` (how long an old master may take
/// writes that were never replicated).
pub const MIN_REPLICAS_MAX_LAG: Duration = Duration::from_secs(2);

/// With `--fence-store lock-redis` on Sentinel and Cluster: how long the fence's `WAIT` (and
/// the lock client's `sync_replicas`, on Sentinel) waits for the replica.
pub const REPLICA_WAIT: Duration = Duration::from_millis(200);
