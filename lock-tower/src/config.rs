//! [`Config`]: what a layer hands each of its services, the settings every
//! flavour shares (client, key extractor, key check, lock options, what a
//! lost lock does to a running request, mode),
//! written once, next to the flavour's own.

use std::fmt;
use std::sync::Arc;

use distlock_core::{Lock, LockClient, LockError, LockOptions};

use crate::mode::LockMode;

/// A check of the lock names a key extractor gives; see
/// [`LockLayer::validate_key`](crate::LockLayer::validate_key).
pub(crate) type KeyCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What a [`LockService`](crate::LockService) needs: the client, the
/// extractor and its check, the lock options, the flavour and the mode.
#[derive(Clone)]
pub(crate) struct Config<K, P, M> {
    pub(crate) client: LockClient,
    pub(crate) extractor: K,
    pub(crate) check: Option<KeyCheck>,
    /// Wait, lease and minimum hold of every lock the layer takes.
    pub(crate) options: LockOptions,
    /// Whether a lock lost while the handler runs drops the handler's future
    /// and answers as for `LeaseLost` (see
    /// [`LockLayer::abort_on_lost`](crate::LockLayer::abort_on_lost)).
    pub(crate) abort_on_lost: bool,
    /// The flavour and its own options; each request's future holds it too.
    pub(crate) flavour: Arc<P>,
    pub(crate) mode: M,
}

impl<K, P, M> Config<K, P, M> {
    /// Refuses `key` when the layer's
    /// [`validate_key`](crate::LockLayer::validate_key) check does, as an
    /// invalid lock name.
    pub(crate) fn check(&self, key: &str) -> Result<(), LockError> {
        match &self.check {
            Some(check) if !check(key) => Err(LockError::InvalidKey {
                key: shown(key),
                reason: "refused by the service's key check",
            }),
            _ => Ok(()),
        }
    }

    /// The lock `request` takes on `key` in the layer's mode, with the
    /// layer's options.
    pub(crate) fn lock<R>(&self, key: String, request: &R) -> Lock
    where
        M: LockMode<R>,
    {
        self.mode
            .lock_for(&self.client, key, request)
            .options(self.options)
    }

    /// The same settings with another flavour.
    pub(crate) fn with_flavour<Q>(self, flavour: Q) -> Config<K, Q, M> {
        let Config {
            client,
            extractor,
            check,
            options,
            abort_on_lost,
            flavour: _,
            mode,
        } = self;
        Config {
            client,
            extractor,
            check,
            options,
            abort_on_lost,
            flavour: Arc::new(flavour),
            mode,
        }
    }

    /// The same settings in another mode.
    pub(crate) fn with_mode<N>(self, mode: N) -> Config<K, P, N> {
        let Config {
            client,
            extractor,
            check,
            options,
            abort_on_lost,
            flavour,
            mode: _,
        } = self;
        Config {
            client,
            extractor,
            check,
            options,
            abort_on_lost,
            flavour,
            mode,
        }
    }

    /// The settings, for the `Debug` output of the layer and the service.
    pub(crate) fn debug_fields(&self, out: &mut fmt::DebugStruct<'_, '_>)
    where
        P: fmt::Debug,
        M: fmt::Debug,
    {
        out.field("client", &self.client)
            .field("extractor", &std::any::type_name::<K>())
            .field("validate_key", &self.check.is_some())
            .field("options", &self.options)
            .field("abort_on_lost", &self.abort_on_lost)
            .field("flavour", &self.flavour)
            .field("mode", &self.mode);
    }
}

/// A lock name cut to a length that fits an error message (as distlock-core
/// shows names in its errors): a refused name comes from the client and may
/// be long.
fn shown(key: &str) -> String {
    const SHOWN: usize = 64;
    if key.len() <= SHOWN {
        return key.to_owned();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... ({} bytes)",
        key.get(..end).unwrap_or_default(),
        key.len()
    )
}
