//! A tower [`Layer`](tower_layer::Layer) that runs each request under a
//! distributed lock: per-request mutual exclusion for axum, tonic and plain
//! tower services, across every process that shares the lock backend.
//!
//! - [`LockLayer`] names the lock of each request with a [`KeyExtractor`]: a
//!   closure, or a built-in [`PathTemplate`] (`/orders/{id}/pay` ->
//!   `order:{id}`), [`HeaderKey`] or [`GrpcKey`]. `None` lets a request
//!   through unlocked.
//! - The lock options are distlock-core's [`LockOptions`](distlock_core::LockOptions),
//!   given whole with [`options`](LockLayer::options) or one by one:
//!   [`wait`](LockLayer::wait) (default: try once) and a fixed
//!   [`lease`](LockLayer::lease) (default: watchdog, renewed while the
//!   handler runs).
//! - The [`mode`] picks the primitive of the lock family a request
//!   takes on its name: the plain lock (default), the fair lock
//!   ([`fair`](LockLayer::fair)), the read or write lock of a read-write
//!   lock chosen per request ([`read_write`](LockLayer::read_write), e.g.
//!   with [`SafeMethods`]), or a permit of a semaphore, for a fleet-wide
//!   per-key limit of requests in flight
//!   ([`concurrency_limit`](LockLayer::concurrency_limit)). A layer has one
//!   mode, part of its type.
//! - The guard lives in the [`ResponseFuture`] (or, with
//!   [`hold_until_body_end`](LockLayer::hold_until_body_end), in the
//!   [`ResponseBody`]), and the handler runs in its ownership scope: a
//!   domain function that takes the same lock re-enters it.
//! - A request that does not get its lock gets an answer from its flavour
//!   (a [`Flavour`], part of the layer's type like the mode):
//!   [`Http`] (409 with `Retry-After` for a lock held by another owner, 429
//!   with `Retry-After` over a concurrency limit, 503 with `Retry-After`
//!   when the backend did not answer; never an error, so axum can serve it),
//!   [`Grpc`] (`ABORTED`, `RESOURCE_EXHAUSTED`, `UNAVAILABLE`), or [`Plain`]
//!   (the [`LockError`](distlock_core::LockError) as the service's error).
//!   [`http_status`] (and, with the `tonic` feature, `grpc_code` and
//!   `grpc_status`) give the same answers to handlers that meet a
//!   `LockError` themselves.
//! - [`LeaderLayer`] is the other layer: routes only the leader of a role
//!   serves. A [`LeaderSeat`] says whether this process leads (the code
//!   that campaigns seats its leadership there); on the leader the request
//!   carries the term, a follower redirects to the leader (307) or answers
//!   503 with `Retry-After` (gRPC: `UNAVAILABLE`), naming the leader.
//! - [`validate_key`](LockLayer::validate_key) refuses lock names built
//!   from client input before anything is locked (400).
//! - A lock lost while the handler runs (deleted, taken over, or not
//!   renewed in time) is logged, and the handler's own response goes out;
//!   with [`abort_on_lost`](LockLayer::abort_on_lost) the handler's future
//!   is dropped instead and the request answered as for `LeaseLost` (503),
//!   for handlers that are cancel safe. Fencing stays the protection of the
//!   guarded resource either way.
//! - Handlers read the lock and its fencing token from the
//!   [`FencingToken`] request extension; the token can also go out in a
//!   response header. A request that runs unlocked has no such extension:
//!   in axum, take `Option<Extension<FencingToken>>` on routes that may run
//!   unlocked.
//!
//! # Where to put the layer in axum
//! The layer runs before the router's handlers and their extractors. With
//! `Router::layer` it sees every request, also those that match no route
//! (404) or no method (405); with `Router::route_layer` it runs only for
//! requests that matched a route, so a made-up path takes no lock. Either
//! way it runs before the handler's extractors: a request that `Path<u64>`
//! or `Json<T>` would reject with 400 has taken (and released) its lock by
//! then. Check names built from client input with
//! [`validate_key`](LockLayer::validate_key).
//!
//! # Features
//! - `serde`: `Serialize`/`Deserialize` for [`FencingToken`] (and, through
//!   distlock-core's `serde` feature, for `LockInfo` and `LockHolder`).
//! - `tonic`: `grpc_code` and `grpc_status`, the gRPC flavour's answers as
//!   `tonic::Code` and `tonic::Status`.
//!
//! # Cancel safety
//! A client that disconnects drops the response future: an acquisition in
//! progress is abandoned without leaking a grant, and a held lock is
//! released in the background within a round trip, not after its lease.
//!
//! # Example
//! A plain tower service on the in-memory backend (see the repository's
//! `examples/` for axum and tonic):
//!
//! ```
//! use std::time::Duration;
//! use distlock_core::{LockClient, LockError};
//! use distlock_tower::LockLayer;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! struct Job { account: u32 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! let client = LockClient::memory();
//! let layer = LockLayer::new(client.clone(), |job: &Job| Some(format!("account:{}", job.account)))
//!     .plain()
//!     .wait(Duration::from_secs(5));
//! let mut service = layer.layer(service_fn(|job: Job| async move {
//!     Ok::<_, LockError>(format!("settled account {}", job.account))
//! }));
//!
//! let done = service.ready().await?.call(Job { account: 7 }).await?;
//! assert_eq!(done, "settled account 7");
//!
//! // While someone else holds the lock, a job that may not wait fails with Busy.
//! let held = client.lock("account:7").acquire().await?; // free: released before the answer
//! let mut impatient = LockLayer::new(client.clone(), |job: &Job| Some(format!("account:{}", job.account)))
//!     .plain()
//!     .layer(service_fn(|_: Job| async { Ok::<_, LockError>(()) }));
//! let busy = impatient.ready().await?.call(Job { account: 7 }).await;
//! assert!(matches!(busy, Err(LockError::Busy { .. })));
//! held.release().await?;
//! # Ok(()) }
//! ```
#![deny(unreachable_pub, unsafe_code)]
#![warn(missing_docs)]
// docs.rs labels feature-gated items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]
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

