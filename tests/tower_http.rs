//! The tower `LockLayer` in front of a real axum app, against a real
//! `redis-server`, driven by real HTTP/1 connections on loopback.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use distributed_lock::tower::{FencingToken, LockLayer, PathTemplate};
use distributed_lock::LockClient;
use http::{HeaderName, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use lock_test_support::RedisServer;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Barrier, Notify};
use tokio::time::{timeout, Instant};

const TOKEN_HEADER: &str = "x-fencing-token";

/// Serves `router` on a free loopback port until the test's runtime ends.
async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A response read in full.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn token(&self) -> u64 {
        self.headers[TOKEN_HEADER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

/// Opens an HTTP/1 connection to `addr` and sends one request on it.
async fn open(addr: SocketAddr, method: &str, path: &str) -> http::Response<hyper::body::Incoming> {
    open_with(addr, method, path, &[]).await
}

/// As [`open`], with extra request headers.
async fn open_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> http::Response<hyper::body::Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    sender.send_request(request).await.unwrap()
}

/// Sends one request and reads the whole response (30 s at most).
async fn send(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let exchange = async {
        let response = open(addr, method, path).await;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    };
    timeout(Duration::from_secs(30), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within 30 s"))
}

/// Counts the handlers inside a critical section and remembers the most at once.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    max: AtomicUsize,
}

struct Inside<'a>(&'a Overlap);

impl Overlap {
    fn enter(&self) -> Inside<'_> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        Inside(self)
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

fn pay_layer(client: &LockClient) -> LockLayer<PathTemplate> {
    LockLayer::new(
        client.clone(),
        PathTemplate::new("/orders/{id}/pay", "order:{id}").method(http::Method::POST),
    )
    .fencing_token_header(HeaderName::from_static(TOKEN_HEADER))
}

async fn redis_client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.unwrap()
}

/// 20 concurrent payments of one order with `wait = 0`: the first holds the
/// lock until the 19 others have been turned away with 409 + Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_order_answers_409_with_retry_after() {
    const REQUESTS: usize = 20;
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let overlap = Arc::new(Overlap::default());
    let conflicts = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (overlap, conflicts) = (overlap.clone(), conflicts.clone());
        move || async move {
            let _inside = overlap.enter();
            // Hold the lock until every other request has been answered.
            let deadline = Instant::now() + Duration::from_secs(30);
            while conflicts.load(Ordering::SeqCst) < REQUESTS - 1 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            "paid"
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let conflicts = conflicts.clone();
            tokio::spawn(async move {
                let reply = send(addr, "POST", "/orders/1/pay").await;
                if reply.status == StatusCode::CONFLICT {
                    conflicts.fetch_add(1, Ordering::SeqCst);
                }
                reply
            })
        })
        .collect();
    let mut replies = Vec::new();
    for request in requests {
        replies.push(request.await.unwrap());
    }
    let paid: Vec<_> = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .collect();
    assert_eq!(paid.len(), 1, "exactly one payment runs: {replies:#?}");
    assert_eq!(paid[0].body, "paid");
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_eq!(reply.status, StatusCode::CONFLICT, "{reply:?}");
        assert_eq!(reply.headers["retry-after"], "1", "{reply:?}");
        assert!(reply.body.contains("order:1"), "names the lock: {reply:?}");
        assert!(!reply.headers.contains_key(TOKEN_HEADER));
    }
    assert_eq!(overlap.max(), 1);
}

/// 20 concurrent payments of one order with `wait = 10s`: all succeed, one
/// at a time, each under a higher fencing token than the one before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_requests_all_succeed_one_at_a_time() {
    const REQUESTS: usize = 20;
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let overlap = Arc::new(Overlap::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (overlap, seen) = (overlap.clone(), seen.clone());
        move |Extension(token): Extension<FencingToken>| async move {
            let _inside = overlap.enter();
            assert_eq!(token.key, "order:1");
            seen.lock().unwrap().push(token.token);
            tokio::time::sleep(Duration::from_millis(20)).await;
            token.token.to_string()
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client).wait(Duration::from_secs(10)));
    let addr = serve(app).await;

    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| tokio::spawn(send(addr, "POST", "/orders/1/pay")))
        .collect();
    for request in requests {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.body, reply.token().to_string(), "header = extension");
    }
    assert_eq!(overlap.max(), 1, "two payments of one order overlapped");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), REQUESTS);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "tokens increase from one holder to the next: {seen:?}"
    );
}

