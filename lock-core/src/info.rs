//! What inspection reports about a lock: [`LockInfo`] and [`LockHolder`].

use std::time::Duration;

/// What the backend knows about one lock, as returned by
/// [`LockClient::inspect`](crate::LockClient::inspect) and
/// [`LockClient::list`](crate::LockClient::list).
///
/// A snapshot taken in one round trip; the lock may change right after.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field (the holder's `ttl` as `ttl_ms`, see [`LockHolder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (`order:42`), without the key prefix.
    pub name: String,
    /// The backend's key of the lock (`lock:{order:42}` with the default
    /// prefix).
    pub key: String,
    /// The backend's key of the counter this lock's fencing tokens come from
    /// (`lock:fence:{<tag>}`, shared by the locks of one cluster slot). After
    /// Redis lost its data, an operator sets it above the highest token the
    /// guarded resources have seen.
    pub fence_key: String,
    /// The current holder, or `None` when the lock is free.
    pub holder: Option<LockHolder>,
    /// The value of the counter this lock's fencing tokens come from, or
    /// `None` when it never issued one. The counter is shared by the locks
    /// whose names hash to the same cluster slot (so it is at least this
    /// lock's last token, and may be higher); the next holder of this lock
    /// gets a higher token. It survives the lock's expiry and release.
    pub last_fencing_token: Option<u64>,
}

/// The holder of a lock, as the backend records it.
///
/// The backend stores one entry per holding owner, not a hold count:
/// reentrant (nested) holds are counted inside the holder's process
/// ([`LockGuard::hold_count`](crate::LockGuard::hold_count)) and are not
/// visible here. [`LockHolder::holds`] is what the backend sees.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field, except that `ttl` is written as `ttl_ms`: whole milliseconds (the
/// unit Redis reports it in), or `null` when the lock has no expiry:
/// `{"owner": "...", "fencing_token": 7, "ttl_ms": 29500, "holds": 1}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// The fencing token this holder was given.
    pub fencing_token: u64,
    /// The remaining lease, or `None` when the lock has no expiry (which the
    /// lock itself never sets: someone wrote the key by hand).
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", with = "ttl_millis"))]
    pub ttl: Option<Duration>,
    /// Holds as the backend records them: 1 per holding owner (so 1 for a
    /// healthy lock). Nested holds inside the owner are not counted here.
    pub holds: usize,
}

impl LockHolder {
    /// The id of the client holding the lock (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        self.owner
            .rsplit_once(':')
            .map_or(&*self.owner, |(client, _)| client)
    }
}

/// `LockHolder::ttl` as whole milliseconds.
#[cfg(feature = "serde")]
mod ttl_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        ttl: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        ttl.map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn serializes_with_the_ttl_in_milliseconds() {
        let info = LockInfo {
            name: "order:42".into(),
            key: "lock:{order:42}".into(),
            fence_key: "lock:fence:{a1}".into(),
            holder: Some(LockHolder {
                owner: "c1:7".into(),
                fencing_token: 12,
                ttl: Some(Duration::from_micros(29_500_400)),
                holds: 1,
            }),
            last_fencing_token: Some(12),
        };
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "order:42",
                "key": "lock:{order:42}",
                "fence_key": "lock:fence:{a1}",
                "holder": {"owner": "c1:7", "fencing_token": 12, "ttl_ms": 29500, "holds": 1},
                "last_fencing_token": 12,
            })
        );
        let back: LockInfo = serde_json::from_value(json).unwrap();
        let ttl = back.holder.as_ref().and_then(|h| h.ttl);
        assert_eq!(ttl, Some(Duration::from_millis(29_500)));

        let free = serde_json::json!({
            "name": "a", "key": "lock:{a}", "fence_key": "lock:fence:{a}",
            "holder": {"owner": "c1:1", "fencing_token": 1, "ttl_ms": null, "holds": 1},
            "last_fencing_token": null,
        });
        let free: LockInfo = serde_json::from_value(free).unwrap();
        assert_eq!(free.holder.unwrap().ttl, None);
        assert_eq!(free.last_fencing_token, None);
    }
}
