//! `RedisFence` on real Redis: the interleaving of the workspace's
//! `tests/fencing.rs` on a key, a hash field and a command of one's own, on
//! one node and on a cluster; a write-only check that loses the update; the
//! refusal's fields; big tokens; the fence's cluster slot; several commands
//! under one check (`run_all`), all or none.

mod common;

use common::{
    assert_lost_update_caught, assert_no_lost_update, interleave, redis_locks, Fut, Store,
};
use distlock_fence::{FenceError, RedisFence, REDIS_RUN_ALL_SCRIPT};
use lock_test_support::{key_slot, RedisCluster, RedisServer};
use redis::aio::ConnectionLike;

/// The stock in a whole key.
struct KeyStore<C> {
    fence: RedisFence<C>,
    key: String,
}

/// The stock in a field of a hash.
struct FieldStore<C> {
    fence: RedisFence<C>,
}

/// The stock read and written with one's own commands under the key's fence.
struct RunStore<C> {
    fence: RedisFence<C>,
}

async fn reset<C: ConnectionLike + Clone + Send + Sync>(
    fence: &RedisFence<C>,
    conn: &C,
    key: &str,
    qty: i64,
) {
    let mut conn = conn.clone();
    let () = redis::cmd("DEL")
        .arg(key)
        .arg(fence.fence_key(key))
        .query_async::<i64>(&mut conn)
        .await
        .map(drop)
        .unwrap();
    let () = redis::cmd("SET")
        .arg(key)
        .arg(qty)
        .query_async(&mut conn)
        .await
        .unwrap();
}

trait Conn: ConnectionLike + Clone + Send + Sync + 'static {}
impl<C: ConnectionLike + Clone + Send + Sync + 'static> Conn for C {}

struct WithConn<S, C> {
    store: S,
    conn: C,
}

impl<C: Conn> Store for WithConn<KeyStore<C>, C> {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(reset(&self.store.fence, &self.conn, &self.store.key, qty))
    }
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move { self.store.fence.read::<i64>(&self.store.key, token).await })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(self.store.fence.write(&self.store.key, token, qty))
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("GET")
                .arg(&self.store.key)
                .query_async(&mut conn)
                .await
                .unwrap()
        })
    }
}

impl<C: Conn> Store for WithConn<FieldStore<C>, C> {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let fence_key = self.store.fence.fence_key("stock");
            let () = redis::cmd("DEL")
                .arg("stock")
                .arg(fence_key)
                .query_async::<i64>(&mut conn)
                .await
                .map(drop)
                .unwrap();
            let () = redis::cmd("HSET")
                .arg("stock")
                .arg(common::SKU)
                .arg(qty)
                .query_async::<i64>(&mut conn)
                .await
                .map(drop)
                .unwrap();
        })
    }
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            self.store
                .fence
                .read_field::<i64>("stock", common::SKU, token)
                .await
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(
            self.store
                .fence
                .write_field("stock", common::SKU, token, qty),
        )
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("HGET")
                .arg("stock")
                .arg(common::SKU)
                .query_async(&mut conn)
                .await
                .unwrap()
        })
    }
}

impl<C: Conn> Store for WithConn<RunStore<C>, C> {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(reset(&self.store.fence, &self.conn, "stock:run", qty))
    }
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            self.store
                .fence
                .run::<i64>("stock:run", token, redis::cmd("GET").arg("stock:run"))
                .await
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(async move {
            self.store
                .fence
                .run::<()>(
                    "stock:run",
                    token,
                    redis::cmd("SET").arg("stock:run").arg(qty),
                )
                .await
        })
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("GET")
                .arg("stock:run")
                .query_async(&mut conn)
                .await
                .unwrap()
        })
    }
}

/// The old rule, in Redis: a write is refused when its token is lower than
/// the last write's; reads are not fenced.
struct WriteOnly<C> {
    conn: C,
}

const WRITE_ONLY: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'qty', ARGV[2])
return 1
";

