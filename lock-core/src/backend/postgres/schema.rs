//! The names and the SQL of the Postgres backend: the tables and functions
//! created on first use (one transaction), and the statements the backend
//! sends, all qualified by the schema and table prefix the user chose.

use crate::LockError;

/// The default schema of the tables.
pub(crate) const DEFAULT_SCHEMA: &str = "public";
/// The default prefix of the table and function names.
pub(crate) const DEFAULT_TABLE_PREFIX: &str = "distlock_";

/// The longest table prefix: the longest name built on it
/// (`<prefix>leader_proclaim`, `<prefix>locks_expires`) stays within
/// PostgreSQL's 63 bytes.
const MAX_TABLE_PREFIX: usize = 40;
/// PostgreSQL's longest identifier.
const MAX_IDENTIFIER: usize = 63;

/// Refuses a schema or table prefix that is not a plain lower-case SQL
/// identifier (names are spliced into statements, so nothing that would
/// need quoting is accepted), naming the setting and its value.
pub(crate) fn check_identifier(
    what: &str,
    value: &str,
    empty_ok: bool,
    max: usize,
) -> Result<(), LockError> {
    let mut chars = value.chars();
    let first_ok = match chars.next() {
        None => empty_ok,
        Some(c) => c.is_ascii_lowercase() || c == '_',
    };
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && value.len() <= max {
        return Ok(());
    }
    Err(LockError::InvalidConfig {
        key: "*".into(),
        reason: format!(
            "the Postgres {what} must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most \
             {max} bytes), got {value:?}"
        ),
    })
}

/// The qualified names of the backend's tables and functions.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) prefix: String,
    pub(crate) locks: String,
    pub(crate) fences: String,
    pub(crate) layouts: String,
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) rollback: String,
    pub(crate) force_release: String,
    pub(crate) cut: String,
    pub(crate) record_layout: String,
    pub(crate) leaders: String,
    pub(crate) leader_proclaim: String,
    pub(crate) leader_vacate: String,
}

impl Names {
    /// The names under `schema` and `prefix`, once both are checked.
    pub(crate) fn new(schema: &str, prefix: &str) -> Result<Self, LockError> {
        check_identifier("schema", schema, false, MAX_IDENTIFIER)?;
        check_identifier("table prefix", prefix, true, MAX_TABLE_PREFIX)?;
        let q = |name: &str| format!("{schema}.{prefix}{name}");
        Ok(Names {
            schema: schema.to_owned(),
            prefix: prefix.to_owned(),
            locks: q("locks"),
            fences: q("fences"),
            layouts: q("layouts"),
            acquire: q("acquire"),
            release: q("release"),
            rollback: q("rollback"),
            force_release: q("force_release"),
            cut: q("cut"),
            record_layout: q("record_layout"),
            leaders: q("leaders"),
            leader_proclaim: q("leader_proclaim"),
            leader_vacate: q("leader_vacate"),
        })
    }

