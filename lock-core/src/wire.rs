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

/// The prefix of a fair lock's grant on its channel: `g <owner> <token>`.
pub(crate) const GRANT_PREFIX: &str = "g ";

/// The longest a client waits for a hot lock another client keeps before it
/// asks again (the busy answer caps the holder's TTL at it): a keeper that
/// missed the request (its subscription was not confirmed yet) hears the
/// next one.
pub(crate) const ASK_AGAIN: Duration = Duration::from_millis(100);
