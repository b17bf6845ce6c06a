//! Lock names and the Redis keys and channel derived from them.
//!
//! Lock `order:42` under prefix `lock:` is the hash `lock:{order:42}` with
//! the wake-up channel `lock:{order:42}:released`; its fencing tokens come
//! from the counter of its cluster slot, `lock:fence:{<tag>}`, where `<tag>`
//! is a short string that hashes to the same slot. The name between the
//! braces is the whole hash tag, so every key and the channel of a lock sit
//! in one slot. For that, `{`, `}` and `%` in a name are stored
//! percent-escaped (`%7B`, `%7D`, `%25`): an unescaped `}` would end the tag
//! early (a name starting with `}` would leave it empty, and the keys would
//! hash apart).

use std::borrow::Cow;
use std::sync::Arc;

pub(crate) use crate::layout::Layout;
use crate::{slot, LockError};

/// The longest lock name accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Redisson's `prefixName`: `<prefix>:{<name>}`, or `<prefix>:<name>` when
/// the name contains a `{` (whether or not it is a valid hash tag).
fn redisson_prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName`: `{<name>}:<suffix>`, or `<name>:<suffix>` when
/// the name contains a `{`.
fn redisson_suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// Why Redisson's layout refuses `kind` (see the guide's (`distlock::guide`) "Sharing locks
/// with Redisson").
fn redisson_refusal(kind: Kind) -> &'static str {
    match kind {
        Kind::Fair => {
            "Redisson's RFairLock queues its waiters with deadlines computed from each \
             waiter's own wait (threadWaitTime) and the calling Java client's clock, and tells \
             only the head on a channel of its own; that is not matched, so a fair lock is \
             not shared with Redisson"
        }
        _ => "not laid out as Redisson does",
    }
}

/// The cluster slot of a whole Redis key, by Redis's hash-tag rule: the
/// bytes between the first `{` and the next `}` when they are not empty,
/// else the whole key.
pub(crate) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    if let Some(open) = bytes.iter().position(|&b| b == b'{') {
        let rest = bytes.get(open + 1..).unwrap_or_default();
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return slot::of_tag(rest.get(..close).unwrap_or_default());
            }
        }
    }
    slot::of_tag(bytes)
}

/// Which primitive of the lock family a key belongs to. Each has its own
/// keys and channel under the name's hash tag (see the guide's (`distlock::guide`) "Redis
/// layout"), so `lock("x")`, `fair_lock("x")`, `read_write_lock("x")` and
/// `semaphore("x", n)` are four independent things.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// The plain lock: hash `<prefix>{name}`, field owner, value token.
    Exclusive,
    /// The fair lock: hash `<prefix>{name}:fair` plus its queue.
    Fair,
    /// A read hold of a read-write lock: zset `<prefix>{name}:rw:read`.
    Read,
    /// The write hold of a read-write lock: hash `<prefix>{name}:rw:write`.
    Write,
    /// `take` of the `total` permits of a semaphore: zset `<prefix>{name}:sem`.
    Permits { take: u32, total: u32 },
}

impl Kind {
    /// The suffix of the family's keys after `<prefix>{tag}`.
    fn family(self) -> &'static str {
        match self {
            Kind::Exclusive => "",
            Kind::Fair => ":fair",
            Kind::Read | Kind::Write => ":rw",
            Kind::Permits { .. } => ":sem",
        }
    }

    /// The suffix of the key that holds this kind's holders, after the family's.
    fn holders(self) -> &'static str {
        match self {
            Kind::Read => ":read",
            Kind::Write => ":write",
            _ => "",
        }
    }

    /// The primitive, for messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::Exclusive => "lock",
            Kind::Fair => "fair lock",
            Kind::Read => "read lock",
            Kind::Write => "write lock",
            Kind::Permits { .. } => "semaphore",
        }
    }

    /// Whether many owners hold the primitive at once (reads, permits):
    /// another owner's hold does not make it busy.
    pub(crate) fn is_shared(self) -> bool {
        matches!(self, Kind::Read | Kind::Permits { .. })
    }
}

/// A string cut from a shared one: a lock's name and keys are parts of its
/// channel's text where they can be (`lock:{order:42}` and `order:42` are in
/// `lock:{order:42}:released`), so that a held lock does not allocate each.
/// Compares, hashes and prints as the string it stands for.
#[derive(Clone)]
pub(crate) struct KeyStr {
    text: Arc<str>,
    start: u32,
    end: u32,
}

impl KeyStr {
    /// All of `text`.
    pub(crate) fn whole(text: Arc<str>) -> Self {
        let end = u32::try_from(text.len()).unwrap_or(u32::MAX);
        KeyStr {
            text,
            start: 0,
            end,
        }
    }

    /// `range` of `text`, or a copy of that part when the range does not fit
    /// in the offsets (never, for a name of at most [`MAX_KEY_LEN`] bytes).
    fn part(text: &Arc<str>, range: std::ops::Range<usize>) -> Self {
        let part = text.get(range.clone()).unwrap_or_default();
        match (u32::try_from(range.start), u32::try_from(range.end)) {
            (Ok(start), Ok(end)) if part.len() == range.len() => KeyStr {
                text: text.clone(),
                start,
                end,
            },
            _ => KeyStr::whole(part.into()),
        }
    }

    /// `part` of `text` where it occurs in it, else a copy of `part`.
    fn found(text: &Arc<str>, part: &str) -> Self {
        match text.find(part) {
            Some(at) => KeyStr::part(text, at..at.saturating_add(part.len())),
            None => KeyStr::whole(part.into()),
        }
    }

    /// The part of this string from byte `from` on.
    fn tail(&self, from: usize) -> Self {
        let start = (self.start as usize).saturating_add(from);
        KeyStr::part(&self.text, start..self.end as usize)
    }

    /// The string.
    pub(crate) fn as_str(&self) -> &str {
        self.text
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }
}

impl std::ops::Deref for KeyStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for KeyStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for KeyStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for KeyStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for KeyStr {}

impl std::hash::Hash for KeyStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl std::fmt::Display for KeyStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for KeyStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<&str> for KeyStr {
    fn from(text: &str) -> Self {
        KeyStr::whole(text.into())
    }
}

impl From<String> for KeyStr {
    fn from(text: String) -> Self {
        KeyStr::whole(text.into())
    }
}

/// A validated lock name with the Redis keys and channel derived from it.
///
/// The name, the lock key and the channel are one allocation when the
/// layout allows (see [`KeyStr`]); what differs (a read or write hold's key
/// apart from its family's stem, Redisson's own counters) is in `extra`.
#[derive(Debug, Clone)]
pub(crate) struct LockKey {
    /// The name as the caller gave it.
    pub(crate) name: KeyStr,
    /// The key that holds the holders: the lock's hash, the readers' or the
    /// permits' sorted set.
    pub(crate) lock: KeyStr,
    /// The wake-up channel.
    pub(crate) channel: Arc<str>,
    /// The primitive.
    pub(crate) kind: Kind,
    /// The cluster slot of all three.
    pub(crate) slot: u16,
    /// The layout the keys follow.
    pub(crate) layout: Layout,
    /// Whether this acquisition waits, so that a busy fair lock queues it
    /// and a busy write lock records its intent (not kept by holders).
    pub(crate) queue: bool,
    /// The length of the key prefix at the start of `lock`.
    prefix_len: u32,
    /// What is not `lock` itself (most locks: nothing).
    extra: Option<Box<Extra>>,
}

/// The keys of a lock that are not its lock key.
#[derive(Debug, Clone, Default)]
struct Extra {
    /// What a holder is known by, when it is not the lock key.
    id: Option<KeyStr>,
    /// The stem, when it is not the lock key.
    base: Option<KeyStr>,
    /// The fencing counter, when it is the lock's own (Redisson's layout);
    /// else the counter of the slot (see [`fence`](LockKey::fence)).
    own_fence: Option<Arc<str>>,
}

/// Refuses an empty name and one over [`MAX_KEY_LEN`] bytes (both layouts).
fn check_name(name: &str) -> Result<(), LockError> {
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
    Ok(())
}

impl LockKey {
    /// The keys of lock `name` under `prefix` (checked by [`check_prefix`]).
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, LockError> {
        Self::of_kind(prefix, name, Kind::Exclusive)
    }

    /// The keys of `kind` of the family named `name` under `prefix`.
    pub(crate) fn of_kind(prefix: &str, name: &str, kind: Kind) -> Result<Self, LockError> {
        check_name(name)?;
        let tag = escape(name);
        let slot = slot::of_tag(tag.as_bytes());
        // One buffer for the channel, which holds the lock key and (unless
        // escaped) the name (this runs on every acquisition).
        let family = kind.family();
        let mut buf =
            String::with_capacity(prefix.len() + tag.len() + 2 + family.len() + ":released".len());
        buf.push_str(prefix);
        buf.push('{');
        buf.push_str(&tag);
        buf.push('}');
        buf.push_str(family);
        let base_len = buf.len();
        buf.push_str(":released");
        let channel: Arc<str> = buf.into();
        let base = KeyStr::part(&channel, 0..base_len);
        let name = match tag {
            Cow::Borrowed(_) => {
                let start = prefix.len().saturating_add(1);
                KeyStr::part(&channel, start..start.saturating_add(name.len()))
            }
            Cow::Owned(_) => KeyStr::from(name),
        };
        let (lock, extra) = match kind.holders() {
            "" => (base, None),
            holders => (
                KeyStr::from(format!("{base}{holders}")),
                Some(Box::new(Extra {
                    base: Some(base),
                    ..Extra::default()
                })),
            ),
        };
        Ok(LockKey {
            name,
            kind,
            queue: false,
            lock,
            prefix_len: u32::try_from(prefix.len()).unwrap_or(u32::MAX),
            channel,
            slot,
            layout: Layout::Native,
            extra,
        })
    }

    /// The keys of plain lock `name` in Redisson's layout under `prefix`
    /// (empty by default in that layout): the hash is the name itself.
    /// Refuses a name whose hash, channel and token counter would land in
    /// different cluster slots (Redisson adds no hash tag to a name that
    /// contains `{`, so `a{b` or `a{}b` would split).
    pub(crate) fn redisson(prefix: &str, name: &str) -> Result<Self, LockError> {
        check_name(name)?;
        let raw = format!("{prefix}{name}");
        let channel = redisson_prefixed("redisson_lock__channel", &raw);
        let fence = redisson_prefixed("redisson_lock_token", &raw);
        let slot = key_slot(&raw);
        if key_slot(&channel) != slot || key_slot(&fence) != slot {
            return Err(LockError::InvalidKey {
                key: display_name(name),
                reason: "in Redisson's layout this name's lock key, channel and token counter \
                         would hash to different cluster slots (Redisson puts a name without \
                         `{` in braces, so a name with `{` or `}` needs a non-empty `{tag}`)",
            });
        }
        let channel: Arc<str> = channel.into();
        let lock = KeyStr::found(&channel, &raw);
        Ok(LockKey {
            name: lock.tail(prefix.len()),
            kind: Kind::Exclusive,
            queue: false,
            lock,
            prefix_len: u32::try_from(prefix.len()).unwrap_or(u32::MAX),
            channel,
            slot,
            layout: Layout::Redisson,
            extra: Some(Box::new(Extra {
                own_fence: Some(fence.into()),
                ..Extra::default()
            })),
        })
    }

    /// The keys of `kind` of Redisson's lock family named `name` under
    /// `prefix` (Redisson's layout): a read or the write hold of Redisson's
    /// `RReadWriteLock` (the hash `<prefix><name>` with field `mode`,
    /// channel `redisson_rwlock:{..}`), or permits of its
    /// `RPermitExpirableSemaphore` (the count `<prefix><name>`, the
    /// deadlines `{..}:timeout`, channel `redisson_sc:{..}`). Refuses what [`redisson`](LockKey::redisson)
    /// refuses, and the kinds Redisson's layout does not match
    /// (`Unsupported`, naming why).
    pub(crate) fn redisson_family(prefix: &str, name: &str, kind: Kind) -> Result<Self, LockError> {
        let (channel_prefix, family) = match kind {
            Kind::Exclusive => return Self::redisson(prefix, name),
            Kind::Read | Kind::Write => ("redisson_rwlock", "\u{0}rw"),
            Kind::Permits { .. } => ("redisson_sc", "\u{0}sem"),
            Kind::Fair => {
                return Err(LockError::Unsupported {
                    key: display_name(name),
                    primitive: kind.describe(),
                    backend: "a client in Redisson's layout",
                    reason: redisson_refusal(kind),
                })
            }
        };
        let plain = Self::redisson(prefix, name)?;
        let raw = plain.lock;
        let channel: Arc<str> = redisson_prefixed(channel_prefix, &raw).into();
        let lock = KeyStr::found(&channel, &raw);
        // Redisson's `suffixName` rule puts the readers' timeout keys in
        // the slot of the channel, checked equal to the hash's by `redisson`.
        let base = KeyStr::from(format!("{raw}{family}"));
        let id = match kind {
            Kind::Read => Some(KeyStr::from(format!("{base}:read"))),
            Kind::Write => Some(KeyStr::from(format!("{base}:write"))),
            _ => None,
        };
        let own_fence = plain.extra.and_then(|extra| extra.own_fence);
        Ok(LockKey {
            name: lock.tail(plain.prefix_len as usize),
            kind,
            queue: false,
            lock,
            prefix_len: plain.prefix_len,
            channel,
            slot: plain.slot,
            layout: Layout::Redisson,
            extra: Some(Box::new(Extra {
                id,
                base: Some(base),
                own_fence,
            })),
        })
    }

    /// Redisson's read-write lock: the prefix of a reader's timeout keys,
    /// `{<name>}:<field>:rwlock_timeout` (`<name>:<field>:..` when the name
    /// has a `{`), one key per hold, `:<n>` appended
    /// (`RedissonReadLock.getReadWriteTimeoutNamePrefix`).
    pub(crate) fn redisson_read_timeouts(&self, field: &str) -> String {
        let mut key = redisson_suffixed(&self.lock, field);
        key.push_str(":rwlock_timeout");
        key
    }

    /// Redisson's `RPermitExpirableSemaphore`: its permits' deadlines,
    /// `{<name>}:timeout` (`<name>:timeout` when the name has a `{`).
    pub(crate) fn redisson_permit_timeouts(&self) -> String {
        redisson_suffixed(&self.lock, "timeout")
    }

    /// Redisson's read-write lock: what every reader's timeout keys start
    /// with, `{<name>}` (`<name>` when the name has a `{`), before
    /// `:<field>:rwlock_timeout:<n>` (`RedissonReadLock.getKeyPrefix`).
    pub(crate) fn redisson_timeouts_stem(&self) -> String {
        if self.lock.contains('{') {
            self.lock.to_string()
        } else {
            format!("{{{}}}", self.lock)
        }
    }

    /// Redisson's fair-lock queue of this name (a list), whose presence
    /// means the name is used as a Redisson fair lock.
    pub(crate) fn redisson_queue(&self) -> String {
        redisson_prefixed("redisson_lock_queue", &self.lock)
    }

    /// The stem of the family's keys, `<prefix>{tag}` plus the family's
    /// suffix (`lock:{x}:rw` for a read-write lock).
    pub(crate) fn stem(&self) -> &KeyStr {
        self.extra
            .as_ref()
            .and_then(|extra| extra.base.as_ref())
            .unwrap_or(&self.lock)
    }

    /// What a holder is known by in a scope and among a client's holders:
    /// the key of its holders (`lock`), which differs between the
    /// primitives, and between a read and a write hold of one name.
    pub(crate) fn id(&self) -> &KeyStr {
        self.extra
            .as_ref()
            .and_then(|extra| extra.id.as_ref())
            .unwrap_or(&self.lock)
    }

    /// The record of the role whose lock this is (leadership, `leader/`):
    /// the key `<lock>:leader` and its channel `<lock>:leader:changed`, in
    /// the lock's slot. Native layout only (leadership refuses Redisson's).
    pub(crate) fn leader_record(&self) -> LockKey {
        let channel: Arc<str> = format!("{}:leader:changed", self.lock).into();
        let lock = KeyStr::part(&channel, 0..self.lock.len().saturating_add(":leader".len()));
        LockKey {
            name: self.name.clone(),
            lock,
            channel,
            kind: Kind::Exclusive,
            slot: self.slot,
            layout: self.layout,
            queue: false,
            prefix_len: self.prefix_len,
            extra: None,
        }
    }

    /// Another key of the lock's family: its stem plus `suffix`
    /// (`:queue`, `:read`, ...), in the same slot.
    pub(crate) fn aux(&self, suffix: &str) -> String {
        let base = self.stem();
        let mut key = String::with_capacity(base.len() + suffix.len());
        key.push_str(base);
        key.push_str(suffix);
        key
    }

    /// The fencing counter of the lock's slot (shared with the other locks
    /// of that slot). Built when needed, not kept with every held lock.
    pub(crate) fn fence(&self) -> String {
        if let Some(own) = self
            .extra
            .as_ref()
            .and_then(|extra| extra.own_fence.as_ref())
        {
            return own.to_string();
        }
        fence_key(
            self.lock
                .get(..self.prefix_len as usize)
                .unwrap_or_default(),
            self.slot,
        )
    }
}

/// The fencing counter of `slot` under `prefix`.
pub(crate) fn fence_key(prefix: &str, slot: u16) -> String {
    let mut key = String::with_capacity(prefix.len() + "fence:{}".len() + 4);
    key.push_str(prefix);
    key.push_str("fence:{");
    slot::push_tag(&mut key, slot);
    key.push('}');
    key
}

/// Refuses a key prefix that would put its own hash tag into the keys.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::InvalidConfig {
            key: "*".into(),
            reason: format!(
                "a key prefix must not contain `{{` or `}}` (the lock name is the hash tag), got {prefix:?}"
            ),
        });
    }
    Ok(())
}

/// The lock name stored under `key`, when `key` is the hash of a lock of
/// `prefix` (`<prefix>{escaped name}`).
pub(crate) fn name_of(prefix: &str, key: &str) -> Option<String> {
    let tag = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    if tag.is_empty() || tag.contains('}') {
        return None;
    }
    unescape(tag)
}

/// The hash tag of lock name `name`: the name with `%`, `{` and `}`
/// percent-escaped.
pub(crate) fn escape(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '{', '}']) {
        return Cow::Borrowed(name); // the usual case: no copy
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn unescape(tag: &str) -> Option<String> {
    let mut out = String::with_capacity(tag.len());
    let mut rest = tag;
    while let Some(at) = rest.find('%') {
        out.push_str(rest.get(..at)?);
        let code = rest.get(at..at + 3)?;
        out.push(match code {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = rest.get(at + 3..)?;
    }
    out.push_str(rest);
    Some(out)
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
    format!(
        "{}... ({} bytes)",
        name.get(..end).unwrap_or_default(),
        name.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let key = LockKey::new("lock:", "order:42").unwrap();
        assert_eq!(&*key.lock, "lock:{order:42}");
        assert_eq!(&*key.channel, "lock:{order:42}:released");
        assert_eq!(key.slot, slot::of_tag(b"order:42"));
        assert!(key.fence().starts_with("lock:fence:{"), "{}", key.fence());
    }

    /// The slot of a whole key, the way Redis finds its hash tag.
    fn redis_slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tag = bytes
            .iter()
            .position(|&b| b == b'{')
            .and_then(|open| {
                let rest = &bytes[open + 1..];
                let close = rest.iter().position(|&b| b == b'}')?;
                (close > 0).then(|| &rest[..close])
            })
            .unwrap_or(bytes);
        slot::of_tag(tag)
    }

    #[test]
    fn every_key_of_any_name_is_in_one_slot() {
        for name in [
            "}x",
            "{",
            "}",
            "a}b{c",
            "%7D",
            "50%",
            "{}",
            "über 🔒",
            "a\nb",
            "x{y}z",
        ] {
            let key = LockKey::new("lock:", name).unwrap();
            let slot = redis_slot(&key.lock);
            assert_eq!(slot, key.slot, "{name}");
            assert_eq!(redis_slot(&key.channel), slot, "{name}");
            assert_eq!(redis_slot(&key.fence()), slot, "{name}");
            assert_eq!(name_of("lock:", &key.lock).as_deref(), Some(name));
        }
    }

    /// Redisson's read-write lock: the hash, the channel, the token counter
    /// and a reader's timeout keys share the hash's slot, as Redisson names
    /// them; read and write holds have different ids on one stem.
    #[test]
    fn redisson_read_write_keys_share_one_slot() {
        for name in ["order:42", "{tag}:x", "a{b}c", "über 🔒"] {
            let read = LockKey::redisson_family("", name, Kind::Read).unwrap();
            let write = LockKey::redisson_family("", name, Kind::Write).unwrap();
            assert_eq!(&*read.lock, name);
            assert_eq!(read.lock, write.lock);
            assert_eq!(read.channel, write.channel);
            assert_ne!(read.id(), write.id());
            assert_eq!(read.stem(), write.stem());
            assert_eq!(
                write.aux(":read"),
                **read.id(),
                "UpgradeRefused finds the read hold"
            );
            let timeouts = read.redisson_read_timeouts("u:1");
            let stem = read.redisson_timeouts_stem();
            assert!(timeouts.starts_with(&stem), "{timeouts} {stem}");
            for key in [&*read.channel, &read.fence(), &timeouts, &stem] {
                assert_eq!(redis_slot(key), read.slot, "{name}: {key}");
            }
        }
        let read = LockKey::redisson_family("", "order:42", Kind::Read).unwrap();
        assert_eq!(&*read.channel, "redisson_rwlock:{order:42}");
        assert_eq!(
            read.redisson_read_timeouts("u:1"),
            "{order:42}:u:1:rwlock_timeout"
        );
        let read = LockKey::redisson_family("", "{t}:x", Kind::Read).unwrap();
        assert_eq!(&*read.channel, "redisson_rwlock:{t}:x");
        assert_eq!(
            read.redisson_read_timeouts("u:1"),
            "{t}:x:u:1:rwlock_timeout"
        );
        assert_eq!(read.redisson_timeouts_stem(), "{t}:x");
        assert!(matches!(
            LockKey::redisson_family("", "x", Kind::Fair),
            Err(LockError::Unsupported { .. })
        ));
        let permits = Kind::Permits { take: 1, total: 2 };
        for name in ["order:42", "{tag}:x"] {
            let sem = LockKey::redisson_family("", name, permits).unwrap();
            assert_eq!(&*sem.lock, name);
            for key in [&*sem.channel, &sem.redisson_permit_timeouts(), &sem.fence()] {
                assert_eq!(redis_slot(key), sem.slot, "{name}: {key}");
            }
        }
        let sem = LockKey::redisson_family("", "order:42", permits).unwrap();
        assert_eq!(&*sem.channel, "redisson_sc:{order:42}");
        assert_eq!(sem.redisson_permit_timeouts(), "{order:42}:timeout");
        assert!(matches!(
            LockKey::redisson_family("", "a{b", Kind::Read),
            Err(LockError::InvalidKey { .. })
        ));
    }

    /// Whether `part` is stored inside `whole`'s allocation.
    fn inside(part: &str, whole: &str) -> bool {
        let (start, end) = (
            whole.as_ptr() as usize,
            whole.as_ptr() as usize + whole.len(),
        );
        let at = part.as_ptr() as usize;
        at >= start && at + part.len() <= end
    }

    /// A held lock keeps its name and lock key inside its channel's text
    /// (one allocation, not three), except what cannot be cut from it.
    #[test]
    fn the_name_and_lock_key_are_cut_from_the_channel() {
        let key = LockKey::new("lock:", "order:42").unwrap();
        assert_eq!(&*key.name, "order:42");
        assert_eq!(&*key.lock, "lock:{order:42}");
        assert_eq!(&**key.id(), "lock:{order:42}");
        assert_eq!(&**key.stem(), "lock:{order:42}");
        assert!(inside(&key.name, &key.channel));
        assert!(inside(&key.lock, &key.channel));
        // An escaped name is its own string; its keys still share one.
        let escaped = LockKey::new("lock:", "a}b").unwrap();
        assert_eq!(&*escaped.name, "a}b");
        assert_eq!(&*escaped.lock, "lock:{a%7Db}");
        assert!(inside(&escaped.lock, &escaped.channel));
        // A read hold: its key is the stem plus `:read`, the stem is cut.
        let read = LockKey::of_kind("lock:", "x", Kind::Read).unwrap();
        assert_eq!(&*read.lock, "lock:{x}:rw:read");
        assert_eq!(&**read.stem(), "lock:{x}:rw");
        assert_eq!(&*read.channel, "lock:{x}:rw:released");
        assert!(inside(read.stem(), &read.channel));
        // Redisson's layout: the hash is inside the channel's text.
        let redisson = LockKey::redisson("p:", "order:42").unwrap();
        assert_eq!(&*redisson.lock, "p:order:42");
        assert_eq!(&*redisson.name, "order:42");
        assert!(inside(&redisson.lock, &redisson.channel));
        assert_eq!(redisson.fence(), "redisson_lock_token:{p:order:42}");
    }

    #[test]
    fn escaping_is_injective() {
        let a = LockKey::new("lock:", "}").unwrap();
        let b = LockKey::new("lock:", "%7D").unwrap();
        assert_ne!(a.lock, b.lock);
    }

    #[test]
    fn lock_names_are_recognised_by_their_key_shape() {
        assert_eq!(
            name_of("lock:", "lock:{order:42}").as_deref(),
            Some("order:42")
        );
        assert_eq!(name_of("lock:", "lock:{order:42}:released"), None);
        assert_eq!(name_of("lock:", "lock:fence:{a1}"), None);
        assert_eq!(name_of("lock:", "lock:{}"), None);
        assert_eq!(name_of("lock:", "other:{a}"), None);
        assert_eq!(name_of("lock:", "lock:{%zz}"), None);
    }

    #[test]
    fn bad_names_and_prefixes_are_refused() {
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
        assert!(check_prefix("a{b}:").is_err());
        assert!(check_prefix("billing:lock:").is_ok());
    }
}