    /// The DDL, as one script of statements run in one transaction: the
    /// tables, the index, the functions. Idempotent; concurrent runs are
    /// serialised by a transaction-scoped advisory lock.
    pub(crate) fn ddl(&self) -> String {
        let Names {
            schema,
            prefix,
            locks,
            fences,
            layouts,
            acquire,
            release,
            rollback,
            force_release,
            cut,
            record_layout,
            leaders,
            leader_proclaim,
            leader_vacate,
        } = self;
        format!(
            r#"BEGIN;
SELECT pg_advisory_xact_lock(hashtext('distlock schema {schema}.{prefix}'));
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {locks} (
  key text PRIMARY KEY,
  fence text NOT NULL,
  owner text NOT NULL,
  token bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}locks_expires ON {locks} (expires_at);
CREATE TABLE IF NOT EXISTS {fences} (
  key text PRIMARY KEY,
  token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {layouts} (
  layout text PRIMARY KEY,
  seen_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {leaders} (
  key text PRIMARY KEY,
  term bigint NOT NULL,
  owner text NOT NULL,
  since timestamptz NOT NULL,
  metadata text NOT NULL,
  expires_at timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION {acquire}(p_key text, p_fence text, p_owner text, p_lease_us bigint)
RETURNS TABLE (out_token bigint, out_ttl_us bigint) LANGUAGE plpgsql AS $f$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_token bigint;
  v_expires timestamptz;
BEGIN
  INSERT INTO {locks} AS l (key, fence, owner, token, expires_at)
  VALUES (p_key, p_fence, p_owner, 0, v_now + p_lease_us * interval '1 microsecond')
  ON CONFLICT (key) DO UPDATE
    SET fence = excluded.fence, owner = excluded.owner, expires_at = excluded.expires_at,
        token = CASE WHEN l.owner = excluded.owner AND l.expires_at > v_now
                     THEN l.token ELSE 0 END
    WHERE l.owner = excluded.owner OR l.expires_at <= v_now
  RETURNING l.token INTO v_token;
  IF NOT FOUND THEN
    -- Another owner's live lock: busy, with what is left of its lease.
    SELECT l.expires_at INTO v_expires FROM {locks} l WHERE l.key = p_key;
    RETURN QUERY SELECT NULL::bigint,
      greatest(1, ceil(extract(epoch FROM coalesce(v_expires, v_now) - v_now) * 1000000))::bigint;
    RETURN;
  END IF;
  IF v_token = 0 THEN
    -- A new holder: the next token of the fence counter, at least the
    -- server's clock in microseconds (the floor a lost counter cannot take).
    INSERT INTO {fences} AS f (key, token)
    VALUES (p_fence, floor(extract(epoch FROM v_now) * 1000000)::bigint)
    ON CONFLICT (key) DO UPDATE SET token = greatest(f.token + 1, excluded.token)
    RETURNING f.token INTO v_token;
    UPDATE {locks} SET token = v_token WHERE key = p_key;
    -- Clean up to 2 expired rows: the table stays O(held locks).
    DELETE FROM {locks} WHERE key IN (
      SELECT e.key FROM {locks} e WHERE e.expires_at < v_now
      ORDER BY e.expires_at LIMIT 2 FOR UPDATE SKIP LOCKED
    ) AND expires_at < v_now;
  END IF;
  RETURN QUERY SELECT v_token, NULL::bigint;
END $f$;

CREATE OR REPLACE FUNCTION {release}(p_key text, p_owner text, p_channel text, p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  DELETE FROM {locks} WHERE key = p_key AND owner = p_owner AND expires_at > clock_timestamp();
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM pg_notify(p_channel, p_payload);
  RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION {rollback}(p_key text, p_owner text, p_channel text, p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE
  v_live boolean;
BEGIN
  DELETE FROM {locks} WHERE key = p_key AND owner = p_owner
  RETURNING expires_at > clock_timestamp() INTO v_live;
  IF NOT FOUND THEN RETURN false; END IF;
  IF v_live THEN PERFORM pg_notify(p_channel, p_payload); END IF;
  RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION {force_release}(p_key text, p_channel text, p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  DELETE FROM {locks} WHERE key = p_key AND expires_at > clock_timestamp();
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM pg_notify(p_channel, p_payload);
  RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION {cut}(p_key text, p_owner text, p_left_us bigint, p_channel text,
                                 p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  UPDATE {locks} SET expires_at = clock_timestamp() + p_left_us * interval '1 microsecond'
  WHERE key = p_key AND owner = p_owner AND expires_at > clock_timestamp();
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM pg_notify(p_channel, p_payload);
  RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION {record_layout}(p_layout text, p_mixed boolean, p_in_use_us bigint)
RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('distlock layouts {schema}.{prefix}'));
  DELETE FROM {layouts} WHERE seen_at < clock_timestamp() - p_in_use_us * interval '1 microsecond';
  IF p_mixed OR NOT EXISTS (SELECT 1 FROM {layouts} WHERE layout <> p_layout) THEN
    INSERT INTO {layouts} (layout, seen_at) VALUES (p_layout, clock_timestamp())
    ON CONFLICT (layout) DO UPDATE SET seen_at = excluded.seen_at;
  END IF;
  RETURN QUERY SELECT layout FROM {layouts} ORDER BY layout;
END $f$;

CREATE OR REPLACE FUNCTION {leader_proclaim}(p_lock text, p_record text, p_owner text,
                                             p_metadata text, p_keep_us bigint, p_channel text,
                                             p_payload text)
RETURNS TABLE (out_term bigint, out_ttl_us bigint, out_now_ms bigint, out_since_ms bigint)
LANGUAGE plpgsql AS $f$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_term bigint;
  v_expires timestamptz;
  v_since timestamptz;
BEGIN
  -- Only while p_owner holds the role's lock; FOR SHARE keeps the row from
  -- being released or taken over until this transaction commits.
  SELECT l.token, l.expires_at INTO v_term, v_expires FROM {locks} l
  WHERE l.key = p_lock AND l.owner = p_owner AND l.expires_at > v_now FOR SHARE;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO {leaders} AS r (key, term, owner, since, metadata, expires_at)
  VALUES (p_record, v_term, p_owner, v_now, p_metadata,
          v_now + p_keep_us * interval '1 microsecond')
  ON CONFLICT (key) DO UPDATE
    SET term = excluded.term, owner = excluded.owner, metadata = excluded.metadata,
        expires_at = excluded.expires_at,
        since = CASE WHEN r.term = excluded.term AND r.owner = excluded.owner
                          AND r.expires_at > v_now
                     THEN r.since ELSE excluded.since END
  RETURNING r.since INTO v_since;
  -- Clean up to 2 records of roles nobody proclaimed for a long time.
  DELETE FROM {leaders} WHERE key IN (
    SELECT e.key FROM {leaders} e WHERE e.expires_at < v_now
    ORDER BY e.expires_at LIMIT 2 FOR UPDATE SKIP LOCKED
  ) AND expires_at < v_now;
  PERFORM pg_notify(p_channel, p_payload || v_term::text);
  RETURN QUERY SELECT v_term,
    greatest(1, ceil(extract(epoch FROM v_expires - v_now) * 1000000))::bigint,
    floor(extract(epoch FROM v_now) * 1000)::bigint,
    floor(extract(epoch FROM v_since) * 1000)::bigint;
END $f$;

CREATE OR REPLACE FUNCTION {leader_vacate}(p_record text, p_term bigint, p_channel text,
                                           p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE
  v_deleted boolean;
BEGIN
  DELETE FROM {leaders} WHERE key = p_record AND term = p_term;
  v_deleted := FOUND;
  PERFORM pg_notify(p_channel, p_payload);
  RETURN v_deleted;
END $f$;
COMMIT;
"#
        )
    }

    /// `$1` key, `$2` fence key, `$3` owner, `$4` lease in µs: one row,
    /// `(token, ttl_us)`, a token when granted, else the holder's TTL.
    pub(crate) fn acquire_sql(&self) -> String {
        format!(
            "SELECT out_token, out_ttl_us FROM {}($1, $2, $3, $4)",
            self.acquire
        )
    }

    /// `$1` key, `$2` owner, `$3` channel, `$4` payload: whether it deleted.
    pub(crate) fn release_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3, $4)", self.release)
    }

    /// As [`release_sql`](Self::release_sql), for a grant never used.
    pub(crate) fn rollback_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3, $4)", self.rollback)
    }

    /// `$1` key, `$2` channel, `$3` payload: whether it deleted.
    pub(crate) fn force_release_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3)", self.force_release)
    }

    /// `$1` key, `$2` owner, `$3` what is left in µs, `$4` channel, `$5`
    /// payload: whether the owner held it.
    pub(crate) fn cut_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3, $4, $5)", self.cut)
    }

    /// `$1` keys, `$2` owners, `$3` lease in µs: the `(key, owner)` pairs
    /// renewed (those still held by their owner).
    pub(crate) fn renew_sql(&self) -> String {
        format!(
            "UPDATE {locks} AS l \
             SET expires_at = clock_timestamp() + $3 * interval '1 microsecond' \
             FROM unnest($1::text[], $2::text[]) AS r(key, owner) \
             WHERE l.key = r.key AND l.owner = r.owner AND l.expires_at > clock_timestamp() \
             RETURNING l.key, l.owner",
            locks = self.locks
        )
    }

    /// `$1` key, `$2` fence key: one row, `(owner, token, ttl_us, last
    /// token)`, the first three null when the lock is free.
    pub(crate) fn inspect_sql(&self) -> String {
        format!(
            "SELECT l.owner, l.token, {ttl} AS ttl_us, \
                    (SELECT f.token FROM {fences} f WHERE f.key = $2) AS last_token \
             FROM (SELECT 1) AS one \
             LEFT JOIN {locks} l ON l.key = $1 AND l.expires_at > clock_timestamp()",
            ttl = TTL_US,
            fences = self.fences,
            locks = self.locks
        )
    }

    /// `$1` the start of the keys: every live lock whose key starts so,
    /// `(key, fence, owner, token, ttl_us, last token)`.
    pub(crate) fn list_sql(&self) -> String {
        format!(
            "SELECT l.key, l.fence, l.owner, l.token, {ttl} AS ttl_us, f.token AS last_token \
             FROM {locks} l LEFT JOIN {fences} f ON f.key = l.fence \
             WHERE starts_with(l.key, $1) AND l.expires_at > clock_timestamp()",
            ttl = TTL_US,
            fences = self.fences,
            locks = self.locks
        )
    }

    /// `$1` layout, `$2` mixed allowed, `$3` how long a record counts: the
    /// layouts recorded.
    pub(crate) fn record_layout_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3)", self.record_layout)
    }

    /// `$1` how long a record counts, in µs: the layouts recorded lately.
    pub(crate) fn layouts_sql(&self) -> String {
        format!(
            "SELECT layout FROM {} \
             WHERE seen_at >= clock_timestamp() - $1 * interval '1 microsecond' ORDER BY layout",
            self.layouts
        )
    }

    /// `$1` role lock key, `$2` record key, `$3` owner, `$4` metadata, `$5`
    /// how long the record is kept in µs, `$6` channel, `$7` payload
    /// without the message (the term is appended): one row `(term,
    /// ttl_us, now_ms, since_ms)` when `$3` holds the lock, else none.
    pub(crate) fn leader_proclaim_sql(&self) -> String {
        format!(
            "SELECT out_term, out_ttl_us, out_now_ms, out_since_ms \
             FROM {}($1, $2, $3, $4, $5, $6, $7)",
            self.leader_proclaim
        )
    }

    /// `$1` role lock key, `$2` record key: one row, `(owner, term, ttl_us,
    /// now_ms, since_ms, metadata)`, owner null when nobody holds the
    /// lock, since and metadata null when the record is not the holder's
    /// term's.
    pub(crate) fn leader_read_sql(&self) -> String {
        format!(
            "SELECT l.owner, l.token, {ttl} AS ttl_us, \
                    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms, \
                    floor(extract(epoch FROM r.since) * 1000)::bigint AS since_ms, \
                    r.metadata \
             FROM (SELECT 1) AS one \
             LEFT JOIN {locks} l ON l.key = $1 AND l.expires_at > clock_timestamp() \
             LEFT JOIN {leaders} r ON r.key = $2 AND r.term = l.token AND r.owner = l.owner \
                                   AND r.expires_at > clock_timestamp()",
            ttl = TTL_US,
            locks = self.locks,
            leaders = self.leaders
        )
    }

    /// `$1` record key, `$2` term, `$3` channel, `$4` payload: whether it
    /// deleted the record (it tells the observers either way).
    pub(crate) fn leader_vacate_sql(&self) -> String {
        format!("SELECT {}($1, $2, $3, $4)", self.leader_vacate)
    }

    /// `$1` key, `$2` owner, `$3` token: one row while that owner holds the
    /// lock with that token by the server's clock, `FOR SHARE`: the lock's
    /// row stays locked until the caller's transaction ends, so no other
    /// owner can take the lock (nor this one release it) before then.
    pub(crate) fn hold_check_sql(&self) -> String {
        format!(
            "SELECT 1 FROM {} WHERE key = $1 AND owner = $2 AND token = $3 \
             AND expires_at > clock_timestamp() FOR SHARE",
            self.locks
        )
    }

    /// `$1` layout: the layouts deleted (0 or 1 row).
    pub(crate) fn forget_layout_sql(&self) -> String {
        format!(
            "DELETE FROM {} WHERE layout = $1 RETURNING layout",
            self.layouts
        )
    }
}

