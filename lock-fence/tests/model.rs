//! Every fence of the crate against a model of claim-on-read, on random
//! interleavings of several holders (proptest): `RedisFence` (whole keys,
//! hash fields, `update`, several commands with `run_all`), `PgFence` (in transactions), `PgFenceStore`,
//! `MemoryFence` and `FenceLayer`, on a real Redis and a real PostgreSQL.
//!
//! The model, per resource: a read, write or increment with token `t` is
//! refused (answering the highest token seen) when a higher token has
//! touched the resource; otherwise `t` becomes the highest seen and the
//! operation happens. Each implementation must give the same answer to
//! every operation. `PROPTEST_CASES` sets the number of cases (default 48).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use distlock_fence::{
    FenceError, FenceLayer, FenceStore, MemoryFence, PgFence, PgFenceStore, RedisFence, KEY_HEADER,
    TOKEN_HEADER,
};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use lock_test_support::{PostgresServer, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::aio::MultiplexedConnection;
use tokio_postgres::{Client, NoTls};
use tower::{service_fn, Layer, ServiceExt};

/// Number of resources an interleaving touches.
const KEYS: usize = 2;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Read,
    Write(i64),
    Incr(i64),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    holder: usize,
    key: usize,
    kind: Kind,
}

/// What an operation answered: the value after it, or the highest token
/// seen when it was refused.
type Answer = Result<i64, u64>;

#[derive(Default)]
struct Model {
    rows: HashMap<usize, (i64, u64)>,
}

impl Model {
    fn apply(&mut self, op: Op, token: u64) -> Answer {
        let row = self.rows.entry(op.key).or_default();
        if token < row.1 {
            return Err(row.1);
        }
        row.1 = token;
        match op.kind {
            Kind::Read => {}
            Kind::Write(value) => row.0 = value,
            Kind::Incr(delta) => row.0 += delta,
        }
        Ok(row.0)
    }
}

fn answer(result: Result<i64, FenceError>) -> Answer {
    match result {
        Ok(value) => Ok(value),
        Err(FenceError::Stale { seen, .. }) => Err(seen),
        Err(other) => panic!("not a refusal: {other}"),
    }
}

/// The implementations under test, sharing one Redis and one PostgreSQL.
struct Subjects {
    redis: RedisFence<MultiplexedConnection>,
    conn: MultiplexedConnection,
    pg: Client,
    rows: PgFence,
    fences: PgFenceStore<Client>,
    case: AtomicU64,
}