/// Payments of two different orders are inside their handlers at the same
/// time (a barrier of two that only opens if both are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_orders_run_in_parallel() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let barrier = Arc::new(Barrier::new(2));
    let handler = move |Path(id): Path<u64>| async move {
        timeout(Duration::from_secs(20), barrier.wait())
            .await
            .expect("the other order's payment never ran alongside");
        format!("paid {id}")
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let one = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    let two = tokio::spawn(send(addr, "POST", "/orders/2/pay"));
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    assert_eq!((one.status, one.body.as_str()), (StatusCode::OK, "paid 1"));
    assert_eq!((two.status, two.body.as_str()), (StatusCode::OK, "paid 2"));
}

/// A handler that runs for five leases keeps its lock: the watchdog renews
/// it, so others are turned away the whole time, and the key never expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_slower_than_the_lease_keeps_its_lock() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .lease(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let (handler, entered, calls) = slow_first_call(Duration::from_millis(1500));
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let slow = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    let mut conn = server.conn();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if slow.is_finished() {
            break;
        }
        let pttl: i64 = redis::cmd("PTTL")
            .arg("lock:{order:1}")
            .query(&mut conn)
            .unwrap();
        assert!(pttl > 0, "the lock expired under a running handler");
        let busy = send(addr, "POST", "/orders/1/pay").await;
        assert_eq!(busy.status, StatusCode::CONFLICT, "{busy:?}");
    }
    let slow = slow.await.unwrap();
    assert_eq!(slow.status, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no one else ran meanwhile");
    // Released before the answer went out: the next request gets it at once.
    let next = send(addr, "POST", "/orders/1/pay").await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
    assert!(next.token() > slow.token());
}

/// A client that hangs up while its handler runs: axum drops the handler's
/// future, and the lock is free again long before its 30 s lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connection_releases_the_lock() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let entered = Arc::new(Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    struct OnDrop(Arc<AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let handler = {
        let (entered, dropped, calls) = (entered.clone(), dropped.clone(), calls.clone());
        move || async move {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                let _on_drop = OnDrop(dropped);
                entered.notify_one();
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            "paid"
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /orders/1/pay HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    assert_eq!(
        send(addr, "POST", "/orders/1/pay").await.status,
        StatusCode::CONFLICT
    );
    let hung_up = Instant::now();
    drop(stream);

    loop {
        let reply = send(addr, "POST", "/orders/1/pay").await;
        if reply.status == StatusCode::OK {
            break;
        }
        assert_eq!(reply.status, StatusCode::CONFLICT);
        assert!(
            hung_up.elapsed() < Duration::from_secs(5),
            "the lock of a dropped request was not released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler's future was dropped"
    );
}

/// Requests the extractor gives no key run without a lock: other routes,
/// other methods, and several of them at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_key_pass_through() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let barrier = Arc::new(Barrier::new(2));
    let health = move |token: Option<Extension<FencingToken>>| async move {
        assert!(token.is_none(), "an unlocked request has no token");
        timeout(Duration::from_secs(20), barrier.wait())
            .await
            .expect("two unlocked requests should run at once");
        "ok"
    };
    let app = Router::new()
        .route("/health", get(health))
        .route(
            "/orders/{id}/pay",
            post(|| async { "paid" }).get(|| async { "status" }),
        )
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let held = client.lock("order:1").acquire().await.unwrap();
    let (a, b) = tokio::join!(send(addr, "GET", "/health"), send(addr, "GET", "/health"));
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    let status = send(addr, "GET", "/orders/1/pay").await;
    assert_eq!(
        (status.status, status.body.as_str()),
        (StatusCode::OK, "status")
    );
    assert!(!status.headers.contains_key(TOKEN_HEADER));
    let pay = send(addr, "POST", "/orders/1/pay").await;
    assert_eq!(pay.status, StatusCode::CONFLICT);
    held.release().await.unwrap();
    assert_eq!(
        send(addr, "POST", "/orders/1/pay").await.status,
        StatusCode::OK
    );
}

