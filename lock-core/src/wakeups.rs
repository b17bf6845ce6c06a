//! [`Wakeups`]: how this client learns that a lock it waits for was
//! released, owned by the client's core: this process's waiters (per node
//! that publishes releases) and the subscriber that feeds them.
//!
//! The backends store locks; they do not keep this process's waiters. A
//! backend only provides what it takes to hear its releases: the in-memory
//! store wakes its waiters directly ([`Wakeups::direct`]), a Redis node
//! through a subscription connection ([`Wakeups::subscribed`] with the
//! node's [`Subscription`]), and Redlock through one per master
//! ([`Wakeups::quorum`]). Everything above (waiting, the in-client hand-off,
//! hot locks) talks to this one concrete type.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::name::LockKey;
use crate::waiters::{Ask, WaitSet, Waiters};

/// A backend's subscription connection, run by a supervised task: it follows the channels that
/// [`Waiters`] has waiters on and delivers their messages to them.
pub(crate) trait Subscription: Send + Sync + fmt::Debug {
    /// (Re)starts the subscriber's task on the current runtime when it does
    /// not run (cheap while it runs).
    fn ensure(&self);

    /// Whether its task runs now (its confirmations of subscriptions go
    /// with it when it does not).
    fn is_running(&self) -> bool;

    /// Stops it for good (the client shut down).
    fn stop(&self);
}

/// How releases reach this process's waiters.
#[derive(Debug)]
enum Delivery {
    /// The store wakes waiters itself, in the release (in-memory).
    Direct,
    /// One subscription connection; this client's own release can hand the
    /// lock to its waiter in one round trip (see `waiters.rs`).
    Subscribed,
    /// One subscription per Redlock master: any of them wakes a waiter,
    /// and the quorum decides.
    Quorum,
}

/// One node's waiters and the subscriber that feeds them (none when the
/// store wakes them directly).
#[derive(Debug)]
struct Source {
    waiters: Arc<Waiters>,
    subscriber: Option<Arc<dyn Subscription>>,
}

impl Source {
    fn register(&self, key: &LockKey) -> crate::waiters::WakeHandle {
        let handle = self.waiters.register(&key.channel);
        if let Some(subscriber) = &self.subscriber {
            subscriber.ensure();
        }
        handle
    }
}

/// This client's wake-up state: its waiters and their subscribers.
#[derive(Debug)]
pub(crate) struct Wakeups {
    delivery: Delivery,
    sources: Vec<Source>,
}

impl Wakeups {
    /// Waiters woken by the store itself (the in-memory store, whose clients
    /// share `waiters`).
    pub(crate) fn direct(waiters: Arc<Waiters>) -> Self {
        Wakeups {
            delivery: Delivery::Direct,
            sources: vec![Source {
                waiters,
                subscriber: None,
            }],
        }
    }

    /// Waiters fed by `subscriber` (one Redis master, or a cluster's
    /// sharded subscriber).
    pub(crate) fn subscribed(waiters: Arc<Waiters>, subscriber: Arc<dyn Subscription>) -> Self {
        Wakeups {
            delivery: Delivery::Subscribed,
            sources: vec![Source {
                waiters,
                subscriber: Some(subscriber),
            }],
        }
    }

    /// One node's wake-ups per Redlock master.
    pub(crate) fn quorum(nodes: impl IntoIterator<Item = Wakeups>) -> Self {
        Wakeups {
            delivery: Delivery::Quorum,
            sources: nodes.into_iter().flat_map(|node| node.sources).collect(),
        }
    }

    /// The one node's waiters, where there is one node.
    fn single(&self) -> Option<&Waiters> {
        match (&self.delivery, self.sources.as_slice()) {
            (Delivery::Direct | Delivery::Subscribed, [one]) => Some(&one.waiters),
            _ => None,
        }
    }

    /// The one node's waiters, where a subscriber feeds them: this client's
    /// own release is then announced to them before its message arrives.
    fn subscribed_single(&self) -> Option<&Waiters> {
        match self.delivery {
            Delivery::Subscribed => self.single(),
            _ => None,
        }
    }

    /// Registers a waiter for the release of `key` on every node that may
    /// publish it (starting or restarting the subscribers on the current
    /// runtime as needed).
    pub(crate) fn waiter(&self, key: &LockKey) -> WaitSet {
        WaitSet::new(self.sources.iter().map(|s| s.register(key)).collect())
    }

    /// Registers a waiter for the release of `key` only when that costs
    /// nothing and covers the caller's next attempt: other waiters of this
    /// client already follow its channel and the subscription is confirmed
    /// (always, where the store wakes directly). Never with Redlock: one
    /// confirmed subscription of N does not cover the first attempt.
    pub(crate) fn waiter_if_subscribed(&self, key: &LockKey) -> Option<WaitSet> {
        let [source] = self.sources.as_slice() else {
            return None;
        };
        match (&self.delivery, &source.subscriber) {
            (Delivery::Direct, _) => Some(self.waiter(key)),
            (Delivery::Subscribed, Some(subscriber)) if subscriber.is_running() => {
                let handle = source.waiters.register_if_ready(&key.channel)?;
                Some(WaitSet::new(vec![handle]))
            }
            _ => None,
        }
    }

    /// This client's release of `key` is on its way (`true`) or deleted
    /// nothing after all (`false`): see [`Waiters::expect_wake`].
    pub(crate) fn expect_wake(&self, key: &LockKey, expected: bool) {
        if let Some(waiters) = self.subscribed_single() {
            waiters.expect_wake(&key.channel, expected);
        }
    }

    /// This client's release of `key` is queued on the command connection:
    /// wakes one of this client's waiters now, so its attempt follows it
    /// (see [`Waiters::wake_local`]).
    pub(crate) fn wake_local(&self, key: &LockKey, owner: &Arc<str>) {
        if let Some(waiters) = self.subscribed_single() {
            waiters.wake_local(&key.channel, owner);
        }
    }

    /// This client's release of its hot lock `key` is queued because another
    /// client asked for it: this client's waiters let the asker go first.
    pub(crate) fn yield_local(&self, key: &LockKey) {
        if let Some(waiters) = self.single() {
            waiters.yield_round(&key.channel);
        }
    }

    /// This client kept its hot lock `key` at a release: wakes one of this
    /// client's waiters, which takes it without a round trip.
    pub(crate) fn wake_kept(&self, key: &LockKey) {
        if let Some(waiters) = self.single() {
            waiters.wake_one(&key.channel);
        }
    }

    /// This client's release of `key` reached `count` subscriptions
    /// (`PUBLISH`'s reply): see [`Waiters::listeners`].
    pub(crate) fn listeners(&self, key: &LockKey, count: u64) {
        if let Some(waiters) = self.subscribed_single() {
            waiters.listeners(&key.channel, count);
        }
    }

    /// The requests other clients make for this client's hot locks, from the
    /// locks' channels; `None` where hot locks are not offered (Redlock).
    pub(crate) fn keeper(&self) -> Option<mpsc::UnboundedReceiver<Ask>> {
        self.single().map(Waiters::keeper)
    }

    /// Stops the subscribers for good (the client shut down and has no
    /// waiters any more).
    pub(crate) fn stop(&self) {
        for subscriber in self.sources.iter().filter_map(|s| s.subscriber.as_ref()) {
            subscriber.stop();
        }
    }
}
