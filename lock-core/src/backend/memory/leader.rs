//! Leader election's records (leadership, `leader/`) in the in-memory
//! store, as `redis/lua/leader_*.lua` keep them on Redis: a role's record
//! names the term (the role lock's fencing token), its owner, when it was
//! first proclaimed and the leader's metadata; it is shown only while its
//! owner holds the role's lock with that token.

use std::time::Duration;

use tokio::time::Instant;

use super::{after, State};
use crate::backend::{LeaderRecord, LEADER_RECORD_TTL};
use crate::name::LockKey;

/// One role's record.
#[derive(Debug)]
pub(super) struct Record {
    term: u64,
    owner: Box<str>,
    since_ms: u64,
    metadata: String,
    expires_at: Instant,
}

/// The wall clock in ms since the Unix epoch (the store's "server time"),
/// from the clock the store's fencing tokens are floored by.
fn now_ms() -> u64 {
    super::clock_micros() / 1000
}

/// The holder of `role`'s lock and its token, with its remaining lease.
fn holder(state: &State, role: &LockKey, now: Instant) -> Option<(Box<str>, u64, Duration)> {
    let entry = state.locks.get(&*role.lock).filter(|e| e.live(now))?;
    Some((
        entry.owner.clone(),
        entry.token,
        entry.expires_at.saturating_duration_since(now),
    ))
}

/// See `Backend::leader_proclaim`.
pub(super) fn proclaim(
    state: &mut State,
    role: &LockKey,
    record: &LockKey,
    owner: &str,
    metadata: &str,
) -> Option<LeaderRecord> {
    let now = Instant::now();
    let (holder, term, lease_left) = holder(state, role, now)?;
    if *holder != *owner {
        return None;
    }
    let wall = now_ms();
    if state.leaders.len() > 64 {
        state.leaders.retain(|_, r| r.expires_at > now);
    }
    let since_ms = match state.leaders.get(&*record.lock) {
        Some(old) if old.term == term && *old.owner == *owner && old.expires_at > now => {
            old.since_ms
        }
        _ => wall,
    };
    state.leaders.insert(
        record.lock.clone(),
        Record {
            term,
            owner: holder.clone(),
            since_ms,
            metadata: metadata.to_owned(),
            expires_at: after(now, LEADER_RECORD_TTL),
        },
    );
    Some(LeaderRecord {
        term,
        owner: holder.into(),
        lease_left,
        now_ms: wall,
        since_ms: Some(since_ms),
        metadata: Some(metadata.to_owned()),
    })
}

/// See `Backend::leader_read`.
pub(super) fn read(state: &State, role: &LockKey, record: &LockKey) -> Option<LeaderRecord> {
    let now = Instant::now();
    let (owner, term, lease_left) = holder(state, role, now)?;
    let proclaimed = state
        .leaders
        .get(&*record.lock)
        .filter(|r| r.term == term && r.owner == owner && r.expires_at > now)
        .map(|r| (r.since_ms, r.metadata.clone()));
    Some(LeaderRecord {
        term,
        owner: owner.into(),
        lease_left,
        now_ms: now_ms(),
        since_ms: proclaimed.as_ref().map(|(since, _)| *since),
        metadata: proclaimed.map(|(_, metadata)| metadata),
    })
}

/// See `Backend::leader_vacate`.
pub(super) fn vacate(state: &mut State, record: &LockKey, term: u64) {
    if state
        .leaders
        .get(&*record.lock)
        .is_some_and(|r| r.term == term)
    {
        state.leaders.remove(&*record.lock);
    }
}
