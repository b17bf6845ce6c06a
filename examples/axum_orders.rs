//! An axum order service: `POST /orders/{id}/pay` runs under the lock
//! `order:{id}`, taken by the tower `LockLayer`; the domain function
//! `charge`, annotated with `#[distributed_lock]`, takes the same lock
//! itself and re-enters it.
//!
//! Uses Redis when `REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`),
//! otherwise the in-memory backend, and says which. With Redis, the
//! payments are kept there too, fenced by `distlock::fence::RedisFence`
//! (`payments/mod.rs`); in memory, by the same rule written by hand.
//!
//! ```sh
//! cargo run --example axum_orders             # serves on 127.0.0.1:3000 (ADDR to change)
//! cargo run --example axum_orders -- --demo   # fires concurrent payments at itself, then exits
//! ```
//!
//! While it serves, try two payments of one order at once:
//!
//! ```sh
//! curl -i -X POST localhost:3000/orders/1/pay & curl -i -X POST localhost:3000/orders/1/pay
//! ```
//!
//! One gets `200` with an `x-fencing-token` header, the other
//! `409 Conflict` with `Retry-After: 1`.
//!
//! With the `metrics` feature, `GET /metrics` serves the lock metrics (see
//! `distlock::metrics`) in Prometheus' text format, through
//! `metrics-exporter-prometheus`:
//!
//! ```sh
//! cargo run --example axum_orders --features metrics
//! curl -s localhost:3000/metrics | grep distributed_lock_acquisitions_total
//! ```

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderName, Method, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Router};
use distlock::fence::FenceError;
use distlock::tower::{FencingToken, LockLayer, PathTemplate};
use distlock::{distributed_lock, LockClient, LockError};
use tokio::net::TcpListener;

// ---------------------------------------------------------------------------
// The domain: charging an order, under its lock, against fenced payments.
// ---------------------------------------------------------------------------

pub(crate) mod payments;

// The amount paid per order, fenced with claim-on-read at the store.
use payments::Payments;

#[derive(Debug)]
enum PayError {
    Lock(LockError),
    AlreadyPaid,
    /// The payments store refused or failed: `FenceError::Stale` when a
    /// newer holder of the order's lock has read or written it (this
    /// holder's lease ran out, a pause, or the lock was force-released).
    Fence(FenceError),
}

impl From<LockError> for PayError {
    fn from(error: LockError) -> Self {
        PayError::Lock(error)
    }
}

impl From<FenceError> for PayError {
    fn from(error: FenceError) -> Self {
        PayError::Fence(error)
    }
}

/// Charges order `id` once, under the order's lock: `#[distributed_lock]`
/// takes `order:{id}` itself, so `charge` is safe to call from anywhere;
/// called from the HTTP handler, it re-enters the lock the layer already
/// holds for the request (same call chain, same owner, no round trip).
///
/// Both the read and the write carry the fencing token, so a holder that was
/// paused past its lease can neither write over its successor nor charge an
/// order its successor has read as unpaid.
#[distributed_lock(key = "order:{id}", wait = "5s", client = client)]
async fn charge(
    client: &LockClient,
    payments: &Payments,
    id: u64,
    cents: u64,
) -> Result<u64, PayError> {
    let token = distlock::current()
        .expect("inside the lock")
        .fencing_token();
    if payments.read(id, token).await? > 0 {
        return Err(PayError::AlreadyPaid);
    }
    // The payment provider is slow.
    tokio::time::sleep(Duration::from_millis(300)).await;
    payments.write(id, token, cents).await?;
    Ok(token)
}

// ---------------------------------------------------------------------------
// The HTTP service.
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct App {
    client: LockClient,
    payments: Payments,
}

