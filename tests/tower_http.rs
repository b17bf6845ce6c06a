//! The tower `LockLayer` in front of a real axum app, against a real
//! `redis-server`, driven by real HTTP/1 connections on loopback; its modes
//! (read-write, fair, concurrency limit) at the end.

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
use distlock::tower::{
    ConcurrencyLimit, FencingToken, HeaderKey, LockLayer, PathTemplate, SafeMethods,
};
use distlock::LockClient;
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

/// Sets its flag when dropped: tells whether a handler's future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A payment handler that tells `entered` once it runs, then works for
/// `works_for`; `dropped` is set when its future goes (finished or not),
/// `finished` when it ran to its end.
fn working_handler(
    works_for: Duration,
) -> (
    impl Fn() -> futures::future::BoxFuture<'static, &'static str> + Clone + Send + Sync + 'static,
    Arc<Notify>,
    Arc<AtomicBool>,
    Arc<AtomicBool>,
) {
    let entered = Arc::new(Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let handler = {
        let (entered, dropped, finished) = (entered.clone(), dropped.clone(), finished.clone());
        move || -> futures::future::BoxFuture<'static, &'static str> {
            let (entered, dropped, finished) = (entered.clone(), dropped.clone(), finished.clone());
            Box::pin(async move {
                let _flag = DropFlag(dropped);
                entered.notify_one();
                tokio::time::sleep(works_for).await;
                finished.store(true, Ordering::SeqCst);
                "paid"
            })
        }
    };
    (handler, entered, dropped, finished)
}

/// Deletes the lock of order 1 behind its holder's back, as an operator's
/// force-release or a `FLUSHALL` would.
fn delete_order_lock(server: &RedisServer) {
    let deleted: i64 = redis::cmd("DEL")
        .arg("lock:{order:1}")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(deleted, 1, "the request held the lock");
}

/// `abort_on_lost(true)`: the lock is deleted while the handler runs; the
/// watchdog's next renewal (every 300 ms with a 900 ms lease) finds it gone,
/// the handler's future is dropped there, and the client gets the layer's
/// 503 for `LeaseLost`, long before the handler would have answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lock_aborts_the_handler_with_503_when_asked() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .unwrap();
    let (handler, entered, dropped, finished) = working_handler(Duration::from_secs(5));
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client).abort_on_lost(true));
    let addr = serve(app).await;

    let request = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    delete_order_lock(&server);
    let deleted_at = Instant::now();
    let reply = request.await.unwrap();
    let took = deleted_at.elapsed();

    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(
        reply.body.contains("lock `order:1` could not be kept"),
        "{reply:?}"
    );
    assert_eq!(reply.headers["retry-after"], "1", "{reply:?}");
    assert!(
        !reply.headers.contains_key(TOKEN_HEADER),
        "no fencing token on a lost request: {reply:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "answered {took:?} after the deletion, not at the watchdog's next renewal"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler's future was dropped"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler did not run to its end"
    );
    // Nothing is left held: the next request runs (and, unhurried, answers 200).
    let (quick, _, _, _) = working_handler(Duration::ZERO);
    let app = Router::new()
        .route("/orders/{id}/pay", post(quick))
        .layer(pay_layer(&client).abort_on_lost(true));
    let next = send(serve(app).await, "POST", "/orders/1/pay").await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
}

/// The default (`abort_on_lost(false)`): the lock is deleted while the
/// handler runs, the handler runs to its end and its own `200` goes out,
/// and the layer logs a warning naming the lock. On a current-thread
/// runtime, so that the test's log collector sees the server's events.
#[tokio::test(flavor = "current_thread")]
async fn lost_lock_passes_the_handler_response_through_by_default() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let _log =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let server = RedisServer::start();
    let client = LockClient::builder()
        .lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .unwrap();
    let (handler, entered, dropped, finished) = working_handler(Duration::from_millis(1500));
    let app = Router::new()
        .route("/orders/{id}/pay", post(handler))
        .layer(pay_layer(&client));
    let addr = serve(app).await;

    let request = tokio::spawn(send(addr, "POST", "/orders/1/pay"));
    timeout(Duration::from_secs(10), entered.notified())
        .await
        .unwrap();
    delete_order_lock(&server);
    let reply = request.await.unwrap();

    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "paid");
    assert!(
        finished.load(Ordering::SeqCst),
        "the handler ran to its end"
    );
    assert!(dropped.load(Ordering::SeqCst));
    let all = format!("{:#?}", events.0.lock().unwrap());
    assert!(
        events.find(
            tracing::Level::WARN,
            "distlock_tower::release",
            &["a request finished after its lock was lost", "order:1"]
        ),
        "{all}"
    );
}

