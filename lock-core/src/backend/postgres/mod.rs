//! The PostgreSQL backend (feature `postgres`): the plain lock in tables of
//! one database, with the same semantics as on Redis, through statements
//! that keep no state in a session, so that it works behind PgBouncer's
//! transaction pooling.
//!
//! # Design
//!
//! **Schema.** In a schema of the user's choice (default `public`), under a
//! table prefix (default `distlock_`; both `[a-z_][a-z0-9_]*`, checked when
//! the client is built), created by the client when it connects, in one
//! transaction (`CREATE TABLE IF NOT EXISTS`, `CREATE OR REPLACE FUNCTION`,
//! serialised among connecting clients by a transaction-scoped advisory
//! lock, which PgBouncer's transaction pooling keeps):
//!
//! ```sql
//! <p>locks   (key text PRIMARY KEY,        -- `<key prefix>{name}`, as on Redis
//!             fence text NOT NULL,         -- the key of its fencing counter
//!             owner text NOT NULL,         -- `<client id>:<scope>`
//!             token bigint NOT NULL,       -- its fencing token
//!             expires_at timestamptz NOT NULL)  -- by the server's clock
//! <p>locks_expires ON <p>locks (expires_at)
//! <p>fences  (key text PRIMARY KEY,        -- `<key prefix>fence:{<slot>}`
//!             token bigint NOT NULL)       -- the last token issued
//! <p>layouts (layout text PRIMARY KEY, seen_at timestamptz NOT NULL)
//! ```
//!
//! **One statement per operation.** Each operation is one call of a
//! PL/pgSQL function of the schema (`<p>acquire`, `<p>release`,
//! `<p>rollback`, `<p>force_release`, `<p>cut`, `<p>record_layout`) or one
//! plain statement (renewal of a batch, inspection, listing), sent as an
//! unnamed statement with typed parameters (`query_typed`: no named
//! prepared statement, no `SET`, no session advisory lock, no temporary
//! table), in its own implicit transaction. Any pooled connection can carry
//! any of them. Time is the server's: every statement reads
//! `clock_timestamp()` and compares `expires_at` with it; the client sends
//! durations only (leases in microseconds, so a sub-millisecond lease is not
//! truncated), never instants.
//!
//! **Acquire** (`<p>acquire(key, fence, owner, lease_us)`):
//! `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE <row>.owner = owner OR
//! <row>.expires_at <= now`. The row lock that `ON CONFLICT` takes makes
//! concurrent attempts on one name queue on each other, and the `WHERE` is
//! evaluated on the latest committed row. The updated row keeps its token
//! when it was the same owner's live row (re-entry: the lease is extended,
//! the token is the same), and gets 0 otherwise (new or expired): then a
//! token is drawn from the fencing counter and written into the row, in the
//! same transaction. When the `WHERE` fails (another owner's live row) the
//! answer is busy with that row's remaining lease, read by the server's
//! clock. `now` is read once at the start: a statement that waited on the
//! row lock judges expiry by an earlier instant (a row that expired meanwhile
//! reads as live: busy, the safe side) and gives a lease that ends earlier
//! than the client's deadline (also the safe side).
//!
//! **Fencing tokens: strictly increasing per lock, and surviving restarts.**
//! A token is `greatest(counter + 1, clock_us)`, where `counter` is the row
//! of `<p>fences` of the lock's fence key (one per cluster slot of the key
//! prefix, as on Redis: at most 16384 rows per prefix, however many names are
//! used), updated by `INSERT ... ON CONFLICT DO UPDATE` in the transaction
//! that writes the lock's row, and `clock_us` the server's
//! `clock_timestamp()` in microseconds since the Unix epoch. Proof:
//!
//! 1. *While the counter row is kept* (the normal case, and every restart
//!    with `fsync = on` and `synchronous_commit = on`, PostgreSQL's
//!    defaults, and every failover to a synchronous standby): the row is
//!    locked from the update to the commit, so the updates of one counter
//!    are serialised, and each sets it to at least one more than the value
//!    committed before it. A token reaches its holder only with the lock row
//!    that carries it, written in the same transaction: a transaction that
//!    rolls back hands out nothing. So two holders of one lock (one fence
//!    key), in the order of their commits, hold strictly increasing tokens.
//! 2. *When the counter is lost or rolled back* (`synchronous_commit = off`
//!    and a crash, an asynchronous standby promoted, a restore from a
//!    backup, a dropped table): the next token is at least the server's
//!    clock in microseconds. Every token issued before the loss was at most
//!    the clock when it was issued plus the number of tokens of its counter
//!    issued within the same microsecond (the counter only runs ahead of the
//!    clock by issues faster than one per microsecond, which the row lock
//!    held until each commit rules out in practice). So the first token after
//!    the loss is above every earlier one, provided the server's clock (the
//!    new primary's) reads later than when the last lost token was issued:
//!    the same assumption, stated the same way, as the Redis scripts' clock
//!    floor (`prelude/token.lua`).
//! 3. *Uniqueness* (round 4): a token is never issued twice, because in (1)
//!    each committed counter value is written once and in (2) a token after
//!    the loss is above every token before it.
//!
//! Tokens stay below 2^53 (exact as JSON numbers) until the year 2255, as on
//! Redis. Gaps are fine: resources compare tokens, they do not count them.
//!
//! **Release, rollback, force-release, cut** each delete or update the row
//! only while it is live (and the owner's, but for force-release), and call
//! `pg_notify` in the same transaction when they freed (or shortened) a live
//! lock: `NOTIFY` is delivered at commit, never for a transaction that rolled
//! back. **Renewal** is one `UPDATE ... FROM unnest($keys, $owners)` for the
//! whole batch, `RETURNING` the rows it extended: one round trip per period,
//! however many locks.
//!
//! **Expired rows are cleaned.** Every acquisition that issues a new token
//! also deletes up to 2 expired rows (`FOR UPDATE SKIP LOCKED`, oldest
//! first, through the `expires_at` index): as on the in-memory store's
//! sweep, the table stays O(held locks) plus what expired since, whatever the
//! number of names ever used. An expired row that was not cleaned yet reads
//! as free to every statement. The fence rows are bounded by the slots.
//!
//! **Wake-ups: LISTEN/NOTIFY on one dedicated connection.** A lock's
//! channel (`key.channel`, up to some 3 KiB) is longer than PostgreSQL's
//! 63-byte identifiers, so the server channel is `dl_<16 hex digits>`, an
//! FNV-1a hash of the schema, the table prefix and the lock's channel; the
//! payload carries the lock's channel in full (`<byte length> <channel>`)
//! followed by the message (`0 <owner>` for a release, as on Redis), so a
//! hash collision costs a spurious wake-up (an attempt), never a missed one.
//! The subscriber (`subscriber.rs`) keeps one connection of its own (never a
//! pooled one: `LISTEN` is session state by nature, and it is the one
//! connection that must not go through a transaction-mode PgBouncer),
//! `LISTEN`s to the channels that have waiters and `UNLISTEN`s the ones that
//! lost them, and after a reconnect (with back-off) wakes every waiter
//! (`Waiters::wake_all`), since messages may have been missed. A lost
//! message costs latency, never liveness: waiters also wake at the holder's
//! remaining lease.
//!
//! **What maps and what is refused** ([`Capabilities`]): the plain lock
//! with its watchdog, re-entry, fencing, waiting, cancel safety, shutdown,
//! `inspect`/`list`/force-release, `hold_at_least` (`cut`), and the layout
//! registry. Refused for now, each with a typed error naming the reason: the
//! lock family (fair lock, read-write lock, semaphore), hot locks
//! (`keep_hot`: nobody answers a keeper's ask on this backend yet), Redisson's
//! layout (it is a Redis layout; refused when the client is built), leader
//! election, and the data connection (a Redis connection by type).
//! `subscribers` answers 0 for every lock: PostgreSQL shows a session only its
//! own `LISTEN`s (`pg_listening_channels()`), so how many clients wait for a
//! lock cannot be read from the server.
//!
//! # TODO (left for later, with what each needs)
//!
//! - **A `BackendError::Postgres` variant** (in `error.rs`, outside this
//!   folder): errors are carried as [`BackendError::Protocol`] with the
//!   server's SQLSTATE and message until then.
//! - **The lock family**: a fair queue table (`<p>queue(key, owner,
//!   presence_expires_at, seq bigserial)`, head-of-queue grant in the
//!   release function with a `g <owner> <token>` NOTIFY), a read-write lock
//!   (readers as rows of a `<p>holders` table keyed by `(key, owner)`, the
//!   writer's intent as a row), a semaphore (permits as rows of the same
//!   table, counted under the key's row lock); `inspect_family`/`list_all`
//!   for them; then lift `Capabilities::family`.
//! - **Hot locks**: the acquire function must `pg_notify` a `w <field>` ask
//!   to a keeper whose owner ends in `~k`, as `ACQUIRE` does on Redis.
//! - **Leadership** (`leader_proclaim/read/vacate`): a `<p>leaders(record
//!   key, term, owner, since, metadata)` table written only while the role's
//!   lock row is the owner's (one function each, NOTIFY on the record's
//!   channel); the tests of `tests/suite/leader.rs`.
//! - **A user's pool** (deadpool-postgres, bb8): the statements already need
//!   nothing of a session; take a `GenericClient`-like handle for the command
//!   path, keep the dedicated LISTEN connection.
//! - **TLS** (`sslmode`): a `MakeTlsConnect` (tokio-postgres-rustls) from
//!   the builder's certificates; `NoTls` for now.
//! - **PgBouncer tests**: the suite through Debian's pgbouncer in
//!   transaction mode, and the LISTEN connection direct.
//! - **Process tests**: exclusion across 3 processes, a SIGKILLed holder,
//!   the server restarted (tokens keep rising), `pg_terminate_backend` of
//!   each of the client's connections, the server paused with SIGSTOP.
//! - **The chaos backend** (lock-chaos): pause, kill holder, terminate
//!   backend, restart, with and without `synchronous_commit`.
//! - **Benchmarks**: W1, W2, W3h beside sqlx's `PgAdvisoryLock` and the
//!   `distributed-lock` crate, and WAL bytes per acquisition
//!   (`pg_stat_wal`).
//! - **README**: Postgres in "Choosing a deployment" and the quickstart,
//!   with this proof of the tokens.
//! - **Schema versions**: a `<p>meta(version)` row, so that connecting
//!   clients skip the `CREATE OR REPLACE FUNCTION`s when the schema is
//!   current, and a migration the README gives for operators who do not let
//!   clients run DDL.
