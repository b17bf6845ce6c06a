//! `FenceLayer` in front of a stock service, on each fence store (memory,
//! real Redis, real PostgreSQL): the interleaving of the workspace's
//! `tests/fencing.rs`, where each read and each write is a request carrying
//! the holder's token; the same layer checking writes only loses the update;
//! the answers (409, gRPC `ABORTED`, 400) and the `Fenced` extension; a
//! `LockLayer` upstream handing its token down with no glue.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{
    assert_lost_update_caught, assert_no_lost_update, interleave, redis_locks, Fut, Store,
};
use distlock_core::LockClient;
use distlock_fence::{
    FenceError, FenceLayer, FenceStore, Fenced, MemoryFence, PgFenceStore, RedisFence, KEY_HEADER,
    TOKEN_HEADER,
};
use distlock_tower::{FencingToken, LockLayer};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use lock_test_support::{PostgresServer, RedisServer};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, Service, ServiceExt};

type Body = Full<Bytes>;
type Svc =
    BoxCloneSyncService<Request<Body>, Response<distlock_fence::FenceBody<Body>>, Infallible>;

/// The stock service: `GET` answers the stock, `PUT` sets it; the handler
/// itself checks nothing, and answers with the token it was given.
fn stock_service(
    stock: Arc<Mutex<i64>>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(move |request: Request<Body>| {
        let stock = Arc::clone(&stock);
        async move {
            let fenced = request.extensions().get::<Fenced>().cloned();
            let put = request.method() == Method::PUT;
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut stock = stock.lock().unwrap();
            if put {
                *stock = std::str::from_utf8(&body).unwrap().parse().unwrap();
            }
            let mut response = Response::new(Full::new(Bytes::from(stock.to_string())));
            if let Some(fenced) = fenced {
                response
                    .headers_mut()
                    .insert("x-accepted", fenced.token.into());
            }
            Ok::<_, Infallible>(response)
        }
    })
}

/// The key of a request from its header, for every method or for writes only.
fn key_of(
    writes_only: bool,
) -> impl Fn(&Request<Body>) -> Option<String> + Clone + Send + Sync + 'static {
    move |request: &Request<Body>| {
        if writes_only && request.method() != Method::PUT {
            return None;
        }
        request
            .headers()
            .get(KEY_HEADER)?
            .to_str()
            .ok()
            .map(str::to_owned)
    }
}

/// The stock service behind a `FenceLayer` on `store`.
struct Downstream {
    service: Svc,
    stock: Arc<Mutex<i64>>,
}

impl Downstream {
    fn new(store: impl FenceStore, writes_only: bool) -> Downstream {
        let stock = Arc::new(Mutex::new(0));
        let layer = FenceLayer::new(store).key(key_of(writes_only));
        let service = BoxCloneSyncService::new(layer.layer(stock_service(Arc::clone(&stock))));
        Downstream { service, stock }
    }

    async fn send(&self, method: Method, token: u64, body: String) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri("/stock")
            .header(KEY_HEADER, common::SKU)
            .header(TOKEN_HEADER, token.to_string())
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = self.service.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }
}

impl Store for Downstream {
    fn reset(&self, qty: i64) -> Fut<'_, ()> {
        *self.stock.lock().unwrap() = qty;
        Box::pin(async {})
    }
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>> {
        Box::pin(async move {
            match self.send(Method::GET, token, String::new()).await {
                (StatusCode::OK, body) => Ok(body.parse().unwrap()),
                (StatusCode::CONFLICT, body) => Err(FenceError::Stale {
                    key: body,
                    token,
                    seen: 0,
                }),
                (status, body) => panic!("{status} {body}"),
            }
        })
    }
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>> {
        Box::pin(async move {
            match self.send(Method::PUT, token, qty.to_string()).await {
                (StatusCode::OK, _) => Ok(()),
                (StatusCode::CONFLICT, body) => Err(FenceError::Stale {
                    key: body,
                    token,
                    seen: 0,
                }),
                (status, body) => panic!("{status} {body}"),
            }
        })
    }
    fn stock(&self) -> Fut<'_, i64> {
        let stock = *self.stock.lock().unwrap();
        Box::pin(async move { stock })
    }
}

