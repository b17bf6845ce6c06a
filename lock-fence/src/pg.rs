//! [`PgFence`]: claim-on-read fenced reads and writes of PostgreSQL rows, in
//! the caller's transaction; [`PgFenceStore`]: a table of fences by name.

use std::sync::Arc;

use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use crate::error::FenceError;

/// Fenced reads and writes of the rows of one table: each row keeps, in its
/// fence column (a `bigint`, 0 for a row no holder has touched), the highest
/// token that has read or written it. A read claims the row, a write
/// updates it, both only when the row's fence is not higher than the token:
///
/// ```sql
/// -- read: claim the row for $1 (0 rows: stale, or no such row)
/// UPDATE "stock" SET "fence" = $1 WHERE "sku" = $2 AND "fence" <= $1 RETURNING "qty";
/// -- write (0 rows: a newer holder has read or written it since)
/// UPDATE "stock" SET "qty" = $3, "fence" = $1 WHERE "sku" = $2 AND "fence" <= $1;
/// ```
///
/// [`read_sql`](PgFence::read_sql), [`write_sql`](PgFence::write_sql) and
/// [`migration`](PgFence::migration) give that SQL for other drivers (sqlx,
/// diesel, psql); [`read`](PgFence::read) and [`write`](PgFence::write) run
/// it with tokio-postgres on a `Client` or in a `Transaction`, and tell a
/// stale token ([`FenceError::Stale`], with the row's fence) from a missing
/// row ([`FenceError::Missing`]). In a transaction the claim also locks the
/// row until the commit, so the read, the work and the write are serialized
/// against other holders.
///
/// tokio-postgres keeps no statement cache, so each call prepares its
/// statement (one more round trip, measured at about 2.5 times a prepared
/// `UPDATE` on loopback); on a hot path, prepare [`read_sql`](PgFence::read_sql)
/// and [`write_sql`](PgFence::write_sql) once and run them yourself.
///
/// Names are quoted as given (`"stock"`): pass them in lower case for a
/// table created without quotes. `schema.table` names a table in a schema.
/// Tokens are stored as `bigint`, so they go up to `i64::MAX`.
///
/// # Cancel safety
/// Each call is one statement (plus, after a refusal, one `SELECT` of the
/// fence). Dropped in a transaction, the transaction decides; dropped
/// outside one, the statement may or may not have run.
#[derive(Debug, Clone)]
pub struct PgFence {
    name: String,
    table: String,
    key_column: String,
    fence_column: String,
}

impl PgFence {
    /// Fences the rows of `table` by `key_column`, with the fence in
    /// `fence_column`. Refused when a name is empty or contains a NUL.
    pub fn new(table: &str, key_column: &str, fence_column: &str) -> Result<Self, FenceError> {
        Ok(PgFence {
            name: table.to_owned(),
            table: quote_table(table)?,
            key_column: quote("key column", key_column)?,
            fence_column: quote("fence column", fence_column)?,
        })
    }