impl<C: Conn> Store for WriteOnly<C> {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let () = redis::cmd("DEL")
                .arg("wo")
                .query_async::<i64>(&mut conn)
                .await
                .map(drop)
                .unwrap();
            let () = redis::cmd("HSET")
                .arg("wo")
                .arg("qty")
                .arg(qty)
                .query_async::<i64>(&mut conn)
                .await
                .map(drop)
                .unwrap();
        })
    }
    fn read(&self, _token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            Ok(redis::cmd("HGET")
                .arg("wo")
                .arg("qty")
                .query_async(&mut conn)
                .await
                .unwrap())
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let ok: i64 = redis::Script::new(WRITE_ONLY)
                .key("wo")
                .arg(token)
                .arg(qty)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            if ok == 1 {
                Ok(())
            } else {
                Err(FenceError::Stale {
                    key: "wo".into(),
                    token,
                    seen: 0,
                })
            }
        })
    }
    fn stock(&self) -> Fut<'_, i64> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            redis::cmd("HGET")
                .arg("wo")
                .arg("qty")
                .query_async(&mut conn)
                .await
                .unwrap()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interleaving_refuses_the_stale_holder_on_one_node() {
    let server = RedisServer::start();
    let [a, b, op] = redis_locks(&server.url()).await;
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn.clone());

    let key = WithConn {
        store: KeyStore {
            fence: fence.clone(),
            key: "stock:4".into(),
        },
        conn: conn.clone(),
    };
    let outcome = interleave(&a, &b, &op, &key).await;
    assert_no_lost_update(&outcome);
    let refusal = outcome.a_refusal.unwrap();
    assert!(refusal.contains("stock:4"), "{refusal}");

    let field = WithConn {
        store: FieldStore {
            fence: fence.clone(),
        },
        conn: conn.clone(),
    };
    let outcome = interleave(&a, &b, &op, &field).await;
    assert_no_lost_update(&outcome);
    assert!(outcome.a_refusal.unwrap().contains("stock#sku:4"));

    let run = WithConn {
        store: RunStore { fence },
        conn: conn.clone(),
    };
    assert_no_lost_update(&interleave(&a, &b, &op, &run).await);

    // The same test fails on a store that checks writes only.
    let outcome = interleave(&a, &b, &op, &WriteOnly { conn }).await;
    assert_lost_update_caught(&outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interleaving_refuses_the_stale_holder_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.master_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn.clone());
    // The locks live in a Redis of their own; the data in the cluster.
    let server = RedisServer::start();
    let [a, b, op] = redis_locks(&server.url()).await;
    for key in ["stock:4", "user:{42}:stock", "odd}key", "x{}{y}"] {
        let fence_key = fence.fence_key(key);
        assert_eq!(
            key_slot(fence_key.as_bytes()),
            key_slot(key.as_bytes()),
            "{key} -> {fence_key}"
        );
        let store = WithConn {
            store: KeyStore {
                fence: fence.clone(),
                key: key.into(),
            },
            conn: conn.clone(),
        };
        let outcome = interleave(&a, &b, &op, &store).await;
        assert_no_lost_update(&outcome);
    }
    // Field fences and one's own commands on a cluster too.
    let field = WithConn {
        store: FieldStore {
            fence: fence.clone(),
        },
        conn: conn.clone(),
    };
    assert_no_lost_update(&interleave(&a, &b, &op, &field).await);
    let run = WithConn {
        store: RunStore {
            fence: fence.clone(),
        },
        conn: conn.clone(),
    };
    assert_no_lost_update(&interleave(&a, &b, &op, &run).await);
    assert_eq!(fence.incr_by("user:{7}:n", 3, 5).await.unwrap(), 5);
    // Several commands under one check: the cluster accepts the declared
    // keys of the fenced key's slot, with or without a hash tag of its own.
    for (key, log) in [("user:{7}:n", "{7}:log"), ("order:9", "{order:9}:log")] {
        let (prev, len): (Option<i64>, i64) = fence
            .run_all(
                key,
                4,
                &[log],
                &[
                    redis::cmd("SET").arg(key).arg(1).arg("GET").clone(),
                    redis::cmd("RPUSH").arg(log).arg("4").clone(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(len, 1, "{key}");
        assert_eq!(prev, (key == "user:{7}:n").then_some(5), "{key}");
    }
}

#[tokio::test]
async fn refusals_name_the_key_the_token_and_the_highest_seen() {
    let server = RedisServer::start();
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn);

    assert_eq!(fence.seen("k").await.unwrap(), 0);
    let none: Option<String> = fence.read("k", 7).await.unwrap();
    assert_eq!(none, None);
    assert_eq!(fence.seen("k").await.unwrap(), 7);
    match fence.write("k", 6, "late").await {
        Err(FenceError::Stale { key, token, seen }) => {
            assert_eq!((key.as_str(), token, seen), ("k", 6, 7))
        }
        other => panic!("{other:?}"),
    }
    // The same token may read and write again; a higher one takes over.
    fence.write("k", 7, "v7").await.unwrap();
    assert_eq!(
        fence
            .update("k", 8, |v: String| format!("{v}+8"))
            .await
            .unwrap(),
        "v7+8"
    );
    assert!(fence.check("k", 7).await.unwrap_err().is_stale());
    fence.check("k", 9).await.unwrap();

    // Hash fields have their own fences.
    assert_eq!(fence.incr_field_by("h", "a", 5, 2).await.unwrap(), 2);
    assert_eq!(fence.incr_field_by("h", "b", 1, 3).await.unwrap(), 3);
    match fence.incr_field_by("h", "a", 4, 1).await {
        Err(FenceError::Stale { key, token, seen }) => {
            assert_eq!((key.as_str(), token, seen), ("h#a", 4, 5))
        }
        other => panic!("{other:?}"),
    }
    let a: i64 = fence.read_field("h", "a", 5).await.unwrap();
    assert_eq!(a, 2);
    assert_eq!(
        fence
            .update_field("h", "b", 2, |b: i64| b * 10)
            .await
            .unwrap(),
        30
    );

    // A refused command does not run.
    fence.check("list", 2).await.unwrap();
    let refused = fence
        .run::<i64>("list", 1, redis::cmd("RPUSH").arg("list").arg("x"))
        .await;
    assert!(refused.unwrap_err().is_stale());
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let len: i64 = redis::cmd("LLEN")
        .arg("list")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0);

    // A command error surfaces as a Redis error naming the key.
    let error = fence
        .run::<i64>("k", 9, redis::cmd("INCR").arg("k"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, FenceError::Redis { key, .. } if key == "k"),
        "{error:?}"
    );

    // A prefix with a brace would move the fence to another slot.
    assert!(matches!(
        RedisFence::new(conn.clone()).with_prefix("f{x}:"),
        Err(FenceError::Invalid { .. })
    ));
    let custom = RedisFence::new(conn).with_prefix("f:").unwrap();
    assert_eq!(custom.fence_key("order:1"), "f:{order:1}:order:1");
}

