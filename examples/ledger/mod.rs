//! A fenced store, the way the README's "Fencing tokens" section says to build
//! one: a stand-in for a database table that the examples (and
//! `tests/fencing.rs`) share.
//!
//! Every row keeps the highest fencing token that has read *or* written it.
//! Reads and writes both carry the holder's token and both are refused when a
//! higher token has touched the row; otherwise they record their token. The
//! read matters: once a newer holder has read a row, a stale holder (paused
//! past its lease, or force-released) can no longer write it, even though its
//! token is higher than that of the last *write*.
//!
//! The rule "reject a lower token than the last write, else apply" is not
//! enough for a read-modify-write: an old holder and its successor can both
//! read the same value, the old one writes first (accepted: its token is
//! higher than the stored one), the new one writes next (accepted), and one
//! of the two updates is lost.
//!
//! In SQL the same two steps are:
//!
//! ```sql
//! UPDATE stock SET fence = $token WHERE sku = $sku AND fence <= $token RETURNING qty;
//! UPDATE stock SET qty = $new_qty, fence = $token WHERE sku = $sku AND fence <= $token;
//! ```

#![allow(dead_code)] // each example uses part of it

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A holder's token was overtaken: a newer holder has read (claimed) the row.
/// The holder must stop, answer "conflict", and not retry under this token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    /// The token of the refused read or write.
    pub token: u64,
    /// The highest token that has claimed the row.
    pub newer: u64,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fencing token {}: the row was claimed by token {}",
            self.token, self.newer
        )
    }
}

impl std::error::Error for Stale {}

#[derive(Debug, Clone, Default)]
struct Row<V> {
    value: V,
    /// The highest token that has read or written the row.
    fence: u64,
}

/// Refuses `token` when a higher one has touched `row`, else records it.
fn claim<V>(row: &mut Row<V>, token: u64) -> Result<&mut Row<V>, Stale> {
    if token < row.fence {
        return Err(Stale {
            token,
            newer: row.fence,
        });
    }
    row.fence = token;
    Ok(row)
}

/// Rows of `V` by key, fenced with claim-on-read.
#[derive(Debug)]
pub struct Ledger<K, V> {
    rows: Arc<Mutex<HashMap<K, Row<V>>>>,
}

impl<K, V> Clone for Ledger<K, V> {
    fn clone(&self) -> Self {
        Ledger {
            rows: self.rows.clone(),
        }
    }
}

impl<K, V> Default for Ledger<K, V> {
    fn default() -> Self {
        Ledger {
            rows: Arc::default(),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone + Default> Ledger<K, V> {
    fn rows(&self) -> MutexGuard<'_, HashMap<K, Row<V>>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the row `key` for the holder of `token`, claiming it: from now on
    /// only `token` or a newer one may read or write it. A missing row reads
    /// as `V::default()`.
    pub fn read(&self, key: &K, token: u64) -> Result<V, Stale> {
        let mut rows = self.rows();
        let row = claim(rows.entry(key.clone()).or_default(), token)?;
        Ok(row.value.clone())
    }

    /// Writes the row `key` for the holder of `token`: refused when a newer
    /// token has read or written the row since (in particular since this
    /// holder read it).
    pub fn write(&self, key: &K, token: u64, value: V) -> Result<(), Stale> {
        let mut rows = self.rows();
        let row = claim(rows.entry(key.clone()).or_default(), token)?;
        row.value = value;
        Ok(())
    }

    /// The row `key` and the highest token that has claimed it, without
    /// claiming it (for displays, not for a read-modify-write).
    pub fn peek(&self, key: &K) -> (V, u64) {
        self.rows()
            .get(key)
            .map(|row| (row.value.clone(), row.fence))
            .unwrap_or_default()
    }
}