/// Redis is gone: 503 naming the lock, with `Retry-After`, and the service
/// still answers (it never fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_failure_answers_503() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let app = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .route("/health", get(|| async { "ok" }))
        .layer(pay_layer(&client));
    let addr = serve(app).await;
    assert_eq!(
        send(addr, "POST", "/orders/1/pay").await.status,
        StatusCode::OK
    );

    server.kill();
    let reply = send(addr, "POST", "/orders/1/pay").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(reply.body.contains("order:1"), "{reply:?}");
    assert!(
        !reply.body.contains("127.0.0.1"),
        "no server address: {reply:?}"
    );
    assert_eq!(reply.headers["retry-after"], "1", "{reply:?}");
    assert_eq!(
        reply.headers["content-type"], "text/plain; charset=utf-8",
        "{reply:?}"
    );
    assert_eq!(send(addr, "GET", "/health").await.status, StatusCode::OK);
}

/// The user's report: an inventory service under load while Redis is
/// paused. Requests that wait for a lock when the backend stops answering
/// get 503 (the backend did not answer), not 409 (held by another request):
/// before the fix, waiters held back behind another waiter's attempt, which
/// never came back, timed out as "busy". A lock that is really held still
/// answers 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_backend_answers_503_not_409() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let (entered, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (entered, gate, calls) = (entered.clone(), gate.clone(), calls.clone());
        move || {
            let (entered, gate, calls) = (entered.clone(), gate.clone(), calls.clone());
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    entered.notify_one();
                    gate.notified().await;
                }
                "reserved"
            }
        }
    };
    let layer = LockLayer::new(
        client,
        PathTemplate::new("/items/{sku}/reserve", "item:{sku}"),
    )
    .wait(Duration::from_secs(1));
    let app = Router::new()
        .route("/items/{sku}/reserve", post(handler))
        .layer(layer);
    let addr = serve(app).await;
    let reserve = move || tokio::spawn(send(addr, "POST", "/items/A1/reserve"));

    let holder = reserve();
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    // Contention: the lock stays held for the whole wait.
    let busy = send(addr, "POST", "/items/A1/reserve").await;
    assert_eq!(busy.status, StatusCode::CONFLICT, "{busy:?}");
    assert_eq!(busy.headers["retry-after"], "1");
    assert!(busy.body.contains("held by another request"), "{busy:?}");

    // Waiters queue behind the holder, then Redis stops answering and the
    // holder finishes (its release gets no answer either).
    let mut requests: Vec<_> = (0..4).map(|_| reserve()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let paused = server.paused();
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
    requests.extend((0..2).map(|_| reserve()));
    for request in requests {
        let reply = request.await.unwrap();
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "an outage answered as contention: {reply:?}"
        );
        assert_eq!(reply.headers["retry-after"], "1", "{reply:?}");
        assert!(reply.body.contains("item:A1"), "{reply:?}");
    }
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no one else ran");
    paused.resume();

    // Back to normal once Redis answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = send(addr, "POST", "/items/A1/reserve").await;
        if reply.status == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The 503 answer's status, body, content type and `Retry-After` can be
/// changed (a JSON API answers JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_answer_is_configurable() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let json = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .layer(
            pay_layer(&client)
                .unavailable_status(StatusCode::BAD_GATEWAY)
                .unavailable_body(r#"{"error":"locks unavailable"}"#)
                .unavailable_content_type(http::HeaderValue::from_static("application/json"))
                .unavailable_retry_after(Some(Duration::from_millis(4500))),
        );
    let json = serve(json).await;
    let bare = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .layer(pay_layer(&client).unavailable_retry_after(None));
    let bare = serve(bare).await;

    server.kill();
    let reply = send(json, "POST", "/orders/1/pay").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{reply:?}");
    assert_eq!(reply.body, r#"{"error":"locks unavailable"}"#);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(
        reply.headers["retry-after"], "5",
        "whole seconds, rounded up"
    );
    let reply = send(bare, "POST", "/orders/1/pay").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(!reply.headers.contains_key("retry-after"), "{reply:?}");
}

