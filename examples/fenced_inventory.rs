//! Fencing checked at the resource, with `distlock-fence` (in an
//! application: `distlock::fence`, feature `fence`): an inventory service
//! owns the stock and sits behind a `FenceLayer`; the replicas that reserve
//! stock take the lock `sku:{n}` and send its fencing token with every call.
//!
//! The demo runs the interleaving of the README's "Guarantees" against the
//! service: replica A reads the stock, A's lock is force-released (or A is
//! paused past its lease), B takes the lock and reads, A writes, B writes.
//! A's write is refused with 409 before the handler runs; B's goes through;
//! no reservation is lost.
//!
//! With `REDIS_URL` set, the locks, the stock and the fences are in that
//! Redis (`RedisFence`: the layer and the handler's fenced write share the
//! key's fence); otherwise everything is in memory (`MemoryFence`).
//!
//! ```sh
//! cargo run --example fenced_inventory
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fenced_inventory
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::{Extension, Router};
use distlock::LockClient;
use distlock_fence::{
    FenceError, FenceLayer, Fenced, MemoryFence, RedisFence, KEY_HEADER, TOKEN_HEADER,
};
use http_body_util::BodyExt;
use redis::aio::MultiplexedConnection;
use tower::ServiceExt;

/// Where the stock lives: in Redis behind a `RedisFence`, or in a map (then
/// the layer's `MemoryFence` is the only check, which is enough in one
/// process where each call is one step).
#[derive(Clone)]
enum Stock {
    Redis(RedisFence<MultiplexedConnection>),
    Memory(Arc<Mutex<HashMap<String, i64>>>),
}

impl Stock {
    async fn read(&self, key: &str, token: u64) -> Result<i64, FenceError> {
        match self {
            Stock::Redis(fence) => Ok(fence.read::<Option<i64>>(key, token).await?.unwrap_or(0)),
            Stock::Memory(map) => Ok(*map
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(key)
                .unwrap_or(&0)),
        }
    }

    async fn write(&self, key: &str, token: u64, qty: i64) -> Result<(), FenceError> {
        match self {
            Stock::Redis(fence) => fence.write(key, token, qty).await,
            Stock::Memory(map) => {
                map.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.to_owned(), qty);
                Ok(())
            }
        }
    }
}

fn answer(result: Result<String, FenceError>) -> (StatusCode, String) {
    match result {
        Ok(body) => (StatusCode::OK, body),
        Err(stale @ FenceError::Stale { .. }) => (StatusCode::CONFLICT, stale.to_string()),
        Err(other) => (StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
    }
}

/// `GET /stock/{sku}`: the stock, read under the caller's token.
async fn read(
    State(stock): State<Stock>,
    Path(sku): Path<u64>,
    Extension(fenced): Extension<Fenced>,
) -> (StatusCode, String) {
    answer(
        stock
            .read(&format!("stock:{sku}"), fenced.token)
            .await
            .map(|qty| qty.to_string()),
    )
}

/// `PUT /stock/{sku}` with the new stock as the body, written under the
/// caller's token.
async fn write(
    State(stock): State<Stock>,
    Path(sku): Path<u64>,
    Extension(fenced): Extension<Fenced>,
    body: String,
) -> (StatusCode, String) {
    let Ok(qty) = body.trim().parse::<i64>() else {
        return (StatusCode::BAD_REQUEST, format!("not a quantity: {body:?}"));
    };
    answer(
        stock
            .write(&format!("stock:{sku}"), fenced.token, qty)
            .await
            .map(|()| qty.to_string()),
    )
}

/// The inventory service: the layer names the resource by path and checks
/// the `x-fencing-token` header against `layer`'s store before the handlers.
fn inventory(stock: Stock, layer: FenceLayer) -> Router {
    let layer = layer.key(|request: &Request<Body>| {
        let sku = request.uri().path().strip_prefix("/stock/")?;
        Some(format!("stock:{sku}"))
    });
    Router::new()
        .route("/stock/{sku}", get(read).put(write))
        .route_layer(layer)
        .with_state(stock)
}

/// One call of a replica: its token in the header, as a `LockLayer`
/// handler (`FencingToken::token`) or a `#[distributed_lock]` fn
/// (`distlock::current()`) would send it.
async fn call(app: &Router, put: Option<i64>, token: u64) -> (StatusCode, String) {
    let request = Request::builder()
        .method(if put.is_some() { "PUT" } else { "GET" })
        .uri("/stock/4")
        .header(TOKEN_HEADER, token)
        .header(KEY_HEADER, "stock:4") // for services that key by header instead
        .body(Body::from(
            put.map(|qty| qty.to_string()).unwrap_or_default(),
        ))
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, String::from_utf8_lossy(&body).trim().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (locks, stock, layer) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let fence = RedisFence::new(conn);
            println!("backend: Redis at {url}");
            (
                LockClient::connect(&url).await?,
                Stock::Redis(fence.clone()),
                FenceLayer::new(fence),
            )
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis)");
            let stock = Stock::Memory(Arc::default());
            (
                LockClient::memory(),
                stock,
                FenceLayer::new(MemoryFence::new()),
            )
        }
    };
    let app = inventory(stock.clone(), layer);
    let (a, b) = (locks.clone(), locks.clone());

    // The stock starts at 300 (a setup write, under a token no holder has).
    let start = a.lock("sku:4").acquire().await?;
    println!(
        "setup: PUT 300 -> {:?}",
        call(&app, Some(300), start.fencing_token()).await
    );
    start.release().await?;

    let lock_a = a.lock("sku:4").acquire().await?;
    let (_, read_a) = call(&app, None, lock_a.fencing_token()).await;
    println!("A (token {}) reads {read_a}", lock_a.fencing_token());
    locks.admin().force_release("sku:4").await?;
    println!("A's lock is force-released (or A is paused past its lease)");
    let lock_b = b.lock("sku:4").acquire().await?;
    let (_, read_b) = call(&app, None, lock_b.fencing_token()).await;
    println!("B (token {}) reads {read_b}", lock_b.fencing_token());
    let a_qty = read_a.parse::<i64>()? - 1;
    let (status, body) = call(&app, Some(a_qty), lock_a.fencing_token()).await;
    println!("A writes {a_qty} -> {status} {body}");
    let b_qty = read_b.parse::<i64>()? - 1;
    let (status, body) = call(&app, Some(b_qty), lock_b.fencing_token()).await;
    println!("B writes {b_qty} -> {status} {body}");
    lock_b.release().await?;
    let _ = lock_a.release().await; // LeaseLost: A learns it lost the lock

    let check = locks.lock("sku:4").acquire().await?;
    println!(
        "stock now: {}",
        call(&app, None, check.fencing_token()).await.1
    );
    check.release().await?;
    Ok(())
}
