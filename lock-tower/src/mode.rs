//! The layer's modes: which primitive of the lock family a request takes on
//! the name its key extractor gives.
//!
//! A [`LockLayer`](crate::LockLayer) is in exactly one mode, part of its
//! type, chosen once on a layer still in the default [`Exclusive`] mode:
//!
//! | mode | made by | a request takes |
//! |---|---|---|
//! | [`Exclusive`] | [`LockLayer::new`](crate::LockLayer::new) | `client.lock(key)` |
//! | [`Fair`] | [`.fair()`](crate::LockLayer::fair) | `client.fair_lock(key)`: granted in arrival order |
//! | [`ReadWrite`] | [`.read_write(select)`](crate::LockLayer::read_write) | `client.read_write_lock(key)`, its `.read()` or `.write()` as `select` says ([`Access`]) |
//! | [`ConcurrencyLimit`] | [`.concurrency_limit(max)`](crate::LockLayer::concurrency_limit) | one permit of `client.semaphore(key, max)`: at most `max` requests per key at once |
//!
//! The mode methods exist only on a layer in the [`Exclusive`] mode, so a
//! layer cannot be made fair and limited, say: `.fair().concurrency_limit(5)`
//! does not compile. The options of the busy answer (`busy_status`, ...)
//! exist only in the modes that lock ([`LockingMode`]), those of the
//! over-the-limit answer (`limit_status`, ...) only in [`ConcurrencyLimit`].

use std::fmt;

use distlock_core::{Lock, LockClient};
use http::{Method, Request};

/// Whether a request reads or writes what its key names, in the
/// [`ReadWrite`] mode: readers share the read lock, a writer holds the write
/// lock alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The read lock, shared with other readers.
    Read,
    /// The write lock, exclusive of readers and other writers.
    Write,
}

impl Access {
    /// [`Read`](Access::Read) for the safe methods of RFC 9110 (`GET`,
    /// `HEAD`, `OPTIONS`, `TRACE`), [`Write`](Access::Write) for every other
    /// method (`POST`, `PUT`, `PATCH`, `DELETE`, extension methods).
    ///
    /// ```
    /// use http::Method;
    /// use distlock_tower::Access;
    ///
    /// assert_eq!(Access::of_method(&Method::GET), Access::Read);
    /// assert_eq!(Access::of_method(&Method::POST), Access::Write);
    /// ```
    pub fn of_method(method: &Method) -> Access {
        if method == Method::GET
            || method == Method::HEAD
            || method == Method::OPTIONS
            || method == Method::TRACE
        {
            Access::Read
        } else {
            Access::Write
        }
    }
}

/// Chooses, in the [`ReadWrite`] mode, whether a request takes the read or
/// the write lock. It runs once per locked request, synchronously, after the
/// key extractor.
///
/// Any `Fn(&R) -> Access` is one (annotate the closure's argument type), and
/// [`SafeMethods`] is the usual choice for HTTP:
///
/// ```
/// use http::{Method, Request};
/// use distlock_tower::{Access, SelectAccess};
///
/// // Reports are read-only even when POSTed.
/// let select = |req: &Request<()>| {
///     if req.uri().path().ends_with("/report") {
///         Access::Read
///     } else {
///         Access::of_method(req.method())
///     }
/// };
/// let req = |method, uri| Request::builder().method(method).uri(uri).body(()).unwrap();
/// assert_eq!(select.access(&req(Method::POST, "/prices/report")), Access::Read);
/// assert_eq!(select.access(&req(Method::POST, "/prices/7")), Access::Write);
/// ```
pub trait SelectAccess<R> {
    /// Whether `request` reads or writes.
    fn access(&self, request: &R) -> Access;
}

impl<R, F> SelectAccess<R> for F
where
    F: Fn(&R) -> Access,
{
    fn access(&self, request: &R) -> Access {
        self(request)
    }
}

/// The ready-made [`SelectAccess`] for HTTP: the safe methods (`GET`,
/// `HEAD`, `OPTIONS`, `TRACE`) read, every other method writes (see
/// [`Access::of_method`]).
///
/// Every gRPC call is a `POST`, so for tonic choose by the call's path
/// instead (a closure on `http::Request<tonic::body::Body>`).
///
/// ```
/// use http::{Method, Request};
/// use distlock_tower::{Access, SafeMethods, SelectAccess};
///
/// let req = |method| Request::builder().method(method).body(()).unwrap();
/// assert_eq!(SafeMethods.access(&req(Method::HEAD)), Access::Read);
/// assert_eq!(SafeMethods.access(&req(Method::DELETE)), Access::Write);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SafeMethods;