/// What is left of a lock row's lease, in whole microseconds rounded up (at
/// least 1), by the server's clock.
const TTL_US: &str = "greatest(1, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * \
                      1000000))::bigint";

/// The server channel of a lock's wake-up channel: `dl_` and 16 hex digits
/// of a 64-bit FNV-1a hash of the schema, the table prefix and the channel
/// (PostgreSQL channels are identifiers of at most 63 bytes).
pub(crate) fn server_channel(names: &Names, channel: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = [
        names.schema.as_bytes(),
        b".",
        names.prefix.as_bytes(),
        b"\n",
        channel.as_bytes(),
    ];
    for byte in parts.into_iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("dl_{hash:016x}")
}

/// The payload of a wake-up: `<byte length of channel> <channel><message>`.
pub(crate) fn payload(channel: &str, message: &str) -> String {
    format!("{} {channel}{message}", channel.len())
}

/// The lock channel and the message of a payload made by [`payload`].
pub(crate) fn parse_payload(payload: &str) -> Option<(&str, &str)> {
    let (len, rest) = payload.split_once(' ')?;
    let len: usize = len.parse().ok()?;
    if !rest.is_char_boundary(len) {
        return None;
    }
    let channel = rest.get(..len)?;
    let message = rest.get(len..)?;
    Some((channel, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_checked_and_named_in_the_error() {
        assert!(Names::new("public", "distlock_").is_ok());
        assert!(Names::new("locks", "").is_ok());
        for (schema, prefix) in [("Public", "x_"), ("a;b", "x_"), ("", "x_"), ("s", "a b")] {
            let err = Names::new(schema, prefix).unwrap_err().to_string();
            assert!(err.contains("Postgres"), "{err}");
        }
        let long = "a".repeat(41);
        let err = Names::new("public", &long).unwrap_err().to_string();
        assert!(err.contains("table prefix") && err.contains(&long), "{err}");
    }

    #[test]
    fn payloads_carry_the_whole_channel() {
        let channel = "lock:{a b}:released";
        let text = payload(channel, "0 c:1");
        assert_eq!(parse_payload(&text), Some((channel, "0 c:1")));
        let odd = "lock:{é 3 x}:released";
        assert_eq!(parse_payload(&payload(odd, "")), Some((odd, "")));
        assert_eq!(parse_payload("99 short"), None);
        assert_eq!(parse_payload("x y"), None);
    }

    #[test]
    fn server_channels_are_short_identifiers_that_differ_per_schema() {
        let a = Names::new("public", "distlock_").unwrap();
        let b = Names::new("other", "distlock_").unwrap();
        let long = format!("lock:{{{}}}:released", "x".repeat(1024));
        let channel = server_channel(&a, &long);
        assert_eq!(channel.len(), 19);
        assert!(channel.starts_with("dl_"));
        assert_ne!(channel, server_channel(&b, &long));
        assert_eq!(channel, server_channel(&a, &long));
    }
}
