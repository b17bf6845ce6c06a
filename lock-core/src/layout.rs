//! [`Layout`]: how a client lays out its plain locks in Redis (a room of its own: the
//! error type names a client's layout, and the names module lays keys out by it).

/// How a client lays out its plain locks in Redis: its own layout, or
/// Redisson's, so that a lock of this client and a Redisson `RLock` /
/// `RFencedLock` of the same name exclude each other (see the guide's (`distlock::guide`)
/// "Sharing locks with Redisson").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Layout {
    /// This library's layout: hash `<prefix>{name}` (field owner, value
    /// fencing token), channel `<prefix>{name}:released`, fencing counter
    /// per cluster slot.
    #[default]
    Native,
    /// Redisson's layout (Redisson 3.24 to 4.x): hash `<prefix><name>`
    /// (field `<client uuid>:<n>`, value the hold count), channel
    /// `redisson_lock__channel:{<prefix><name>}`, unlock message `0`, and
    /// the fencing counter of `RFencedLock`,
    /// `redisson_lock_token:{<prefix><name>}`. The key prefix is empty
    /// unless one is set. The read-write lock is Redisson's
    /// `RReadWriteLock` (the hash `<prefix><name>` with field `mode`,
    /// channel `redisson_rwlock:{<prefix><name>}`), the semaphore is
    /// Redisson's `RPermitExpirableSemaphore` (the count `<prefix><name>`,
    /// channel `redisson_sc:{<prefix><name>}`); the fair lock is refused in
    /// this layout.
    Redisson,
}

impl Layout {
    /// The layout's name in the store's registry of layouts in use
    /// (`native`, `redisson`), as `lockctl layouts` prints it.
    pub fn registry_name(self) -> &'static str {
        match self {
            Layout::Native => "native",
            Layout::Redisson => "redisson",
        }
    }

    /// The layout registered as `name`, if it is one of this version's.
    pub(crate) fn from_registry_name(name: &str) -> Option<Self> {
        match name {
            "native" => Some(Layout::Native),
            "redisson" => Some(Layout::Redisson),
            _ => None,
        }
    }
}