// The files depend on each other one way, from the layer down (the test
// `tests/architecture.rs` checks it):
//
//   layer    -> config, service, flavour, http, grpc, plain, mode
//   service  -> config, future, flavour, extract, mode, status, http (type default)
//   future   -> flavour, release, status, http and plain (type defaults)
//   http, grpc, plain -> flavour, body, status (each builds its own answers)
//   flavour  -> body, status, token
//   body     -> release
//   config   -> mode
//   status, release, token, extract, mode: leaves
//   leader   -> body, http, grpc (the leader-only layer, beside the lock's;
//               nothing imports it)
//
// The layer builds a config and services from it; a service names each
// request's lock and starts a future; the future takes the lock, calls the
// inner service, releases the lock, and has the request's flavour (the
// sealed `Flavour`, implemented once in each of http, grpc and plain) build
// the answer, a rejection included. No file imports through the crate root.
mod body;
mod config;
mod extract;
mod flavour;
mod future;
mod grpc;
mod http;
mod layer;
mod leader;
pub mod mode;
mod plain;
mod release;
mod service;
mod status;
mod token;

pub use body::ResponseBody;
pub use extract::{GrpcKey, HeaderKey, KeyExtractor, Or, PathTemplate};
pub use flavour::{Flavour, HttpFlavour};
pub use future::{PlainResponseFuture, ResponseFuture};
pub use grpc::Grpc;
pub use http::Http;
pub use layer::LockLayer;
pub use leader::{LeaderFuture, LeaderLayer, LeaderSeat, LeaderService, LEADER_HEADER};
pub use mode::{Access, ConcurrencyLimit, Exclusive, Fair, ReadWrite, SafeMethods, SelectAccess};
pub use plain::Plain;
pub use service::LockService;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use status::{grpc_code, grpc_status};
pub use status::{http_status, REASON_METADATA};
pub use token::FencingToken;