impl<B> SelectAccess<Request<B>> for SafeMethods {
    fn access(&self, request: &Request<B>) -> Access {
        Access::of_method(request.method())
    }
}

/// The default mode: each request takes the plain lock of its key
/// (`client.lock(key)`), one holder at a time, in no particular order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exclusive;

/// The fair mode, made by [`LockLayer::fair`](crate::LockLayer::fair): each
/// request takes the fair lock of its key (`client.fair_lock(key)`), one
/// holder at a time, granted in the order the requests asked, across every
/// replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fair;

/// The read-write mode, made by
/// [`LockLayer::read_write`](crate::LockLayer::read_write): each request
/// takes the read or the write lock (as its [`SelectAccess`] says) of the
/// read-write lock of its key (`client.read_write_lock(key)`).
#[derive(Clone, Copy, Default)]
pub struct ReadWrite<A> {
    select: A,
}

impl<A> ReadWrite<A> {
    pub(crate) fn new(select: A) -> Self {
        ReadWrite { select }
    }

    /// What chooses between the read and the write lock.
    pub fn select(&self) -> &A {
        &self.select
    }
}

impl<A> fmt::Debug for ReadWrite<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWrite")
            .field("select", &std::any::type_name::<A>())
            .finish()
    }
}

/// The concurrency-limit mode, made by
/// [`LockLayer::concurrency_limit`](crate::LockLayer::concurrency_limit):
/// each request takes one permit of the semaphore of its key
/// (`client.semaphore(key, max).permit()`), so at most `max` requests per
/// key run at once across every replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    max: u32,
}

impl ConcurrencyLimit {
    pub(crate) fn new(max: u32) -> Self {
        ConcurrencyLimit { max }
    }

    /// The most requests per key that run at once.
    pub fn max(&self) -> u32 {
        self.max
    }
}

/// The layer's mode for requests of type `R`: [`Exclusive`], [`Fair`],
/// [`ReadWrite`] (with a [`SelectAccess<R>`](SelectAccess)) or
/// [`ConcurrencyLimit`]. Sealed: the layer's modes are these four.
pub trait LockMode<R>: sealed::Mode<R> {}

impl<R, M: sealed::Mode<R>> LockMode<R> for M {}

/// The modes that lock ([`Exclusive`], [`Fair`], [`ReadWrite`]), as opposed
/// to [`ConcurrencyLimit`]: a request that does not get its lock is answered
/// as busy (409, `ABORTED`), so the busy answer's options apply to them.
/// Sealed.
pub trait LockingMode: sealed::Locking {}

impl<M: sealed::Locking> LockingMode for M {}

// Public traits in a private module: nameable (and implementable) only in
// this crate, which seals `LockMode` and `LockingMode`.
mod sealed {
    use super::*;

    pub trait Mode<R> {
        /// The lock `request` takes on `key`, before the layer's wait and
        /// lease.
        fn lock_for(&self, client: &LockClient, key: String, request: &R) -> Lock;

        /// The concurrency limit, in that mode: its busy errors mean the
        /// limit was reached.
        fn limit(&self) -> Option<u32> {
            None
        }
    }

    pub trait Locking {}

    impl<R> Mode<R> for Exclusive {
        fn lock_for(&self, client: &LockClient, key: String, _: &R) -> Lock {
            client.lock(key)
        }
    }

    impl<R> Mode<R> for Fair {
        fn lock_for(&self, client: &LockClient, key: String, _: &R) -> Lock {
            client.fair_lock(key)
        }
    }

    impl<R, A: SelectAccess<R>> Mode<R> for ReadWrite<A> {
        fn lock_for(&self, client: &LockClient, key: String, request: &R) -> Lock {
            let lock = client.read_write_lock(key);
            match self.select.access(request) {
                Access::Read => lock.read(),
                Access::Write => lock.write(),
            }
        }
    }

    impl<R> Mode<R> for ConcurrencyLimit {
        fn lock_for(&self, client: &LockClient, key: String, _: &R) -> Lock {
            client.semaphore(key, self.max).permit()
        }

        fn limit(&self) -> Option<u32> {
            Some(self.max)
        }
    }

    impl Locking for Exclusive {}
    impl Locking for Fair {}
    impl<A> Locking for ReadWrite<A> {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_methods_read_the_others_write() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert_eq!(Access::of_method(&method), Access::Read, "{method}");
        }
        let custom = Method::from_bytes(b"PURGE").unwrap();
        for method in [
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::CONNECT,
            custom,
        ] {
            assert_eq!(Access::of_method(&method), Access::Write, "{method}");
        }
    }
}
