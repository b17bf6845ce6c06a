//! The `#[distributed_lock]` attribute of `distlock`.
//!
//! Use it through the facade crate (`distlock::distributed_lock`);
//! the generated code names only paths under it. Parsing lives in `attr`
//! and `template`, code generation in `expand`.
#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs)]
// No panics in library code, on any input or runtime state (tests may).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unchecked_time_subtraction,
        clippy::todo,
        clippy::unimplemented,
        clippy::unreachable
    )
)]

use proc_macro::TokenStream;

mod attr;
mod expand;
mod template;

/// Runs an `async fn` under a distributed lock.
///
/// ```text
/// #[distributed_lock(key = "order:{id}", wait = "10s")]
/// async fn pay(id: u64) -> Result<Receipt, AppError> { /* ... */ }
/// ```
///
/// The key is built from the (borrowed) arguments before the body runs; the
/// lock is acquired with the given wait, the body runs with the guard alive
/// (the watchdog renewing its lease), and the lock is released when the body
/// returns, returns early with `?`, panics, or its future is dropped.
///
/// Options:
/// - `key = "order:{id}"`: the lock name, a template over the arguments:
///   `{arg}`, `{arg.field}`, `{self.field}`, `{arg.method()}`, or `<arg>`.
///   `{{`, `}}` and `<<` write a literal `{`, `}` and `<`.
/// - `keys = ["account:{from}", "account:{to}"]`: several locks, acquired
///   all or nothing in sorted order, so calls with swapped arguments never
///   deadlock.
/// - `wait = "10s"`: how long to wait for a busy lock (humantime, checked at
///   compile time); `"0s"` or absent tries once; `"forever"` waits as long as
///   it takes. Or an expression of type `Duration`, evaluated at each call.
/// - `lease = "30s"`: a fixed lease, not renewed (ShedLock's
///   `lockAtMostFor`); absent: watchdog mode. Or a `Duration` expression.
/// - `at_least = "5m"`: keep the lock at least this long after it was taken,
///   even when the function returns sooner (ShedLock's `lockAtLeastFor`,
///   `Lock::hold_at_least`); at most a fixed `lease`; one `key`. Or a
///   `Duration` expression.
/// - `fair`: the fair lock named by `key`. `read` / `write`: the read or
///   write lock of the read-write lock named by `key`. `permits = 5`: the
///   semaphore named by `key` with that many permits (a `u32` literal of at
///   least 1, or a `u32` expression), with `take = k` permits per call
///   (default 1). At most one of them; each takes one `key`, not `keys`.
/// - `on_busy = error` (default): the function returns
///   `Result<T, E>` with `E: From<LockError>` and a busy lock (or any lock
///   error) is returned as `Err`. `on_busy = skip`: a busy lock (or a lock
///   client that is shutting down) returns `Default::default()` (`()`,
///   `None`, ... or `Ok(Default::default())` for a `Result`) without running
///   the body. Any other lock error (the
///   backend down or not answering, a bad key) is returned as `Err` by a
///   function that returns a `Result` (so `Result<Option<T>, E>` tells busy,
///   `Ok(None)`, from failed, `Err`); a function that returns no `Result`
///   skips the body then too, and logs the error at error level under the
///   `tracing` target `distlock`.
/// - `client = expr`: the `LockClient` (or `&LockClient`, `Arc<LockClient>`)
///   to lock with; default the one installed with `set_global_client`.
/// - `crate = "path"`: where the `distlock` crate is, when renamed.
/// - `abort_on_lost`: cancel the body and return `LockError::LeaseLost` when
///   the lease is lost while it runs.
///
/// Option expressions are evaluated at each call, before the lock is taken,
/// in the function's scope (the arguments and `self` are visible, as to the
/// key templates). A value the lock refuses is its own
/// `LockError::InvalidConfig`, taking the path of any other lock error.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(attr.into(), item.into()).into()
}