    /// The migration that adds the fence column to the table:
    /// `ALTER TABLE "stock" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0 CHECK ("fence" >= 0)`.
    pub fn migration(&self) -> String {
        format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {f} bigint NOT NULL DEFAULT 0 CHECK ({f} >= 0)",
            t = self.table,
            f = self.fence_column
        )
    }

    /// The claim-on-read read: `$1` the token, `$2` the key; returns
    /// `columns` of the row (its fence when `columns` is empty), and no row
    /// when the token is stale or the row is missing.
    pub fn read_sql(&self, columns: &[&str]) -> Result<String, FenceError> {
        let returning = if columns.is_empty() {
            self.fence_column.clone()
        } else {
            columns
                .iter()
                .map(|column| quote("column", column))
                .collect::<Result<Vec<_>, _>>()?
                .join(", ")
        };
        Ok(format!(
            "UPDATE {t} SET {f} = $1 WHERE {k} = $2 AND {f} <= $1 RETURNING {returning}",
            t = self.table,
            f = self.fence_column,
            k = self.key_column,
        ))
    }

    /// The fenced write: `$1` the token, `$2` the key, `$3`, `$4`, ... the
    /// new values of `columns`; updates no row when the token is stale or
    /// the row is missing.
    pub fn write_sql(&self, columns: &[&str]) -> Result<String, FenceError> {
        let mut set = String::new();
        for (at, column) in columns.iter().enumerate() {
            set.push_str(&format!(
                "{} = ${}, ",
                quote("column", column)?,
                at.saturating_add(3)
            ));
        }
        Ok(format!(
            "UPDATE {t} SET {set}{f} = $1 WHERE {k} = $2 AND {f} <= $1",
            t = self.table,
            f = self.fence_column,
            k = self.key_column,
        ))
    }

    /// The fence of a row without claiming it: `$1` the key.
    pub fn seen_sql(&self) -> String {
        format!(
            "SELECT {f} FROM {t} WHERE {k} = $1",
            t = self.table,
            f = self.fence_column,
            k = self.key_column,
        )
    }

    /// Reads `columns` of the row `key` for the holder of `token`, claiming
    /// it: from now on only `token` or a newer one may read or write it.
    ///
    /// # Cancel safety
    /// One statement (and a `SELECT` after a refusal): in a transaction,
    /// the transaction decides; outside one, the statement may or may not
    /// have run (see [`PgFence`]).
    pub async fn read<C>(
        &self,
        client: &C,
        key: &(dyn ToSql + Sync),
        token: u64,
        columns: &[&str],
    ) -> Result<Row, FenceError>
    where
        C: GenericClient + Sync,
    {
        let sql = self.read_sql(columns)?;
        let fence = self.token(key, token)?;
        let row = client
            .query_opt(&sql, &[&fence, key])
            .await
            .map_err(|source| self.error(key, source))?;
        match row {
            Some(row) => Ok(row),
            None => Err(self.refusal(client, key, token).await),
        }
    }

    /// Claims the row `key` for `token` without reading it.
    ///
    /// # Cancel safety
    /// One statement (and a `SELECT` after a refusal): in a transaction,
    /// the transaction decides; outside one, the statement may or may not
    /// have run (see [`PgFence`]).
    pub async fn check<C>(
        &self,
        client: &C,
        key: &(dyn ToSql + Sync),
        token: u64,
    ) -> Result<(), FenceError>
    where
        C: GenericClient + Sync,
    {
        self.read(client, key, token, &[]).await.map(drop)
    }

    /// Writes `values` (column, new value) to the row `key` for the holder
    /// of `token`: refused when a higher token has read or written the row.
    ///
    /// # Cancel safety
    /// One statement (and a `SELECT` after a refusal): in a transaction,
    /// the transaction decides; outside one, the statement may or may not
    /// have run (see [`PgFence`]).
    pub async fn write<C>(
        &self,
        client: &C,
        key: &(dyn ToSql + Sync),
        token: u64,
        values: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<(), FenceError>
    where
        C: GenericClient + Sync,
    {
        let columns: Vec<&str> = values.iter().map(|(column, _)| *column).collect();
        let sql = self.write_sql(&columns)?;
        let fence = self.token(key, token)?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&fence, key];
        params.extend(values.iter().map(|(_, value)| *value));
        let updated = client
            .execute(&sql, &params)
            .await
            .map_err(|source| self.error(key, source))?;
        if updated == 0 {
            return Err(self.refusal(client, key, token).await);
        }
        Ok(())
    }

    /// Why no row was claimed or updated: a stale token, or a missing row.
    async fn refusal<C>(&self, client: &C, key: &(dyn ToSql + Sync), token: u64) -> FenceError
    where
        C: GenericClient + Sync,
    {
        let name = self.name_of(key);
        match client.query_opt(&self.seen_sql(), &[key]).await {
            Ok(Some(row)) => match row.try_get::<_, i64>(0) {
                Ok(seen) => match u64::try_from(seen) {
                    Ok(seen) => FenceError::Stale {
                        key: name,
                        token,
                        seen,
                    },
                    Err(_) => FenceError::Reply {
                        key: name,
                        detail: format!("the fence column holds {seen}"),
                    },
                },
                Err(source) => FenceError::Postgres { key: name, source },
            },
            Ok(None) => FenceError::Missing { key: name },
            Err(source) => FenceError::Postgres { key: name, source },
        }
    }

    fn token(&self, key: &(dyn ToSql + Sync), token: u64) -> Result<i64, FenceError> {
        i64::try_from(token).map_err(|_| FenceError::TokenOutOfRange {
            key: self.name_of(key),
            token,
            max: i64::MAX.unsigned_abs(),
        })
    }

    fn name_of(&self, key: &(dyn ToSql + Sync)) -> String {
        format!("{}[{key:?}]", self.name)
    }

    fn error(&self, key: &(dyn ToSql + Sync), source: tokio_postgres::Error) -> FenceError {
        FenceError::Postgres {
            key: self.name_of(key),
            source,
        }
    }
}

