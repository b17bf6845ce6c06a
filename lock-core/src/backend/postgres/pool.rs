//! A user's pool of tokio-postgres connections as the command path of the
//! Postgres backend ([`PostgresPool`]): each statement borrows a connection
//! for itself and gives it back, so the lock shares the pool's size, its
//! connection settings and its TLS with the service's own queries. The
//! wake-ups' `LISTEN` stays on a connection of its own (a pooled
//! connection's notifications are dropped by the pool's connection task).

use std::ops::Deref;

use futures_util::future::BoxFuture;
use tokio_postgres::Client;

/// Why a pool gave no connection (its own error type, boxed).
pub type PoolError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A pool of tokio-postgres connections the lock's statements are run on
/// (feature `postgres`; see [`LockClientBuilder::postgres_pool`](crate::LockClientBuilder::postgres_pool)).
///
/// Implemented for `deadpool_postgres::Pool` (feature `deadpool-postgres`)
/// and `bb8::Pool<bb8_postgres::PostgresConnectionManager<_>>` (feature
/// `bb8-postgres`). Another pool implements it in a few lines: borrow a
/// connection, and wrap whatever derefs to the [`Client`] in a
/// [`PooledClient`].
///
/// Every statement of the lock is one implicit transaction with nothing
/// kept in the session, so a connection is borrowed for one statement and
/// may have served anything before (a pool behind PgBouncer's transaction
/// pooling too).
pub trait PostgresPool: Send + Sync + 'static {
    /// Borrows a connection, given back when the [`PooledClient`] drops.
    /// The lock bounds the wait by the client's connect timeout: a pool
    /// that has no free connection within it fails the statement (for a
    /// renewal, the watchdog tries again; a lease that is not renewed in
    /// time is lost, `lost()` fires).
    fn get(&self) -> BoxFuture<'_, Result<PooledClient, PoolError>>;
}

/// A connection borrowed from a [`PostgresPool`]: anything that derefs to a
/// tokio-postgres [`Client`], owns its way back to the pool (no borrow of
/// the pool: bb8's `get_owned`, deadpool's `Object`) and gives the
/// connection back when dropped.
pub struct PooledClient {
    client: Box<dyn Deref<Target = Client> + Send + 'static>,
}

impl PooledClient {
    /// Wraps a pool's connection (`deadpool_postgres::Object` derefs to
    /// the client through its `ClientWrapper`: wrap it in a type whose
    /// `Deref` goes the whole way).
    pub fn new(client: impl Deref<Target = Client> + Send + 'static) -> Self {
        PooledClient {
            client: Box::new(client),
        }
    }
}

impl Deref for PooledClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::fmt::Debug for PooledClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClient")
            .field("closed", &self.client.is_closed())
            .finish()
    }
}

#[cfg(feature = "deadpool-postgres")]
mod deadpool {
    use std::ops::Deref;

    use futures_util::future::BoxFuture;
    use tokio_postgres::Client;

    use super::{PoolError, PooledClient, PostgresPool};

    /// A deadpool object, deref'd the whole way to the client.
    struct Object(deadpool_postgres::Object);

    impl Deref for Object {
        type Target = Client;

        fn deref(&self) -> &Client {
            &self.0
        }
    }

    impl PostgresPool for deadpool_postgres::Pool {
        fn get(&self) -> BoxFuture<'_, Result<PooledClient, PoolError>> {
            Box::pin(async move {
                let object = deadpool_postgres::Pool::get(self).await?;
                Ok(PooledClient::new(Object(object)))
            })
        }
    }
}

#[cfg(feature = "bb8-postgres")]
mod bb8 {
    use futures_util::future::BoxFuture;
    use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
    use tokio_postgres::Socket;

    use super::{PoolError, PooledClient, PostgresPool};

    impl<Tls> PostgresPool for ::bb8::Pool<bb8_postgres::PostgresConnectionManager<Tls>>
    where
        Tls: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        <Tls as MakeTlsConnect<Socket>>::Stream: Send + Sync,
        <Tls as MakeTlsConnect<Socket>>::TlsConnect: Send,
        <<Tls as MakeTlsConnect<Socket>>::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        fn get(&self) -> BoxFuture<'_, Result<PooledClient, PoolError>> {
            Box::pin(async move {
                let connection = ::bb8::Pool::get_owned(self).await?;
                Ok(PooledClient::new(connection))
            })
        }
    }
}
