//! Fencing checked at the resource: ready-made claim-on-read fences for data
//! in Redis and in PostgreSQL, and a tower layer that refuses stale lock
//! holders in front of a service.
//!
//! A lock holder can be paused past its lease (a GC pause, a stopped VM) and
//! act after a successor has taken the lock. The lock's fencing token (a
//! `u64` that strictly increases from one holder to the next) closes that
//! gap only if the *resource* checks it, atomically with each read and each
//! write. The rule every fence here applies, per resource:
//!
//! > a read or a write with token `t` is refused when a token higher than
//! > `t` has read or written the resource; otherwise `t` is recorded as the
//! > highest seen, and the read or write happens.
//!
//! Reads claim too ("claim on read"): with a check on writes only, an old
//! holder and its successor can both read stock 300 and both write 299 (the
//! old one first), and one update is lost. Under claim-on-read the old
//! holder's write is refused ([`FenceError::Stale`]) once the successor has
//! read.
//!
//! | resource | type | feature |
//! |---|---|---|
//! | a Redis key or hash field | [`RedisFence`] | always |
//! | a PostgreSQL row (table, key column, fence column), in your transaction | [`PgFence`] | `postgres` |
//! | fences by name in a PostgreSQL table | [`PgFenceStore`] | `postgres` |
//! | fences by name in this process | [`MemoryFence`] | always |
//! | a service: refuse stale holders before the handler (409 / `ABORTED`) | [`FenceLayer`] | `tower` |
//!
//! Every fence takes the token as a `u64`, which is what the lock gives:
//! `guard.fencing_token()`, `distlock::current()` in a `#[distributed_lock]`
//! fn, `FencingToken::token` from `LockLayer`, and `$LOCK_FENCING_TOKEN`
//! under `lockctl run`.
//!
//! # Redis
//! ```no_run
//! use distlock_fence::{FenceError, RedisFence};
//!
//! # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let conn = redis::Client::open("redis://127.0.0.1/")?
//!     .get_multiplexed_async_connection()
//!     .await?;
//! let stock = RedisFence::new(conn);
//! // A read-modify-write under the lock's token: refused if a newer holder
//! // has read or written `stock:4` since this holder read it.
//! match stock.update("stock:4", token, |qty: Option<i64>| qty.unwrap_or(0) - 1).await {
//!     Ok(left) => println!("reserved; {left} left"),
//!     Err(FenceError::Stale { seen, .. }) => println!("a newer holder ({seen}) took over"),
//!     Err(other) => return Err(other.into()),
//! }
//! // One script: read, or write, or INCRBY, or HINCRBY, or your own command.
//! let _left = stock.incr_by("stock:4", token, -1).await?;
//! let _: () = stock.run("log", token, redis::cmd("RPUSH").arg("log").arg("reserved")).await?;
//! // Several commands under one check, atomically: write and append to an
//! // audit log (a key of the same cluster slot), or neither.
//! let (_previous, _entries): (Option<i64>, i64) = stock
//!     .run_all(
//!         "stock:4",
//!         token,
//!         &["{stock:4}:audit"],
//!         &[
//!             redis::cmd("SET").arg("stock:4").arg(10).arg("GET").clone(),
//!             redis::cmd("RPUSH").arg("{stock:4}:audit").arg("restocked").clone(),
//!         ],
//!     )
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! ## Redis layout
//! The fences of data key `K` are fields of one hash, `fence:{T}:K` (prefix
//! configurable with [`RedisFence::with_prefix`]): field `k` for `K` as a
//! whole, `f:<field>` for a field of the hash `K`. Each script names the
//! fence and `K` as its keys, so on a cluster both must be in one slot;
//! `{T}` sees to that:
//!
//! - `K` has a hash tag `{t}` (Redis's rule: first `{`, next `}`, not
//!   empty): `T` is `t`. `user:{42}:cart` -> `fence:{42}:user:{42}:cart`.
//! - else `K` is not empty and has no `}`: `T` is `K`. `order:42` ->
//!   `fence:{order:42}:order:42`.
//! - else (`K` is empty, or has a `}` but no hash tag, as `a}b`): `T` is a
//!   short base-36 string computed to hash to `K`'s slot.
//!
//! [`RedisFence::run_all`] declares the other keys its commands touch, so
//! they must be in the same slot too: give them the data key's hash tag
//! (`{order:42}:log` for `order:42`); a key of another slot is refused.
//!
//! Fences have no expiry; deleting one lets a stale holder in again.
//! [`REDIS_SCRIPT`] (one command) and [`REDIS_RUN_ALL_SCRIPT`] (several) are
//! the scripts, for other clients (see their docs for the wire format and a
//! `redis-cli` call under `lockctl run`).
//!
//! # PostgreSQL
//! [`PgFence`] runs the claim-on-read read and the fenced write of a row on a
//! `tokio_postgres::Client` or in a `Transaction`, and gives the SQL for
//! other drivers; [`PgFence::migration`] adds the fence column. The driver
//! is tokio-postgres: it is the async driver under the Postgres pools
//! (deadpool-postgres, bb8-postgres) and diesel-async, it is a small
//! dependency (no macros, no build-time database), and its `GenericClient`
//! lets one helper run on a client and in a transaction. sqlx users run the
//! same SQL ([`PgFence::read_sql`], [`PgFence::write_sql`]).
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(client: &mut tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! use distlock_fence::PgFence;
//!
//! let stock = PgFence::new("stock", "sku", "fence")?;
//! client.batch_execute(&stock.migration()).await?; // once
//! let tx = client.transaction().await?;
//! let row = stock.read(&tx, &"sku:4", token, &["qty"]).await?;
//! let qty: i64 = row.get(0);
//! stock.write(&tx, &"sku:4", token, &[("qty", &(qty - 1))]).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! From a shell job under `lockctl run` (the token is in
//! `$LOCK_FENCING_TOKEN`), the same write with psql: no row printed means
//! the token is stale (or the row is missing), and the job must not report
//! success.
//!
//! ```sh
//! psql -X -q -At -v ON_ERROR_STOP=1 -v token="$LOCK_FENCING_TOKEN" <<'SQL' | grep -q . \
//!     || { echo "stale fencing token $LOCK_FENCING_TOKEN" >&2; exit 75; }
//! UPDATE reports SET body = 'done', fence = :token
//!  WHERE day = current_date AND fence <= :token RETURNING 1;
//! SQL
//! ```
//!
//! # A service in front of the resource
//! [`FenceLayer`] (feature `tower`) checks the token of each request in a
//! [`FenceStore`] before the handler runs; see there.
//!
//! # Features
//! - `postgres`: [`PgFence`] and [`PgFenceStore`], with tokio-postgres.
//! - `tower`: [`FenceLayer`], [`FenceService`] and their types.
#![deny(unreachable_pub, unsafe_code)]
#![deny(missing_docs)]
// The docs link the feature-gated items; their links are checked in the
// build with every feature (docs.rs, CI's `--all-features` doc step).
#![cfg_attr(
    not(all(feature = "postgres", feature = "tower")),
    allow(rustdoc::broken_intra_doc_links)
)]
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
        clippy::arithmetic_side_effects,
        clippy::todo,
        clippy::unimplemented,
        clippy::unreachable
    )
)]

// The files depend on each other one way (tests/architecture.rs checks
// that there is no cycle):
//
//   layer -> store -> redis_fence, pg, memory -> key, error
mod error;
mod key;
#[cfg(feature = "tower")]
mod layer;
mod memory;
#[cfg(feature = "postgres")]
mod pg;
mod redis_fence;
mod store;

pub use error::FenceError;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use layer::{
    FenceBody, FenceFuture, FenceKey, FenceLayer, FenceService, Fenced, HeaderKey, KEY_HEADER,
    TOKEN_HEADER,
};
pub use memory::MemoryFence;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use pg::{PgFence, PgFenceStore};
pub use redis_fence::{
    RedisFence, MAX_REPLICAS_TIMEOUT, MIN_REPLICAS_TIMEOUT, REDIS_RUN_ALL_SCRIPT, REDIS_SCRIPT,
};
pub use store::{Claim, FenceStore};