async fn pg_store(pg: &PostgresServer, table: &str) -> PgFenceStore<tokio_postgres::Client> {
    let (client, connection) =
        tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    let store = PgFenceStore::new(Arc::new(client), table).unwrap();
    let (client, connection) =
        tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client.batch_execute(&store.migration()).await.unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_refuses_the_stale_holder_on_every_store() {
    let redis = RedisServer::start();
    let pg = PostgresServer::start();
    let [a, b, op] = redis_locks(&redis.url()).await;
    let conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let memory = Downstream::new(MemoryFence::new(), false);
    let outcome = interleave(&a, &b, &op, &memory).await;
    assert_no_lost_update(&outcome);
    assert!(outcome.a_refusal.unwrap().contains("sku:4"));

    let on_redis = Downstream::new(RedisFence::new(conn.clone()), false);
    assert_no_lost_update(&interleave(&a, &b, &op, &on_redis).await);

    let on_pg = Downstream::new(pg_store(&pg, "fences").await, false);
    assert_no_lost_update(&interleave(&a, &b, &op, &on_pg).await);

    // The same layer fencing writes only loses the update, on each store.
    let write_only = Downstream::new(MemoryFence::new(), true);
    assert_lost_update_caught(&interleave(&a, &b, &op, &write_only).await);
    let write_only = Downstream::new(RedisFence::new(conn).with_prefix("wo:").unwrap(), true);
    assert_lost_update_caught(&interleave(&a, &b, &op, &write_only).await);
    let write_only = Downstream::new(pg_store(&pg, "write_only_fences").await, true);
    assert_lost_update_caught(&interleave(&a, &b, &op, &write_only).await);
}

#[tokio::test]
async fn answers_and_the_fenced_extension() {
    let fence = MemoryFence::new();
    let stock = Arc::new(Mutex::new(7));
    let mut http = FenceLayer::new(fence.clone()).layer(stock_service(Arc::clone(&stock)));
    let request = |token: Option<&str>, key: Option<&str>| {
        let mut builder = Request::builder().uri("/stock");
        if let Some(token) = token {
            builder = builder.header(TOKEN_HEADER, token);
        }
        if let Some(key) = key {
            builder = builder.header(KEY_HEADER, key);
        }
        builder.body(Full::new(Bytes::new())).unwrap()
    };

    let accepted = http
        .ready()
        .await
        .unwrap()
        .call(request(Some("5"), Some("k")))
        .await
        .unwrap();
    assert_eq!(accepted.status(), StatusCode::OK);
    assert_eq!(accepted.headers()["x-accepted"], "5");
    assert_eq!(fence.seen("k"), 5);

    let stale = http
        .ready()
        .await
        .unwrap()
        .call(request(Some("4"), Some("k")))
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    let body = stale.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        body.contains("stale fencing token 4 for k: token 5"),
        "{body}"
    );

    for token in [None, Some("x"), Some("-1")] {
        let bad = http
            .ready()
            .await
            .unwrap()
            .call(request(token, Some("k")))
            .await
            .unwrap();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "{token:?}");
    }
    // No key: through, unchecked, without the extension.
    let unkeyed = http
        .ready()
        .await
        .unwrap()
        .call(request(None, None))
        .await
        .unwrap();
    assert_eq!(unkeyed.status(), StatusCode::OK);
    assert!(!unkeyed.headers().contains_key("x-accepted"));

    let mut grpc = FenceLayer::new(fence.clone())
        .token_header(http::HeaderName::from_static("x-token"))
        .grpc()
        .layer(stock_service(stock));
    let call = Request::builder()
        .uri("/stock.Stock/Reserve")
        .header("x-token", "3")
        .header(KEY_HEADER, "k")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let aborted = grpc.ready().await.unwrap().call(call).await.unwrap();
    assert_eq!(aborted.status(), StatusCode::OK);
    assert_eq!(aborted.headers()["content-type"], "application/grpc");
    assert_eq!(aborted.headers()["grpc-status"], "10");
    let message = aborted.headers()["grpc-message"].to_str().unwrap();
    assert!(message.contains("stale fencing token 3"), "{message}");
}

/// Upstream, `LockLayer` takes the lock per request and gives the handler a
/// `FencingToken`; the handler forwards `token.key` and `token.token` in the
/// headers `FenceLayer` reads. No conversion in between.
#[tokio::test]
async fn a_lock_layer_upstream_hands_its_token_down() {
    let locks = LockClient::memory();
    let fence = MemoryFence::new();
    let downstream = FenceLayer::new(fence.clone()).layer(stock_service(Arc::new(Mutex::new(1))));
    let upstream = LockLayer::new(locks.clone(), |_: &Request<Body>| {
        Some(common::SKU.to_owned())
    })
    .layer(service_fn(move |request: Request<Body>| {
        let downstream = downstream.clone();
        async move {
            let lock = request.extensions().get::<FencingToken>().unwrap().clone();
            let forwarded = Request::builder()
                .uri("/stock")
                .header(KEY_HEADER, lock.key)
                .header(TOKEN_HEADER, lock.token)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let answer = downstream.oneshot(forwarded).await?;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
                answer.status().as_str().to_owned(),
            ))))
        }
    }));
    let response = upstream
        .oneshot(
            Request::builder()
                .uri("/reserve")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"200");
    assert!(fence.seen(common::SKU) >= 1);
}