/// Fences by name in a table of their own (`key text PRIMARY KEY, fence
/// bigint`): the store of a [`FenceLayer`](crate::FenceLayer) whose service
/// runs on several processes and keeps its data in PostgreSQL, or of any
/// check that has no row of its own to fence. A claim is one statement:
///
/// ```sql
/// INSERT INTO "fences" (key, fence) VALUES ($1, $2)
/// ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence WHERE "fences".fence <= EXCLUDED.fence
/// RETURNING fence;
/// ```
///
/// # Cancel safety
/// As [`PgFence`]: one statement per claim, plus a `SELECT` after a refusal.
#[derive(Debug)]
pub struct PgFenceStore<C> {
    client: Arc<C>,
    name: String,
    table: String,
}

impl<C> Clone for PgFenceStore<C> {
    fn clone(&self) -> Self {
        PgFenceStore {
            client: Arc::clone(&self.client),
            name: self.name.clone(),
            table: self.table.clone(),
        }
    }
}

impl<C: GenericClient + Send + Sync> PgFenceStore<C> {
    /// The fences in `table`, through `client` (a `tokio_postgres::Client`,
    /// or any other `GenericClient`). Create the table with
    /// [`migration`](Self::migration).
    pub fn new(client: Arc<C>, table: &str) -> Result<Self, FenceError> {
        Ok(PgFenceStore {
            client,
            name: table.to_owned(),
            table: quote_table(table)?,
        })
    }

    /// `CREATE TABLE IF NOT EXISTS "fences" (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence >= 0))`.
    pub fn migration(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence >= 0))",
            self.table
        )
    }

    /// Claims `key` for `token`: refused when a higher token has claimed
    /// it, else records `token`.
    ///
    /// # Cancel safety
    /// One statement (and a `SELECT` after a refusal): dropped, the claim
    /// happened in full or not at all.
    pub async fn claim(&self, key: &str, token: u64) -> Result<(), FenceError> {
        let fence = i64::try_from(token).map_err(|_| FenceError::TokenOutOfRange {
            key: key.to_owned(),
            token,
            max: i64::MAX.unsigned_abs(),
        })?;
        let sql = format!(
            "INSERT INTO {t} (key, fence) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE \
             SET fence = EXCLUDED.fence WHERE {t}.fence <= EXCLUDED.fence RETURNING fence",
            t = self.table
        );
        let claimed = self
            .client
            .query_opt(&sql, &[&key, &fence])
            .await
            .map_err(|source| pg_error(key, source))?;
        if claimed.is_some() {
            return Ok(());
        }
        Err(FenceError::Stale {
            key: key.to_owned(),
            token,
            seen: self.seen(key).await?,
        })
    }

    /// The highest token that has claimed `key` (0 when none has), without
    /// claiming it.
    ///
    /// # Cancel safety
    /// A plain read: dropping it changes nothing.
    pub async fn seen(&self, key: &str) -> Result<u64, FenceError> {
        let sql = format!("SELECT fence FROM {} WHERE key = $1", self.table);
        let row = self
            .client
            .query_opt(&sql, &[&key])
            .await
            .map_err(|source| pg_error(key, source))?;
        let Some(row) = row else { return Ok(0) };
        let seen: i64 = row.try_get(0).map_err(|source| pg_error(key, source))?;
        u64::try_from(seen).map_err(|_| FenceError::Reply {
            key: key.to_owned(),
            detail: format!("the fence column holds {seen}"),
        })
    }
}

fn pg_error(key: &str, source: tokio_postgres::Error) -> FenceError {
    FenceError::Postgres {
        key: key.to_owned(),
        source,
    }
}

/// `name` as a quoted SQL identifier (`"na""me"`).
fn quote(what: &'static str, name: &str) -> Result<String, FenceError> {
    if name.is_empty() || name.contains('\0') {
        return Err(FenceError::Invalid {
            what,
            name: name.to_owned(),
            reason: "an SQL name must be non-empty and without NUL",
        });
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// A table name, `table` or `schema.table`, quoted.
fn quote_table(name: &str) -> Result<String, FenceError> {
    match name.split_once('.') {
        Some((schema, table)) => Ok(format!(
            "{}.{}",
            quote("schema", schema)?,
            quote("table", table)?
        )),
        None => quote("table", name),
    }
}