#[tokio::test]
async fn tokens_compare_exactly_across_the_whole_u64_range() {
    let server = RedisServer::start();
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn);
    // 2^53 + 1 and 2^53 + 2 are one double: Lua numbers would take them as equal.
    let big = (1u64 << 53) + 2;
    fence.check("k", big).await.unwrap();
    assert!(fence.check("k", big - 1).await.unwrap_err().is_stale());
    fence.check("k", u64::MAX - 1).await.unwrap();
    assert!(fence.check("k", 99).await.unwrap_err().is_stale());
    assert!(fence.check("k", 1 << 62).await.unwrap_err().is_stale());
    fence.check("k", u64::MAX).await.unwrap();
    assert_eq!(fence.seen("k").await.unwrap(), u64::MAX);
}

async fn list(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn run_all_runs_every_command_in_order_or_none() {
    let server = RedisServer::start();
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn.clone());
    let write = |value: i64, entry: &str| {
        [
            redis::cmd("SET").arg("acct").arg(value).arg("GET").clone(),
            redis::cmd("RPUSH").arg("{acct}:log").arg(entry).clone(),
            redis::cmd("LLEN").arg("{acct}:log").clone(),
        ]
    };

    // The replies, in the commands' order.
    let replies: (Option<i64>, i64, i64) = fence
        .run_all("acct", 5, &["{acct}:log"], &write(10, "5:10"))
        .await
        .unwrap();
    assert_eq!(replies, (None, 1, 1));
    let replies: (Option<i64>, i64, i64) = fence
        .run_all("acct", 5, &["{acct}:log"], &write(11, "5:11"))
        .await
        .unwrap();
    assert_eq!(replies, (Some(10), 2, 2));
    assert_eq!(fence.seen("acct").await.unwrap(), 5);

    // A newer holder claims; the old one's commands run none of them.
    let read: i64 = fence.read("acct", 6).await.unwrap();
    assert_eq!(read, 11);
    match fence
        .run_all::<redis::Value>("acct", 5, &["{acct}:log"], &write(99, "5:99"))
        .await
    {
        Err(FenceError::Stale { key, token, seen }) => {
            assert_eq!((key.as_str(), token, seen), ("acct", 5, 6))
        }
        other => panic!("{other:?}"),
    }
    let value: i64 = redis::cmd("GET")
        .arg("acct")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, 11);
    assert_eq!(list(&mut conn, "{acct}:log").await, ["5:10", "5:11"]);
    // A `Vec` takes replies of one type.
    let lens: Vec<i64> = fence
        .run_all(
            "acct",
            6,
            &["{acct}:log"],
            &[
                redis::cmd("RPUSH").arg("{acct}:log").arg("6").clone(),
                redis::cmd("LLEN").arg("{acct}:log").clone(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(lens, [3, 3]);

    // A key of another slot is refused before anything runs or is claimed.
    let refused = fence
        .run_all::<redis::Value>("acct", 7, &["log"], &write(1, "7"))
        .await;
    assert!(
        matches!(&refused, Err(FenceError::Invalid { what: "key", name, .. }) if name == "log"),
        "{refused:?}"
    );
    assert_eq!(fence.seen("acct").await.unwrap(), 6);
    // So is a command without even a name.
    let refused = fence
        .run_all::<redis::Value>("acct", 7, &[], &[redis::Cmd::new()])
        .await;
    assert!(
        matches!(
            refused,
            Err(FenceError::Invalid {
                what: "command",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(fence.seen("acct").await.unwrap(), 6);
    // No command: a claim, answered with no replies.
    let none: Vec<i64> = fence.run_all("acct", 7, &[], &[]).await.unwrap();
    assert!(none.is_empty());
    assert_eq!(fence.seen("acct").await.unwrap(), 7);
    assert!(fence
        .run_all::<Vec<i64>>("acct", 6, &[], &[])
        .await
        .unwrap_err()
        .is_stale());

    // A failing command stops the script with its error; those before it ran.
    let error = fence
        .run_all::<redis::Value>(
            "acct",
            7,
            &["{acct}:log"],
            &[
                redis::cmd("RPUSH").arg("{acct}:log").arg("7").clone(),
                redis::cmd("HSET").arg("acct").arg("f").arg(1).clone(),
                redis::cmd("RPUSH").arg("{acct}:log").arg("never").clone(),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, FenceError::Redis { key, .. } if key == "acct"),
        "{error:?}"
    );
    assert_eq!(
        list(&mut conn, "{acct}:log").await,
        ["5:10", "5:11", "6", "7"]
    );
}

#[tokio::test]
async fn the_run_all_script_speaks_its_documented_wire_format() {
    let server = RedisServer::start();
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new(conn.clone());
    let script = redis::Script::new(REDIS_RUN_ALL_SCRIPT);
    let call = |token: &str, args: &[&str]| {
        let mut invocation = script.key(fence.fence_key("report"));
        invocation.key("report").key("{report}:log");
        invocation.arg(token).arg("k");
        for arg in args {
            invocation.arg(*arg);
        }
        invocation
    };
    // As in the docs: `2 3 SET report ... 3 RPUSH {report}:log written`.
    let args = [
        "2",
        "3",
        "SET",
        "report",
        "done",
        "3",
        "RPUSH",
        "{report}:log",
        "written",
    ];
    let reply: (i64, (String, i64)) = call("12", &args).invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, (1, ("OK".into(), 1)));
    // The claim is the one `RedisFence` reads and checks.
    assert_eq!(fence.seen("report").await.unwrap(), 12);
    assert!(fence.check("report", 11).await.unwrap_err().is_stale());
    let reply: (i64, String) = call("11", &args).invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, (0, "12".into()));
    assert_eq!(list(&mut conn, "{report}:log").await, ["written"]);

    // A command list that does not add up is an error, before the claim.
    for bad in [
        &["2", "3", "SET", "report"][..],
        &["x"],
        &["1", "0"],
        &["1", "2", "GET", "report", "extra"],
    ] {
        let error = call("13", bad)
            .invoke_async::<redis::Value>(&mut conn)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("fence:"), "{bad:?}: {error}");
    }
    assert_eq!(fence.seen("report").await.unwrap(), 12);
}
