//! Holds: what a worker believed it held, when it may have been granted, and which holds
//! exclude one another.

use std::collections::BTreeSet;

use crate::event::{LockKind, TaskMode};

/// One hold of a lock.
#[derive(Debug, Clone)]
pub(super) struct Hold {
    pub(super) id: String,
    pub(super) worker: u32,
    pub(super) mode: TaskMode,
    pub(super) kind: LockKind,
    /// When the acquire call started.
    pub(super) asked: u64,
    pub(super) permits: u32,
    pub(super) total: u32,
    pub(super) min_hold: u64,
    pub(super) name: String,
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) lost: Option<u64>,
    pub(super) release: Option<String>,
    pub(super) release_start: Option<u64>,
    /// When the release answered (a loss before then and after its start happened while
    /// the release was on its way).
    pub(super) release_end: Option<u64>,
    /// The deadline at which a client's shutdown took the lock from this hold.
    pub(super) surrendered: Option<u64>,
    /// Why a fault could have touched it (empty: nothing did).
    pub(super) touched: BTreeSet<&'static str>,
    /// The start of the operator's force release that deleted this hold while it was held
    /// (see [`super::windows::force_released`]): from then on it is not protected, and
    /// another holder overlapping it is excused (`force_release`); its `lost()` is still
    /// held to the usual bound, and fencing is not excused.
    pub(super) forced: Option<u64>,
}

/// The task number in a hold id `w{worker}-t{task}-{seq}`.
pub(super) fn task_of_hold(hold: &str) -> u32 {
    hold.split('-')
        .nth(1)
        .and_then(|t| t.strip_prefix('t'))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// The lock key of name `name` (the library's default `lock:{name}`).
pub(super) fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// The key whose removal ends a hold of `kind` on `name` (for readers and permits: the
/// set of every holder, gone when the last one went).
pub(super) fn hold_key(kind: LockKind, name: &str) -> String {
    match kind {
        LockKind::Fair => format!("lock:{{{name}}}:fair"),
        LockKind::Read => format!("lock:{{{name}}}:rw:read"),
        LockKind::Write => format!("lock:{{{name}}}:rw:write"),
        LockKind::Permit => format!("lock:{{{name}}}:sem"),
        // Redisson's layout: the name itself, no prefix.
        LockKind::Redisson => name.to_owned(),
        _ => lock_key(name),
    }
}

/// The earliest moment the hold's lock may have been granted: `lock_all` takes its names
/// one after another during the call, so a name of it may be held from the call's start;
/// other holds from when the attempt that succeeded was sent: at most two response
/// timeouts before the acquisition's return (one send and the resend after a dropped
/// connection; Redlock asks its masters at once), and never before the call. The lock is
/// written on the servers then, so a data loss, or a pause of the acquiring process, between
/// that write and the return can undo it or outlast it before the holder knows it holds.
pub(super) fn granted_from(h: &Hold) -> u64 {
    if h.kind == LockKind::Multi {
        h.asked.min(h.start)
    } else {
        let attempt = 2 * crate::settings::RESPONSE_TIMEOUT.as_nanos() as u64;
        h.start.saturating_sub(attempt).max(h.asked).min(h.start)
    }
}

/// Whether two holds of one name must not overlap: holds of distinct owners, except two
/// readers, and semaphore permits (counted apart); uses of a hot lock are distinct holds
/// even under the one owner field the client keeps the lock with.
pub(super) fn excludes(a: &Hold, b: &Hold) -> bool {
    if a.kind == LockKind::Permit || b.kind == LockKind::Permit {
        return false;
    }
    if a.kind == LockKind::Read && b.kind == LockKind::Read {
        return false;
    }
    if [a.kind, b.kind]
        .iter()
        .any(|k| matches!(k, LockKind::Hot | LockKind::Sibling))
    {
        return a.id != b.id;
    }
    a.owner != b.owner
}

/// Whether `b` acquiring proves that `a`'s hold was gone (it could not have been granted
/// beside it): another owner's conflicting hold.
pub(super) fn displaces(a: &Hold, b: &Hold) -> bool {
    a.owner != b.owner
        && a.kind != LockKind::Permit
        && b.kind != LockKind::Permit
        && !(a.kind == LockKind::Read && b.kind == LockKind::Read)
}

/// Who a hold's holder is, for the fencing checks: its owner, but each sibling branch is a
/// holder of its own even when it reports its scope's owner (see [`LockKind::Sibling`]).
/// Holds of one holder may share a token (a re-entry, a hot lock keeper's uses); holds of
/// two may not.
pub(super) fn holder(h: &Hold) -> &str {
    if h.kind == LockKind::Sibling {
        &h.id
    } else {
        &h.owner
    }
}

/// The counter a hold's token came from, within its lock name: this library's layout takes
/// every primitive's tokens of a name from the counter of the name's slot (the memory
/// backend from its one counter), Redisson's layout from the name's own
/// `redisson_lock_token:{..}`. Two holds of one name and one counter never share a token
/// unless they share a holder.
pub(super) fn token_counter(h: &Hold) -> &'static str {
    if h.kind == LockKind::Redisson {
        "redisson"
    } else {
        "native"
    }
}

/// The first reason a hold was touched, in order of directness.
pub(super) fn reason(h: &Hold) -> Option<&'static str> {
    ["pause", "data_loss", "stall"]
        .into_iter()
        .find(|r| h.touched.contains(r))
}