async fn pay(
    State(app): State<App>,
    Path(id): Path<u64>,
    Extension(lock): Extension<FencingToken>,
) -> (StatusCode, String) {
    match charge(&app.client, &app.payments, id, 4200).await {
        Ok(token) => (
            StatusCode::OK,
            format!("paid order {id} under {} (token {token})\n", lock.key),
        ),
        Err(PayError::AlreadyPaid) => (StatusCode::OK, format!("order {id} was already paid\n")),
        // Not a 200: a newer holder owns the order now; the client may retry.
        Err(PayError::Fence(stale @ FenceError::Stale { .. })) => {
            (StatusCode::CONFLICT, format!("{stale}\n"))
        }
        Err(PayError::Fence(error)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
        Err(PayError::Lock(error)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

async fn show(State(app): State<App>, Path(id): Path<u64>) -> (StatusCode, String) {
    match app.payments.peek(id).await {
        Ok((paid_cents, fence)) => (
            StatusCode::OK,
            format!("order {id}: paid {paid_cents} cents, last claimed by token {fence}\n"),
        ),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
    }
}

pub(crate) fn router(client: LockClient, payments: Payments) -> Router {
    // Only the payment is locked; reading an order is not. Order ids are
    // numbers: a request for `/orders/abc/pay` is refused with 400 before any
    // lock is taken (axum's `Path<u64>` would refuse it too, but only after
    // the layer), and `route_layer` keeps requests to unknown paths unlocked.
    let locks = LockLayer::new(
        client.clone(),
        PathTemplate::new("/orders/{id}/pay", "order:{id}").method(Method::POST),
    )
    .validate_key(|key: &str| {
        key.strip_prefix("order:")
            .is_some_and(|id| id.parse::<u64>().is_ok())
    })
    .fencing_token_header(HeaderName::from_static("x-fencing-token"));
    Router::new()
        .route("/orders/{id}/pay", post(pay))
        .route("/orders/{id}", get(show))
        .route_layer(locks)
        .with_state(App { client, payments })
}

/// Adds `GET /metrics`: what the Prometheus recorder behind `handle` holds
/// (the lock metrics among them), in Prometheus' text format. Not locked:
/// the route comes after the lock layer.
#[cfg(feature = "metrics")]
pub(crate) fn with_metrics(
    router: Router,
    handle: metrics_exporter_prometheus::PrometheusHandle,
) -> Router {
    router.route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                handle.run_upkeep();
                handle.render()
            }
        }),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, payments) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let client = LockClient::connect(&url).await?;
            println!(
                "backend: Redis at {} (locks and fenced payments)",
                client.server()
            );
            (client, Payments::redis(&url).await?)
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis)");
            (LockClient::memory(), Payments::memory())
        }
    };
    let demo = std::env::args().any(|arg| arg == "--demo");
    let addr = if demo {
        "127.0.0.1:0".to_owned()
    } else {
        std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
    };
    let listener = TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    let app = router(client, payments);
    #[cfg(feature = "metrics")]
    let app = with_metrics(
        app,
        metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?,
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    if !demo {
        println!("listening on http://{addr}");
        println!("try: curl -i -X POST http://{addr}/orders/1/pay");
        return Ok(server.await??);
    }

    // Three payments of order 1 at once, and one of order 2.
    let calls: Vec<_> = [
        "/orders/1/pay",
        "/orders/1/pay",
        "/orders/1/pay",
        "/orders/2/pay",
    ]
    .into_iter()
    .map(|path| tokio::spawn(http::post(addr, path)))
    .collect();
    for call in calls {
        let (path, status, retry_after, body) = call.await??;
        println!("POST {path} -> {status} (retry-after: {retry_after}) {body}");
    }
    // Not an order id: refused before any lock is taken.
    let (path, status, _, body) = http::post(addr, "/orders/abc/pay").await?;
    println!("POST {path} -> {status} {body}");
    let (_, _, _, order) = http::get(addr, "/orders/1").await?;
    println!("GET /orders/1 -> {order}");
    #[cfg(feature = "metrics")]
    {
        let (_, _, _, metrics) = http::get(addr, "/metrics").await?;
        println!("GET /metrics (the acquisitions) ->");
        for line in metrics
            .lines()
            .filter(|line| line.starts_with("distributed_lock_acquisitions_total"))
        {
            println!("  {line}");
        }
    }
    server.abort();
    Ok(())
}

/// A minimal HTTP/1 client for the demo (and `tests/metrics_http.rs`).
pub(crate) mod http {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpStream;

    /// The path, the status, the `retry-after` header (`-` if none), the body.
    pub(crate) type Reply = (String, u16, String, String);

    async fn send(addr: SocketAddr, method: &str, path: &str) -> Result<Reply, hyper::Error> {
        let stream = TcpStream::connect(addr)
            .await
            .expect("the demo server is up");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())
            .expect("a valid request");
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        let body = response.into_body().collect().await?.to_bytes();
        let body = String::from_utf8_lossy(&body).trim_end().to_owned();
        Ok((path.to_owned(), status, retry_after, body))
    }

    pub(crate) async fn post(addr: SocketAddr, path: &'static str) -> Result<Reply, hyper::Error> {
        send(addr, "POST", path).await
    }

    pub(crate) async fn get(addr: SocketAddr, path: &'static str) -> Result<Reply, hyper::Error> {
        send(addr, "GET", path).await
    }
}