impl Subjects {
    /// Runs `ops` against every implementation and the model.
    async fn check(&self, tokens: &[u64], ops: &[Op]) -> Result<(), TestCaseError> {
        let case = self.case.fetch_add(1, Ordering::Relaxed);
        let key = |k: usize| format!("c{case}:k{k}");
        for k in 0..KEYS {
            self.pg
                .execute("INSERT INTO rows (id, value) VALUES ($1, 0)", &[&key(k)])
                .await
                .unwrap();
        }
        let memory = MemoryFence::new();
        let layered = Layered::new(
            RedisFence::new(self.conn.clone())
                .with_prefix("layer:")
                .unwrap(),
        );
        let mut model = Model::default();
        let mut accepted: HashMap<usize, i64> = HashMap::new();

        for (step, op) in ops.iter().enumerate() {
            let token = tokens[op.holder];
            let k = key(op.key);
            let expected = model.apply(*op, token);
            let claim_only = expected.map(|_| 0);

            let on_key = answer(match op.kind {
                Kind::Read => self
                    .redis
                    .read::<Option<i64>>(&k, token)
                    .await
                    .map(Option::unwrap_or_default),
                Kind::Write(value) => self.redis.write(&k, token, value).await.map(|()| value),
                Kind::Incr(delta) if step % 2 == 0 => self.redis.incr_by(&k, token, delta).await,
                Kind::Incr(delta) => {
                    self.redis
                        .update(&k, token, |v: Option<i64>| v.unwrap_or(0) + delta)
                        .await
                }
            });
            prop_assert_eq!(
                on_key,
                expected,
                "redis key, step {} {:?} token {}",
                step,
                op,
                token
            );

            // The same operation with a count of the accepted ones, both
            // under one check: the count moves exactly when the model accepts.
            let all_key = format!("{{{k}}}:all");
            let count_key = format!("{{{k}}}:accepted");
            let command = match op.kind {
                Kind::Read => redis::cmd("GET").arg(&all_key).clone(),
                Kind::Write(value) => redis::cmd("SET")
                    .arg(&all_key)
                    .arg(value)
                    .arg("GET")
                    .clone(),
                Kind::Incr(delta) => redis::cmd("INCRBY").arg(&all_key).arg(delta).clone(),
            };
            let count = redis::cmd("INCR").arg(&count_key).clone();
            let on_all = answer(
                self.redis
                    .run_all::<(Option<i64>, i64)>(
                        &all_key,
                        token,
                        &[&count_key],
                        &[command, count],
                    )
                    .await
                    .map(|(reply, _)| match op.kind {
                        Kind::Write(value) => value,
                        _ => reply.unwrap_or_default(),
                    }),
            );
            prop_assert_eq!(
                on_all,
                expected,
                "redis run_all, step {} {:?} token {}",
                step,
                op,
                token
            );
            if expected.is_ok() {
                *accepted.entry(op.key).or_default() += 1;
            }
            let mut conn = self.conn.clone();
            let count: Option<i64> = redis::cmd("GET")
                .arg(&count_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            prop_assert_eq!(
                count.unwrap_or(0),
                accepted.get(&op.key).copied().unwrap_or(0),
                "redis run_all's count, step {}",
                step
            );

            let on_field = answer(match op.kind {
                Kind::Read => self
                    .redis
                    .read_field::<Option<i64>>("h", &k, token)
                    .await
                    .map(Option::unwrap_or_default),
                Kind::Write(value) => self
                    .redis
                    .write_field("h", &k, token, value)
                    .await
                    .map(|()| value),
                Kind::Incr(delta) if step % 2 == 0 => {
                    self.redis.incr_field_by("h", &k, token, delta).await
                }
                Kind::Incr(delta) => {
                    self.redis
                        .update_field("h", &k, token, |v: Option<i64>| v.unwrap_or(0) + delta)
                        .await
                }
            });
            prop_assert_eq!(
                on_field,
                expected,
                "redis field, step {} {:?} token {}",
                step,
                op,
                token
            );

            let on_row = answer(self.row(&k, op.kind, token).await);
            prop_assert_eq!(
                on_row,
                expected,
                "postgres row, step {} {:?} token {}",
                step,
                op,
                token
            );

            let on_store = answer(self.fences.claim(&k, token).await.map(|()| 0));
            prop_assert_eq!(
                on_store,
                claim_only,
                "postgres fence table, step {} token {}",
                step,
                token
            );

            let in_memory = answer(memory.claim(&k, token).map(|()| 0));
            prop_assert_eq!(
                in_memory,
                claim_only,
                "memory, step {} token {}",
                step,
                token
            );

            let through_layer = layered.call(&k, op.kind, token).await;
            prop_assert_eq!(
                through_layer,
                expected.map_err(|_| 0),
                "layer, step {} {:?} token {}",
                step,
                op,
                token
            );
        }
        Ok(())
    }

    /// A fenced read, write or read-modify-write of the row `id`, in one
    /// transaction.
    async fn row(&self, id: &str, kind: Kind, token: u64) -> Result<i64, FenceError> {
        self.pg.batch_execute("BEGIN").await.unwrap();
        let result = self.row_in_transaction(id, kind, token).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        self.pg.batch_execute(end).await.unwrap();
        result
    }

    async fn row_in_transaction(
        &self,
        id: &str,
        kind: Kind,
        token: u64,
    ) -> Result<i64, FenceError> {
        let value: i64 = self
            .rows
            .read(&self.pg, &id, token, &["value"])
            .await?
            .get(0);
        let value = match kind {
            Kind::Read => value,
            Kind::Write(new) => new,
            Kind::Incr(delta) => value + delta,
        };
        if !matches!(kind, Kind::Read) {
            self.rows
                .write(&self.pg, &id, token, &[("value", &value)])
                .await?;
        }
        Ok(value)
    }
}

/// A service behind a `FenceLayer` whose handler applies the operation to
/// a map, unfenced: the layer's check is the only fence.
struct Layered<S> {
    service: S,
}

type Body = Full<Bytes>;

impl Layered<()> {
    fn new(
        store: impl FenceStore,
    ) -> Layered<
        impl tower::Service<
                Request<Body>,
                Response = Response<distlock_fence::FenceBody<Body>>,
                Error = Infallible,
                Future: Send,
            > + Clone,
    > {
        let values: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
        let handler = service_fn(move |request: Request<Body>| {
            let values = Arc::clone(&values);
            async move {
                let key = request.headers()[KEY_HEADER].to_str().unwrap().to_owned();
                let op = request.headers()["x-op"].to_str().unwrap().to_owned();
                let mut values = values.lock().unwrap();
                let value = values.entry(key).or_default();
                if let Some(new) = op.strip_prefix("write:") {
                    *value = new.parse().unwrap();
                } else if let Some(delta) = op.strip_prefix("incr:") {
                    *value += delta.parse::<i64>().unwrap();
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(value.to_string()))))
            }
        });
        Layered {
            service: FenceLayer::new(store).layer(handler),
        }
    }
}

