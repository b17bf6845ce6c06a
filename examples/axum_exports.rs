//! An axum service with two of the `LockLayer`'s modes:
//!
//! - `POST /tenants/{tenant}/exports` is limited to 2 exports per tenant at
//!   once, across every replica (`concurrency_limit(2)`, a semaphore per
//!   tenant); a third gets `429 Too Many Requests` with `Retry-After: 5`.
//! - `GET /prices/{sku}` and `POST /prices/{sku}` share the read-write lock
//!   `price:{sku}` (`read_write(SafeMethods)`): reads of a price run
//!   together, a new price is written alone, under a fencing token the price
//!   store checks.
//!
//! Uses Redis when `REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`),
//! otherwise the in-memory backend, and says which.
//!
//! ```sh
//! cargo run --example axum_exports             # serves on 127.0.0.1:3000 (ADDR to change)
//! cargo run --example axum_exports -- --demo   # fires concurrent requests at itself, then exits
//! ```
//!
//! While it serves, try three exports of one tenant at once:
//!
//! ```sh
//! for i in 1 2 3; do curl -si -X POST localhost:3000/tenants/acme/exports | head -1 & done; wait
//! ```
//!
//! Two get `200`, the third `429` (while the two run, for 1.5 s). Prices:
//!
//! ```sh
//! curl -i -X POST localhost:3000/prices/7 -d 1299; curl -i localhost:3000/prices/7
//! ```

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderName, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Router};
use distlock::tower::{FencingToken, LockLayer, PathTemplate, SafeMethods};
use distlock::LockClient;
use tokio::net::TcpListener;

mod ledger;

/// Prices in cents by SKU, in a store that refuses a write under a fencing
/// token older than one it has seen (see `ledger/mod.rs`).
type Prices = ledger::Ledger<u64, u64>;

/// Tenant names are what the key is built from: short, lowercase ASCII.
fn valid_tenant(key: &str) -> bool {
    key.strip_prefix("exports:tenant:").is_some_and(|tenant| {
        (1..=32).contains(&tenant.len())
            && tenant
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    })
}

/// A slow export; at most 2 of one tenant run at once, fleet-wide.
async fn export(Path(tenant): Path<String>, Extension(permit): Extension<FencingToken>) -> String {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    format!(
        "exported tenant {tenant} (permit of `{}`, token {})\n",
        permit.key, permit.token
    )
}

/// A read: runs alongside other reads of the SKU, never next to a write.
async fn read_price(State(prices): State<Prices>, Path(sku): Path<u64>) -> String {
    // Reading takes a while (a slow catalogue); concurrent reads overlap.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (cents, _) = prices.peek(&sku);
    format!("sku {sku}: {cents} cents\n")
}