/// The lock client shuts down while one payment runs and another waits for
/// its order: the waiting one is answered 503 at once (not after its 10 s
/// wait), a new one too, and the running one finishes within the grace
/// period, re-entering its lock, and is answered 200; its lock is released
/// as usual.
///
/// Old code has no shutdown: the waiting request would wait for the lock
/// and then pay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_answers_503_while_running_requests_finish() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let entered = Arc::new(Notify::new());
    let proceed = Arc::new(Notify::new());
    let handler = {
        let (domain, entered, proceed) = (client.clone(), entered.clone(), proceed.clone());
        move |Path(id): Path<u64>| async move {
            entered.notify_one();
            proceed.notified().await;
            // A domain function re-enters the request's lock during the
            // grace period.
            let guard = domain
                .lock(format!("order:{id}"))
                .acquire()
                .await
                .expect("re-entered while shutting down");
            guard.release().await.unwrap();
            "paid"
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client).wait(Duration::from_secs(10)));
    let addr = serve(app).await;
    let running = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    timeout(Duration::from_secs(5), entered.notified())
        .await
        .unwrap();
    let waiting = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    tokio::time::sleep(Duration::from_millis(200)).await; // it waits for order:1
    let began = Instant::now();
    let shutdown = tokio::spawn(client.shutdown(Duration::from_secs(10)));
    let reply = waiting.await.unwrap();
    assert_within(began.elapsed(), Duration::from_secs(2));
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(
        reply.body.contains("order:1") && reply.body.contains("shutting down"),
        "{reply:?}"
    );
    let reply = send(addr, "POST", "/orders/2/pay").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    proceed.notify_one();
    let reply = running.await.unwrap();
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "paid")
    );
    let report = timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("the shutdown ends when the request has finished")
        .unwrap()
        .unwrap();
    assert_eq!(report.released_by_holders, 1, "{report:?}");
    assert_eq!(report.released_at_deadline, 0, "{report:?}");
    let other = redis_client(&server).await;
    assert!(other.lock("order:1").try_acquire().await.unwrap().is_some());
}

fn assert_within(elapsed: Duration, max: Duration) {
    assert!(elapsed <= max, "took {elapsed:?}, expected at most {max:?}");
}

/// The busy answer's status, body, content type and Retry-After are
/// configurable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_answer_is_configurable() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let app = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .layer(
            pay_layer(&client)
                .busy_status(StatusCode::LOCKED)
                .busy_body(r#"{"error":"order busy"}"#)
                .busy_content_type(http::HeaderValue::from_static("application/json"))
                .retry_after(None),
        );
    let custom = serve(app).await;
    let app = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .layer(pay_layer(&client).retry_after(Some(Duration::from_millis(2500))));
    let rounded = serve(app).await;

    let _held = client.lock("order:1").acquire().await.unwrap();
    let reply = send(custom, "POST", "/orders/1/pay").await;
    assert_eq!(reply.status, StatusCode::LOCKED);
    assert_eq!(reply.body, r#"{"error":"order busy"}"#);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert!(!reply.headers.contains_key("retry-after"));
    let reply = send(rounded, "POST", "/orders/1/pay").await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        reply.headers["retry-after"], "3",
        "whole seconds, rounded up"
    );
}

/// The handler runs in the lock's scope: a domain function that takes the
/// same lock re-enters it (same token) instead of waiting for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_reenters_the_request_lock() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let domain = client.clone();
    let handler = move |Path(id): Path<u64>, Extension(token): Extension<FencingToken>| async move {
        // The request's lock is the current one in the handler.
        let current = distributed_lock::current().expect("the handler runs under the lock");
        assert_eq!(current.key(), format!("order:{id}"));
        assert_eq!(current.fencing_token(), token.token);
        let guard = domain
            .lock(format!("order:{id}"))
            .acquire()
            .await
            .expect("re-entered, not busy");
        assert_eq!(guard.fencing_token(), token.token);
        assert_eq!(guard.hold_count(), 2);
        guard.release().await.unwrap();
        "paid"
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;
    let reply = send(addr, "POST", "/orders/5/pay").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "paid")
    );
    // The outer hold was released with the response.
    assert!(client
        .lock("order:5")
        .try_acquire()
        .await
        .unwrap()
        .is_some());
}