impl<S> Layered<S>
where
    S: tower::Service<
            Request<Body>,
            Response = Response<distlock_fence::FenceBody<Body>>,
            Error = Infallible,
        > + Clone,
{
    /// The answer through the layer; a refusal as `Err(0)` (409 does not
    /// carry the token seen in a header).
    async fn call(&self, key: &str, kind: Kind, token: u64) -> Answer {
        let op = match kind {
            Kind::Read => "read".to_owned(),
            Kind::Write(value) => format!("write:{value}"),
            Kind::Incr(delta) => format!("incr:{delta}"),
        };
        let request = Request::builder()
            .header(KEY_HEADER, key)
            .header(TOKEN_HEADER, token)
            .header("x-op", op)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = self.service.clone().oneshot(request).await.unwrap();
        match response.status() {
            StatusCode::OK => {
                let body = response.into_body().collect().await.unwrap().to_bytes();
                Ok(std::str::from_utf8(&body).unwrap().parse().unwrap())
            }
            StatusCode::CONFLICT => Err(0),
            other => panic!("{other}"),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        2 => Just(Kind::Read),
        1 => (-5i64..50).prop_map(Kind::Write),
        1 => (-3i64..4).prop_map(Kind::Incr),
    ];
    (0..4usize, 0..KEYS, kind).prop_map(|(holder, key, kind)| Op { holder, key, kind })
}

/// Four holders' tokens: small ones, often equal, and two above 2^53 that a
/// double cannot tell apart.
fn tokens() -> impl Strategy<Value = Vec<u64>> {
    let token = prop_oneof![4 => 1u64..6, 1 => Just((1u64 << 53) + 1), 1 => Just((1u64 << 53) + 2)];
    proptest::collection::vec(token, 4)
}

#[test]
fn every_fence_agrees_with_the_model_of_claim_on_read() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis_server = RedisServer::start();
    let pg_server = PostgresServer::start();
    let subjects = runtime.block_on(async {
        let conn = redis_server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let connect = || async {
            let (client, connection) =
                tokio_postgres::connect(&pg_server.connection_string(), NoTls)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            client
        };
        let pg = connect().await;
        pg.batch_execute("CREATE TABLE rows (id text PRIMARY KEY, value bigint NOT NULL)")
            .await
            .unwrap();
        let rows = PgFence::new("rows", "id", "fence").unwrap();
        pg.batch_execute(&rows.migration()).await.unwrap();
        let fences = PgFenceStore::new(Arc::new(connect().await), "fences").unwrap();
        pg.batch_execute(&fences.migration()).await.unwrap();
        Subjects {
            redis: RedisFence::new(conn.clone()),
            conn,
            pg,
            rows,
            fences,
            case: AtomicU64::new(0),
        }
    });

    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (tokens(), proptest::collection::vec(op(), 1..24));
    runner
        .run(&strategy, |(tokens, ops)| {
            runtime.block_on(subjects.check(&tokens, &ops))
        })
        .unwrap();
}