/// A write: runs alone, under the write lock; the store checks its token.
async fn write_price(
    State(prices): State<Prices>,
    Path(sku): Path<u64>,
    Extension(lock): Extension<FencingToken>,
    body: String,
) -> (StatusCode, String) {
    let Ok(cents) = body.trim().parse::<u64>() else {
        return (
            StatusCode::BAD_REQUEST,
            "send the price in cents as the body\n".to_owned(),
        );
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    match prices.write(&sku, lock.token, cents) {
        Ok(()) => (
            StatusCode::OK,
            format!("sku {sku} now costs {cents} cents (token {})\n", lock.token),
        ),
        // A newer writer has been here: this one lost its lock meanwhile.
        Err(stale) => (StatusCode::CONFLICT, format!("{stale}\n")),
    }
}

fn router(client: LockClient) -> Router {
    // One semaphore per tenant: `exports:tenant:acme`, 2 permits. No wait: a
    // third export is answered at once. Exports take seconds, so clients are
    // told to come back in 5 rather than the default 1.
    let exports = LockLayer::new(
        client.clone(),
        PathTemplate::new("/tenants/{tenant}/exports", "exports:tenant:{tenant}"),
    )
    .validate_key(valid_tenant)
    .concurrency_limit(2)
    .limit_retry_after(Some(Duration::from_secs(5)));

    // One read-write lock per SKU: GET reads, POST writes. Waiting up to 5 s
    // lets readers queue behind a writer (and a writer behind readers)
    // instead of being turned away.
    let prices = LockLayer::new(client, PathTemplate::new("/prices/{sku}", "price:{sku}"))
        .validate_key(|key: &str| {
            key.strip_prefix("price:")
                .is_some_and(|sku| sku.parse::<u64>().is_ok())
        })
        .read_write(SafeMethods)
        .wait(Duration::from_secs(5))
        .fencing_token_header(HeaderName::from_static("x-fencing-token"));

    Router::new()
        .merge(
            Router::new()
                .route("/tenants/{tenant}/exports", post(export))
                .route_layer(exports),
        )
        .merge(
            Router::new()
                .route("/prices/{sku}", get(read_price).post(write_price))
                .route_layer(prices)
                .with_state(Prices::default()),
        )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let client = LockClient::connect(&url).await?;
            println!("backend: Redis at {}", client.server());
            client
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis)");
            LockClient::memory()
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
    let server = tokio::spawn(async move { axum::serve(listener, router(client)).await });
    if !demo {
        println!("listening on http://{addr}");
        println!("try: curl -i -X POST http://{addr}/tenants/acme/exports");
        return Ok(server.await??);
    }

    // Four exports of tenant acme at once, and one of globex: two of acme
    // run, two get 429; globex is not held back by acme.
    println!("-- exports, at most 2 per tenant at once");
    let calls: Vec<_> = [
        "/tenants/acme/exports",
        "/tenants/acme/exports",
        "/tenants/acme/exports",
        "/tenants/acme/exports",
        "/tenants/globex/exports",
    ]
    .into_iter()
    .map(|path| tokio::spawn(http::send(addr, "POST", path, "")))
    .collect();
    for call in calls {
        println!("{}", call.await??);
    }

    // A price write, then three reads and a write at once: the write runs
    // alone, the three reads together, so all four are done after about
    // 600 ms (300 for the write, 300 for the reads), not 1200.
    println!("-- prices, reads together, writes alone");
    println!("{}", http::send(addr, "POST", "/prices/7", "1299").await?);
    let start = Instant::now();
    let calls: Vec<_> = [("GET", ""), ("GET", ""), ("GET", ""), ("POST", "1499")]
        .into_iter()
        .map(|(method, body)| tokio::spawn(http::send(addr, method, "/prices/7", body)))
        .collect();
    for call in calls {
        println!("{}", call.await??);
    }
    println!(
        "(all four answered after {} ms)",
        start.elapsed().as_millis()
    );
    server.abort();
    Ok(())
}

/// A minimal HTTP/1 client for the demo.
mod http {
    use std::fmt;
    use std::net::SocketAddr;
    use std::time::Instant;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpStream;

    pub(super) struct Reply {
        line: String,
        status: u16,
        retry_after: Option<String>,
        token: Option<String>,
        body: String,
        millis: u128,
    }

    impl fmt::Display for Reply {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} -> {}", self.line, self.status)?;
            if let Some(after) = &self.retry_after {
                write!(f, " (retry-after: {after})")?;
            }
            if let Some(token) = &self.token {
                write!(f, " (x-fencing-token: {token})")?;
            }
            write!(f, " after {} ms: {}", self.millis, self.body)
        }
    }

    pub(super) async fn send(
        addr: SocketAddr,
        method: &'static str,
        path: &'static str,
        body: &'static str,
    ) -> Result<Reply, hyper::Error> {
        let start = Instant::now();
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
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("a valid request");
        let response = sender.send_request(request).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (retry_after, token) = (header("retry-after"), header("x-fencing-token"));
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Reply {
            line: format!("{method} {path}"),
            status,
            retry_after,
            token,
            body: String::from_utf8_lossy(&body).trim_end().to_owned(),
            millis: start.elapsed().as_millis(),
        })
    }
}