/// The layer and a `#[distributed_lock]` domain function given different
/// clients: the function's acquisition with a 10 s wait fails at once with
/// `HeldByOtherClient` (mapped to 500, naming both clients) instead of
/// waiting on the request's own lock. Old code: a 409 after the whole wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_with_another_client_than_the_layer_fails_at_once() {
    #[distributed_lock::distributed_lock(key = "order:{id}", wait = "10s", client = client)]
    async fn charge(client: &LockClient, id: u64) -> Result<(), distributed_lock::LockError> {
        let _ = id;
        Ok(())
    }
    let server = RedisServer::start();
    let layer_client = redis_client(&server).await;
    let domain = redis_client(&server).await;
    let ids = format!("{} {}", layer_client.id(), domain.id());
    let handler = move |Path(id): Path<u64>| async move {
        match charge(&domain, id).await {
            Ok(()) => (StatusCode::OK, "paid".to_owned()),
            Err(err) => (distributed_lock::tower::http_status(&err), err.to_string()),
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&layer_client));
    let addr = serve(app).await;
    let started = Instant::now();
    let reply = send(addr, "POST", "/orders/6/pay").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?} on its own lock",
        started.elapsed()
    );
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{reply:?}");
    for id in ids.split(' ') {
        assert!(reply.body.contains(id), "{reply:?} does not name {id}");
    }
}

/// A streamed body: with `hold_until_body_end` the lock is held until the
/// last chunk has gone out (and free once the client has read it), without
/// it the lock is free as soon as the headers are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_held_until_body_end_when_asked() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let app = |hold: bool, gate: Arc<Notify>| {
        let stream = move || {
            let gate = gate.clone();
            async move {
                let chunks = futures::stream::unfold(0, move |step| {
                    let gate = gate.clone();
                    async move {
                        match step {
                            0 => Some((Ok::<_, Infallible>(Bytes::from("first,")), 1)),
                            1 => {
                                gate.notified().await;
                                Some((Ok(Bytes::from("last")), 2))
                            }
                            _ => None,
                        }
                    }
                });
                Body::from_stream(chunks)
            }
        };
        Router::new()
            .route("/stream", get(stream))
            .route("/quick", get(|| async { "quick" }))
            .layer(
                LockLayer::new(client.clone(), |_: &Request| Some("report:1".to_owned()))
                    .hold_until_body_end(hold),
            )
    };

    for hold in [true, false] {
        let gate = Arc::new(Notify::new());
        let addr = serve(app(hold, gate.clone())).await;
        let response = open(addr, "GET", "/stream").await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first,");

        let quick = send(addr, "GET", "/quick").await.status;
        let expected = if hold {
            StatusCode::CONFLICT
        } else {
            StatusCode::OK
        };
        assert_eq!(quick, expected, "while the body streams (hold = {hold})");

        gate.notify_one();
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, "last");
        let quick = send(addr, "GET", "/quick").await;
        assert_eq!(
            quick.status,
            StatusCode::OK,
            "after the body (hold = {hold})"
        );
    }
}