/// Collects the log's events: level, target and fields.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push((*meta.level(), meta.target().to_owned(), fields.0));
    }
}

impl Events {
    fn find(&self, level: tracing::Level, target: &str, needles: &[&str]) -> bool {
        self.0.lock().unwrap().iter().any(|(l, t, fields)| {
            *l == level && t == target && needles.iter().all(|n| fields.contains(n))
        })
    }
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
        let current = distlock::current().expect("the handler runs under the lock");
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
    #[distlock::distributed_lock(key = "order:{id}", wait = "10s", client = client)]
    async fn charge(client: &LockClient, id: u64) -> Result<(), distlock::LockError> {
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
            Err(err) => (distlock::tower::http_status(&err), err.to_string()),
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

// ---------------------------------------------------------------------------
// The layer's modes: read-write, fair, concurrency limit.
// ---------------------------------------------------------------------------

/// Sends a request with extra headers and reads the whole response (30 s at most).
async fn send_with(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let exchange = async {
        let response = open_with(addr, method, path, headers).await;
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

/// Polls `condition` every 10 ms until it holds; panics with `what` after 15 s.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within 15 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the handlers behind a read-write layer saw: readers and writers
/// inside at once, and every time a reader met a writer or two writers met.
struct ReadWriteProbe {
    readers: AtomicUsize,
    writers: AtomicUsize,
    violations: AtomicUsize,
    /// Requests sent with `x-meet` wait here for two others.
    meet: Barrier,
    /// Requests sent with `x-hold` wait here for a permit from the test.
    hold: tokio::sync::Semaphore,
}

impl ReadWriteProbe {
    fn new() -> Self {
        ReadWriteProbe {
            readers: AtomicUsize::new(0),
            writers: AtomicUsize::new(0),
            violations: AtomicUsize::new(0),
            meet: Barrier::new(3),
            hold: tokio::sync::Semaphore::new(0),
        }
    }

    fn check(&self) {
        let (readers, writers) = (
            self.readers.load(Ordering::SeqCst),
            self.writers.load(Ordering::SeqCst),
        );
        if writers > 1 || (writers == 1 && readers > 0) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn handle(
        &self,
        write: bool,
        headers: &http::HeaderMap,
    ) -> Result<&'static str, StatusCode> {
        let counter = if write { &self.writers } else { &self.readers };
        counter.fetch_add(1, Ordering::SeqCst);
        self.check();
        let mut outcome = Ok(if write { "written" } else { "read" });
        if headers.contains_key("x-meet")
            && timeout(Duration::from_secs(20), self.meet.wait())
                .await
                .is_err()
        {
            // The other readers never ran alongside this one.
            outcome = Err(StatusCode::INTERNAL_SERVER_ERROR);
        }
        if headers.contains_key("x-hold") {
            self.hold.acquire().await.unwrap().forget();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.check();
        counter.fetch_sub(1, Ordering::SeqCst);
        outcome
    }
}

/// `GET /prices/{sku}` reads and `POST /prices/{sku}` writes, behind a
/// read-write layer on `price:{sku}` with `SafeMethods`.
async fn serve_prices(client: &LockClient, probe: &Arc<ReadWriteProbe>) -> SocketAddr {
    let read = {
        let probe = probe.clone();
        move |headers: http::HeaderMap| async move { probe.handle(false, &headers).await }
    };
    let write = {
        let probe = probe.clone();
        move |headers: http::HeaderMap| async move { probe.handle(true, &headers).await }
    };
    let locks = LockLayer::new(
        client.clone(),
        PathTemplate::new("/prices/{sku}", "price:{sku}"),
    )
    .read_write(SafeMethods)
    .wait(Duration::from_secs(20))
    .fencing_token_header(HeaderName::from_static(TOKEN_HEADER));
    serve(
        Router::new()
            .route("/prices/{sku}", get(read).post(write))
            .layer(locks),
    )
    .await
}

/// Read-write mode: three GETs of one SKU are inside their handlers at once
/// (a barrier of three that only opens if they are); a POST waits for a
/// GET that holds the read lock and runs once it is done, and a GET waits
/// for a POST in the same way; a mixed burst of reads and writes never has
/// a writer next to anyone. With the plain lock the barrier never opens;
/// without the write lock the POST would run next to the GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_run_together_and_a_write_runs_alone() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let probe = Arc::new(ReadWriteProbe::new());
    let addr = serve_prices(&client, &probe).await;

    // Readers share.
    let meets: Vec<_> = (0..3)
        .map(|_| tokio::spawn(send_with(addr, "GET", "/prices/7", &[("x-meet", "1")])))
        .collect();
    for meet in meets {
        let reply = meet.await.unwrap();
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "read"),
            "{reply:?}"
        );
    }

    // A writer waits for a reader.
    let reader = tokio::spawn(send_with(addr, "GET", "/prices/7", &[("x-hold", "1")]));
    eventually("the holding reader entered", || {
        probe.readers.load(Ordering::SeqCst) == 1
    })
    .await;
    let writer = tokio::spawn(send(addr, "POST", "/prices/7"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!writer.is_finished(), "the write ran next to a read");
    assert_eq!(
        probe.writers.load(Ordering::SeqCst),
        0,
        "the write ran next to a read"
    );
    probe.hold.add_permits(1);
    assert_eq!(reader.await.unwrap().status, StatusCode::OK);
    let written = writer.await.unwrap();
    assert_eq!(
        (written.status, written.body.as_str()),
        (StatusCode::OK, "written")
    );
    let write_token = written.token();

    // A reader waits for a writer, and reads under a later token.
    let writer = tokio::spawn(send_with(addr, "POST", "/prices/7", &[("x-hold", "1")]));
    eventually("the holding writer entered", || {
        probe.writers.load(Ordering::SeqCst) == 1
    })
    .await;
    let reader = tokio::spawn(send(addr, "GET", "/prices/7"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!reader.is_finished(), "the read ran next to a write");
    assert_eq!(
        probe.readers.load(Ordering::SeqCst),
        0,
        "the read ran next to a write"
    );
    probe.hold.add_permits(1);
    let written = writer.await.unwrap();
    assert_eq!(written.status, StatusCode::OK);
    assert!(written.token() > write_token);
    let read = reader.await.unwrap();
    assert_eq!(read.status, StatusCode::OK);
    assert!(read.token() > written.token());

    // A burst of both: everyone is served, no writer ever had company.
    let burst: Vec<_> = (0..12)
        .map(|i| {
            tokio::spawn(send(
                addr,
                if i % 3 == 0 { "POST" } else { "GET" },
                "/prices/7",
            ))
        })
        .collect();
    for request in burst {
        assert_eq!(request.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(
        probe.violations.load(Ordering::SeqCst),
        0,
        "a writer had company"
    );
    // Another SKU is another lock: a write there does not wait for this one.
    let reader = tokio::spawn(send_with(addr, "GET", "/prices/7", &[("x-hold", "1")]));
    eventually("the holding reader entered", || {
        probe.readers.load(Ordering::SeqCst) == 1
    })
    .await;
    let elsewhere = send(addr, "POST", "/prices/8").await;
    assert_eq!(elsewhere.status, StatusCode::OK);
    probe.hold.add_permits(1);
    assert_eq!(reader.await.unwrap().status, StatusCode::OK);
}

/// Per-tenant export handlers: tenant `acme`'s wait for the test's permits
/// (`hold`), other tenants' answer at once. Each tenant's overlap is counted.
struct Exports {
    acme: Overlap,
    globex: Overlap,
    hold: tokio::sync::Semaphore,
}

impl Exports {
    fn new() -> Arc<Self> {
        Arc::new(Exports {
            acme: Overlap::default(),
            globex: Overlap::default(),
            hold: tokio::sync::Semaphore::new(0),
        })
    }

    fn inside(&self, tenant: &str) -> usize {
        let overlap = if tenant == "acme" {
            &self.acme
        } else {
            &self.globex
        };
        overlap.inside.load(Ordering::SeqCst)
    }

    async fn export(&self, headers: http::HeaderMap, blocking: bool, pause: Duration) -> String {
        let tenant = headers["x-tenant"].to_str().unwrap().to_owned();
        let overlap = if tenant == "acme" {
            &self.acme
        } else {
            &self.globex
        };
        let _inside = overlap.enter();
        if blocking && tenant == "acme" {
            self.hold.acquire().await.unwrap().forget();
        }
        tokio::time::sleep(pause).await;
        format!("exported {tenant}")
    }
}

fn exports_layer(
    client: &LockClient,
    max: u32,
) -> LockLayer<HeaderKey, distlock::tower::Http, ConcurrencyLimit> {
    LockLayer::new(
        client.clone(),
        HeaderKey::new("x-tenant").prefix("exports:tenant:"),
    )
    .concurrency_limit(max)
}

async fn serve_exports(
    exports: &Arc<Exports>,
    layer: LockLayer<HeaderKey, distlock::tower::Http, ConcurrencyLimit>,
    blocking: bool,
    pause: Duration,
) -> SocketAddr {
    let exports = exports.clone();
    let handler = move |headers: http::HeaderMap| async move {
        exports.export(headers, blocking, pause).await
    };
    serve(Router::new().route("/exports", post(handler)).layer(layer)).await
}

/// `concurrency_limit(2)`, no wait: of 6 concurrent exports of one tenant,
/// 2 run (and stay in their handlers) while the 4 others are answered
/// `429 Too Many Requests` with `Retry-After: 1`, naming the semaphore and
/// the limit; another tenant's export runs meanwhile; once the two are done
/// the tenant gets in again. With the plain lock only one would run (and
/// the others get 409), without a limit all six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_answers_429_over_the_limit() {
    const REQUESTS: usize = 6;
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let exports = Exports::new();
    let addr = serve_exports(&exports, exports_layer(&client, 2), true, Duration::ZERO).await;

    const ACME: &[(&str, &str)] = &[("x-tenant", "acme")];
    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| tokio::spawn(send_with(addr, "POST", "/exports", ACME)))
        .collect();
    eventually("two acme exports running", || exports.inside("acme") == 2).await;
    eventually("four acme exports answered", || {
        requests.iter().filter(|r| r.is_finished()).count() == REQUESTS - 2
    })
    .await;
    let other = send_with(addr, "POST", "/exports", &[("x-tenant", "globex")]).await;
    assert_eq!(
        (other.status, other.body.as_str()),
        (StatusCode::OK, "exported globex")
    );
    let late = send_with(addr, "POST", "/exports", ACME).await;
    assert_eq!(late.status, StatusCode::TOO_MANY_REQUESTS, "{late:?}");
    assert_eq!(exports.inside("acme"), 2);

    exports.hold.add_permits(2);
    let mut replies = Vec::new();
    for request in requests {
        replies.push(request.await.unwrap());
    }
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 2, "{replies:#?}");
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        assert_eq!(reply.headers["retry-after"], "1", "{reply:?}");
        assert_eq!(reply.headers["content-type"], "text/plain; charset=utf-8");
        assert!(
            reply.body.contains("exports:tenant:acme"),
            "names the semaphore: {reply:?}"
        );
        assert!(
            reply.body.contains("at most 2"),
            "names the limit: {reply:?}"
        );
    }
    assert_eq!(exports.acme.max(), 2);
    // The permits came back with the answers.
    exports.hold.add_permits(2);
    let again = send_with(addr, "POST", "/exports", ACME).await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
}

/// `concurrency_limit(2)` with a wait: 6 concurrent exports of one tenant
/// all succeed, never more than 2 at once, and 2 did run together. With the
/// plain lock at most one would run at once, without a limit all six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_with_a_wait_serves_everyone_in_turn() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let exports = Exports::new();
    let layer = exports_layer(&client, 2).wait(Duration::from_secs(20));
    let addr = serve_exports(&exports, layer, false, Duration::from_millis(200)).await;

    let requests: Vec<_> = (0..6)
        .map(|_| tokio::spawn(send_with(addr, "POST", "/exports", &[("x-tenant", "acme")])))
        .collect();
    for request in requests {
        let reply = request.await.unwrap();
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "exported acme")
        );
    }
    assert_eq!(
        exports.acme.max(),
        2,
        "at most 2 at once, and 2 did run together"
    );
}

