//! The wire conventions that the scripts (Lua on Redis, the in-memory
//! store's state machines) and the client's policy must agree on: field
//! suffixes and wake-up message prefixes. One bottom module, so that the
//! backends and the features above them read the same constants.

use std::time::Duration;

/// How a hot lock's field ends (see `hot/`): the acquire script asks a
/// keeper for a lock whose field ends so (and only for such a lock).
pub(crate) const KEEP_SUFFIX: &str = "~k";

/// The prefix of a request for a hot lock on its channel: `w <field>`.
pub(crate) const ASK_PREFIX: &str = "w ";

/// The prefix of the plain lock's release message in this library's layout:
/// `0 <owner>`, naming the owner whose release it announces (Redisson's
/// layout keeps Redisson's bare `0`). A client that already handed that
/// release's lock to one of its own waiters (the in-client hand-off) knows
/// the message is old news and wakes nobody with it; to every other reader it
/// is a release like any other (any message that is not an ask or a grant
/// wakes a waiter).
pub(crate) const RELEASE_PREFIX: &str = "0 ";

/// The prefix of a fair lock's grant on its channel: `g <owner> <token>`.
pub(crate) const GRANT_PREFIX: &str = "g ";

/// The longest a client waits for a hot lock another client keeps before it
/// asks again (the busy answer caps the holder's TTL at it): a keeper that
/// missed the request (its subscription was not confirmed yet) hears the
/// next one.
pub(crate) const ASK_AGAIN: Duration = Duration::from_millis(100);