/// Two app processes behind one Redis: payments of one order sent to both
/// never overlap, as an INCR/DECR counter kept in Redis shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_app_processes_exclude_each_other() {
    const PER_PROCESS: usize = 15;
    let server = RedisServer::start();
    let exe = std::env::current_exe().unwrap();
    let mut workers: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "http_app_process", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env("LOCK_APP_REDIS_URL", server.url())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut addrs = Vec::new();
    for worker in &mut workers {
        let stdout = worker.stdout.take().unwrap();
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        // Reads the port, then keeps draining the worker's stdout so that its
        // last lines never hit a closed pipe.
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut port_tx = Some(port_tx);
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest prints `test http_app_process ... ` before it, on the same line.
                if let Some((_, port)) = line.split_once("listening on port ") {
                    if let Some(tx) = port_tx.take() {
                        let _ = tx.send(port.trim().parse::<u16>().unwrap());
                    }
                }
            }
        });
        let port = timeout(Duration::from_secs(60), port_rx)
            .await
            .expect("a worker process did not listen within 60 s")
            .expect("a worker process exited before listening");
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
    }

    let requests: Vec<_> = (0..PER_PROCESS)
        .flat_map(|_| addrs.clone())
        .map(|addr| tokio::spawn(send(addr, "POST", "/orders/7/pay")))
        .collect();
    let mut tokens = Vec::new();
    for request in requests {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        tokens.push(reply.token());
    }
    for mut worker in workers {
        drop(worker.stdin.take()); // the worker exits when its stdin closes
        let exited = tokio::task::spawn_blocking(move || worker.wait().unwrap());
        let status = timeout(Duration::from_secs(30), exited)
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "a worker process failed: {status}");
    }

    let mut conn = server.conn();
    let runs: usize = redis::cmd("GET").arg("app:runs").query(&mut conn).unwrap();
    let overlaps: Option<usize> = redis::cmd("GET")
        .arg("app:overlaps")
        .query(&mut conn)
        .unwrap();
    assert_eq!(runs, 2 * PER_PROCESS);
    assert_eq!(
        overlaps, None,
        "two processes were inside the critical section at once"
    );
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        2 * PER_PROCESS,
        "every holder had its own token"
    );
}

/// One app process of `two_app_processes_exclude_each_other`: serves the
/// order app on a free port, prints it, and exits when stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by two_app_processes_exclude_each_other"]
async fn http_app_process() {
    let Ok(url) = std::env::var("LOCK_APP_REDIS_URL") else {
        eprintln!("http_app_process only runs as a child of two_app_processes_exclude_each_other");
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let redis = redis::Client::open(url.as_str()).unwrap();
    let conn = redis.get_multiplexed_async_connection().await.unwrap();
    let handler = move || {
        let mut conn = conn.clone();
        async move {
            let inside: i64 = redis::cmd("INCR")
                .arg("app:inside")
                .query_async(&mut conn)
                .await
                .unwrap();
            if inside != 1 {
                let _: i64 = redis::cmd("INCR")
                    .arg("app:overlaps")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _: i64 = redis::cmd("DECR")
                .arg("app:inside")
                .query_async(&mut conn)
                .await
                .unwrap();
            let _: i64 = redis::cmd("INCR")
                .arg("app:runs")
                .query_async(&mut conn)
                .await
                .unwrap();
            "paid"
        }
    };
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client).wait(Duration::from_secs(30)));
    let addr = serve(app).await;
    println!("listening on port {}", addr.port());
    // Serve until the parent closes stdin (or two minutes, as a backstop).
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    });
    if timeout(Duration::from_secs(120), stdin_closed)
        .await
        .is_err()
    {
        // Do not wait for the blocked stdin reader at runtime shutdown.
        std::process::exit(0);
    }
}

/// With a fixed `lease`, the lock is not renewed: a handler that outlives
/// it no longer excludes the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_is_not_renewed() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let (handler, entered, _calls) = slow_first_call(Duration::from_millis(1500));
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client).lease(Duration::from_millis(300)));
    let addr = serve(app).await;

    let slow = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let next = send(addr, "POST", "/orders/1/pay").await;
    assert_eq!(
        next.status,
        StatusCode::OK,
        "the expired lease was taken over"
    );
    // The slow handler's release finds the lock gone; its answer still goes out.
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
}

/// A key the lock refuses (here: empty) answers 400, naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_lock_name_answers_400() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let by_header = |req: &Request| {
        req.headers()
            .get("x-batch")
            .map(|v| v.to_str().unwrap_or_default().to_owned())
    };
    let app = Router::new()
        .route("/batch", post(|| async { "done" }))
        .layer(LockLayer::new(client, by_header));
    let addr = serve(app).await;
    let response = open_with(addr, "POST", "/batch", &[("x-batch", "")]).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("invalid lock name"),
        "{body:?}"
    );
}