/// The over-the-limit answer can be a 503 with its own Retry-After, body and
/// content type; a busy answer's settings stay apart from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_answer_is_configurable() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let exports = Exports::new();
    let layer = exports_layer(&client, 1)
        .limit_status(StatusCode::SERVICE_UNAVAILABLE)
        .limit_retry_after(Some(Duration::from_millis(2500)))
        .limit_body(r#"{"error":"too many exports"}"#)
        .limit_content_type(http::HeaderValue::from_static("application/json"));
    let addr = serve_exports(&exports, layer, true, Duration::ZERO).await;

    const ACME: &[(&str, &str)] = &[("x-tenant", "acme")];
    let running = tokio::spawn(send_with(addr, "POST", "/exports", ACME));
    eventually("one acme export running", || exports.inside("acme") == 1).await;
    let limited = send_with(addr, "POST", "/exports", ACME).await;
    assert_eq!(limited.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(limited.headers["retry-after"], "3");
    assert_eq!(limited.headers["content-type"], "application/json");
    assert_eq!(limited.body, r#"{"error":"too many exports"}"#);
    exports.hold.add_permits(1);
    assert_eq!(running.await.unwrap().status, StatusCode::OK);
}

/// Fair mode: while one payout of an account runs, five more arrive one
/// after another (each sent once the previous one is in the fair lock's
/// queue, as Redis shows); they run in that order. With the plain lock
/// nothing ever queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_serves_queued_requests_in_arrival_order() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = {
        let (order, hold) = (order.clone(), hold.clone());
        move |headers: http::HeaderMap| async move {
            let seq: usize = headers["x-seq"].to_str().unwrap().parse().unwrap();
            order.lock().unwrap().push(seq);
            if seq == 0 {
                hold.acquire().await.unwrap().forget();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            format!("payout {seq}")
        }
    };
    let locks = LockLayer::new(
        client.clone(),
        PathTemplate::new("/accounts/{id}/payouts", "payouts:{id}"),
    )
    .fair()
    .wait(Duration::from_secs(30));
    let addr = serve(
        Router::new()
            .route("/accounts/{id}/payouts", post(handler))
            .layer(locks),
    )
    .await;

    let first = tokio::spawn(send_with(
        addr,
        "POST",
        "/accounts/1/payouts",
        &[("x-seq", "0")],
    ));
    eventually("the first payout running", || {
        order.lock().unwrap().len() == 1
    })
    .await;
    let mut conn = server.conn();
    let mut queued = Vec::new();
    for seq in 1..=5usize {
        let header = seq.to_string();
        queued.push(tokio::spawn(async move {
            send_with(addr, "POST", "/accounts/1/payouts", &[("x-seq", &header)]).await
        }));
        eventually(&format!("payout {seq} queued"), || {
            let waiting: usize = redis::cmd("ZCARD")
                .arg("lock:{payouts:1}:fair:queue")
                .query(&mut conn)
                .unwrap();
            waiting == seq
        })
        .await;
    }
    hold.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    for (i, request) in queued.into_iter().enumerate() {
        let reply = request.await.unwrap();
        assert_eq!(
            (reply.status, reply.body),
            (StatusCode::OK, format!("payout {}", i + 1))
        );
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
}

/// On Redlock the lock family is refused: a fair, read-write or limited
/// route answers 500 naming the lock (`LockError::Unsupported`) and its
/// handler does not run, while a plain-locked route works. The backend is
/// not known when the layer is built, so the refusal comes per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_the_family_modes_with_500() {
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let client = LockClient::redlock(servers.iter().map(RedisServer::url))
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            "done"
        }
    };
    let key = |prefix: &'static str| {
        move |req: &Request| Some(format!("{prefix}:{}", req.uri().path().rsplit('/').next()?))
    };
    let app = Router::new()
        .merge(
            Router::new()
                .route("/fair/{id}", post(handler.clone()))
                .route_layer(LockLayer::new(client.clone(), key("fair")).fair()),
        )
        .merge(
            Router::new()
                .route("/rw/{id}", get(handler.clone()))
                .route_layer(LockLayer::new(client.clone(), key("rw")).read_write(SafeMethods)),
        )
        .merge(
            Router::new()
                .route("/limit/{id}", post(handler.clone()))
                .route_layer(LockLayer::new(client.clone(), key("limit")).concurrency_limit(3)),
        )
        .merge(
            Router::new()
                .route("/plain/{id}", post(handler))
                .route_layer(LockLayer::new(client.clone(), key("plain"))),
        );
    let addr = serve(app).await;

    for (method, path, name) in [
        ("POST", "/fair/1", "fair:1"),
        ("GET", "/rw/1", "rw:1"),
        ("POST", "/limit/1", "limit:1"),
    ] {
        let reply = send(addr, method, path).await;
        assert_eq!(
            reply.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{path}: {reply:?}"
        );
        assert!(reply.body.contains(name), "{reply:?}");
        assert!(!reply.headers.contains_key("retry-after"), "{reply:?}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a refused request ran");
    let plain = send(addr, "POST", "/plain/1").await;
    assert_eq!(
        (plain.status, plain.body.as_str()),
        (StatusCode::OK, "done")
    );
}