/// Lock names from client input: `validate_key` refuses a made-up SKU with
/// 400 before anything is locked: no command reaches Redis, no key is
/// created, the handler does not run. A valid SKU is locked as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_key_answers_400_without_touching_redis() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        move |Path(sku): Path<u64>| async move {
            calls.fetch_add(1, Ordering::SeqCst);
            format!("reserved {sku}")
        }
    };
    let layer = LockLayer::new(
        client,
        PathTemplate::new("/items/{sku}/reserve", "item:{sku}"),
    )
    .validate_key(|key: &str| {
        key.strip_prefix("item:")
            .is_some_and(|sku| sku.parse::<u64>().is_ok())
    });
    let app = Router::new()
        .route("/items/{sku}/reserve", post(handler))
        .layer(layer);
    let addr = serve(app).await;

    server.reset_command_stats();
    let reply = send(addr, "POST", "/items/not-a-sku/reserve").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
    assert!(reply.body.contains("item:not-a-sku"), "{reply:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler ran");
    assert_eq!(server.command_calls("evalsha"), 0, "a lock was asked for");
    assert_eq!(server.command_calls("eval"), 0, "a lock was asked for");
    assert_eq!(server.dbsize(), 0, "lock state was created");

    let reply = send(addr, "POST", "/items/42/reserve").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "reserved 42")
    );
    assert!(
        server.command_calls("evalsha") >= 1,
        "the valid SKU was locked"
    );
}

/// What README says of `Router::layer` and `Router::route_layer`: with
/// `layer` a request for a path that has no route still takes a lock (here
/// it is busy: 409 instead of 404), with `route_layer` it does not; routed
/// requests are locked either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_layer_locks_only_routed_requests() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let by_path = |req: &Request| Some(format!("path:{}", req.uri().path()));
    let routes = || Router::new().route("/items/{sku}", get(|| async { "item" }));
    let layered = serve(routes().layer(LockLayer::new(client.clone(), by_path))).await;
    let route_layered = serve(routes().route_layer(LockLayer::new(client.clone(), by_path))).await;

    let _nope = client.lock("path:/nope").acquire().await.unwrap();
    let _item = client.lock("path:/items/1").acquire().await.unwrap();
    assert_eq!(
        send(layered, "GET", "/nope").await.status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        send(route_layered, "GET", "/nope").await.status,
        StatusCode::NOT_FOUND
    );
    for addr in [layered, route_layered] {
        assert_eq!(
            send(addr, "GET", "/items/1").await.status,
            StatusCode::CONFLICT
        );
    }
}

/// A request the extractor gives no lock has no `FencingToken`: a handler
/// that may run unlocked takes `Option<Extension<FencingToken>>` (`None`
/// then, `Some` when locked); a bare `Extension<FencingToken>` makes axum
/// answer 500 there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocked_requests_have_no_fencing_token() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let maybe = |token: Option<Extension<FencingToken>>| async move {
        match token {
            Some(Extension(token)) => format!("locked {}", token.key),
            None => "unlocked".to_owned(),
        }
    };
    let strict = |Extension(token): Extension<FencingToken>| async move { token.key };
    let app = Router::new()
        .route("/orders/{id}/pay", post(maybe).get(maybe))
        .route("/strict", get(strict))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let locked = send(addr, "POST", "/orders/1/pay").await;
    assert_eq!(locked.body, "locked order:1", "{locked:?}");
    let unlocked = send(addr, "GET", "/orders/1/pay").await;
    assert_eq!(
        (unlocked.status, unlocked.body.as_str()),
        (StatusCode::OK, "unlocked")
    );
    let strict = send(addr, "GET", "/strict").await;
    assert_eq!(
        strict.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{strict:?}"
    );
}

/// A handler whose first call tells `entered` and then takes `slow`; later
/// calls answer at once. `calls` counts the calls.
#[allow(clippy::type_complexity)]
fn slow_first_call(
    slow: Duration,
) -> (
    impl Fn() -> futures::future::BoxFuture<'static, &'static str> + Clone + Send + Sync + 'static,
    Arc<Notify>,
    Arc<AtomicUsize>,
) {
    let entered = Arc::new(Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (entered, calls) = (entered.clone(), calls.clone());
        move || -> futures::future::BoxFuture<'static, &'static str> {
            let (entered, calls) = (entered.clone(), calls.clone());
            Box::pin(async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    entered.notify_one();
                    tokio::time::sleep(slow).await;
                }
                "paid"
            })
        }
    };
    (handler, entered, calls)
}
