//! The tower `LeaderLayer` in front of real axum apps and real tonic
//! servers, two "processes" (two clients, each with its own server on
//! loopback) electing a leader on a real `redis-server`: the follower
//! redirects or answers 503 / `UNAVAILABLE` naming the leader, the leader
//! serves with its term, the other serves after a resignation, and a
//! leader whose lease ran out on its clock stops serving at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use distlock::tower::{LeaderLayer, LeaderSeat};
use distlock::{LockClient, Term, Wait};
use http::{HeaderName, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use lock_test_support::RedisServer;
use orders_proto::{
    Orders, OrdersClient, OrdersServer, PayReply, PayRequest, StatusReply, StatusRequest,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

const TERM_HEADER: &str = "x-leader-term";
const LONG: Duration = Duration::from_secs(30);

/// A response read in full.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }
}

/// Sends one request on a new HTTP/1 connection and reads the whole answer.
async fn send(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let (parts, body) = sender.send_request(request).await.unwrap().into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    };
    timeout(LONG, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within 30 s"))
}

/// Waits (polling, 30 s at most) until `done` is true.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !done() {
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One replica of the admin API: its address, its seat, and how many times
/// its leader-only handler ran.
struct Replica {
    addr: SocketAddr,
    seat: LeaderSeat,
    served: Arc<AtomicUsize>,
}

/// Serves `POST /admin/compact` (leader only: answers its term) on a free
/// port, with `configure` deciding the follower's answer.
async fn replica(client: &LockClient, configure: fn(LeaderLayer) -> LeaderLayer) -> Replica {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seat = LeaderSeat::new(
        client
            .election("admin-api")
            .metadata(format!("http://{addr}")),
    );
    let served = Arc::new(AtomicUsize::new(0));
    let layer =
        configure(LeaderLayer::new(seat.clone()).term_header(HeaderName::from_static(TERM_HEADER)));
    let counter = served.clone();
    let router = Router::new()
        .route(
            "/admin/compact",
            post(move |Extension(term): Extension<Term>| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(term.role(), "admin-api");
                    term.token().to_string()
                }
            }),
        )
        .route_layer(layer);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Replica { addr, seat, served }
}

/// A follower redirects to the leader's advertised address with the path
/// and query; the leader serves with its term (extension and header); once
/// the leader resigns, the other replica's run loop wins and serves with a
/// higher term, and the old leader refuses at once (it no longer holds the
/// role's lock), then redirects to the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_redirects_and_the_leader_serves_until_it_resigns() {
    let server = RedisServer::start();
    let client_a = LockClient::connect(&server.url()).await.unwrap();
    let client_b = LockClient::connect(&server.url()).await.unwrap();
    let a = replica(&client_a, LeaderLayer::redirect).await;
    let b = replica(&client_b, LeaderLayer::redirect).await;

    let leadership = a.seat.campaign(Wait::Once).await.unwrap();
    let first = leadership.term();
    let runner = tokio::spawn({
        let seat = b.seat.clone();
        async move { seat.run(|_term| std::future::pending()).await }
    });
    until("B observes A's term", || {
        b.seat
            .leader()
            .is_some_and(|leader| leader.term == first && leader.metadata.is_some())
    })
    .await;

    let reply = send(b.addr, "POST", "/admin/compact?dry=1").await;
    assert_eq!(reply.status, StatusCode::TEMPORARY_REDIRECT, "{reply:?}");
    assert_eq!(
        reply.header("location"),
        Some(format!("http://{}/admin/compact?dry=1", a.addr).as_str())
    );
    assert_eq!(
        reply.header("x-leader"),
        Some(format!("http://{}", a.addr).as_str())
    );
    assert!(reply.header(TERM_HEADER).is_none(), "{reply:?}");
    assert_eq!(
        b.served.load(Ordering::SeqCst),
        0,
        "the follower's handler ran"
    );

    let reply = send(a.addr, "POST", "/admin/compact").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, first.to_string(), "the handler's Term");
    assert_eq!(reply.header(TERM_HEADER), Some(first.to_string().as_str()));

    leadership.resign().await.unwrap();
    // At once, before any observer has caught up: A does not serve.
    let reply = send(a.addr, "POST", "/admin/compact").await;
    assert_ne!(
        reply.status,
        StatusCode::OK,
        "a resigned leader served: {reply:?}"
    );
    assert_eq!(a.served.load(Ordering::SeqCst), 1);

    until("B's run loop leads", || b.seat.term().is_some()).await;
    let second = b.seat.term().unwrap().token();
    assert!(second > first, "terms rise: {first} then {second}");
    let reply = send(b.addr, "POST", "/admin/compact").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, second.to_string());
    assert_eq!(reply.header(TERM_HEADER), Some(second.to_string().as_str()));

    until("A observes B's term", || {
        a.seat
            .leader()
            .is_some_and(|leader| leader.term == second && leader.metadata.is_some())
    })
    .await;
    let reply = send(a.addr, "POST", "/admin/compact").await;
    assert_eq!(reply.status, StatusCode::TEMPORARY_REDIRECT, "{reply:?}");
    assert_eq!(
        reply.header("location"),
        Some(format!("http://{}/admin/compact", b.addr).as_str())
    );
    assert_eq!(a.served.load(Ordering::SeqCst), 1);

    runner.abort();
}

/// In the default mode a follower answers 503 with the configured
/// `Retry-After` (rounded up to whole seconds), naming the leader when one
/// is known and naming none when nobody leads; a redirecting follower
/// answers 503 too when nobody leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_answers_503_with_retry_after() {
    let server = RedisServer::start();
    let client_a = LockClient::connect(&server.url()).await.unwrap();
    let client_b = LockClient::connect(&server.url()).await.unwrap();
    let a = replica(&client_a, |layer| layer.redirect()).await;
    let b = replica(&client_b, |layer| {
        layer.retry_after(Some(Duration::from_millis(2500)))
    })
    .await;

    // Nobody leads.
    for addr in [a.addr, b.addr] {
        let reply = send(addr, "POST", "/admin/compact").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert!(reply.header("x-leader").is_none(), "{reply:?}");
        assert!(reply.body.contains("no leader is known"), "{reply:?}");
    }
    assert_eq!(
        send(b.addr, "POST", "/admin/compact")
            .await
            .header("retry-after"),
        Some("3")
    );

    let leadership = a.seat.campaign(Wait::Once).await.unwrap();
    until("B observes A", || {
        b.seat
            .leader()
            .is_some_and(|leader| leader.term == leadership.term() && leader.metadata.is_some())
    })
    .await;
    let reply = send(b.addr, "POST", "/admin/compact").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert_eq!(reply.header("retry-after"), Some("3"));
    assert_eq!(
        reply.header("x-leader"),
        Some(format!("http://{}", a.addr).as_str())
    );
    assert!(
        reply.body.contains(&format!("term {}", leadership.term())),
        "{reply:?}"
    );
    assert_eq!(b.served.load(Ordering::SeqCst), 0);
    leadership.resign().await.unwrap();
}

/// A leader cut off from Redis (the server killed) keeps its `Leadership`
/// value, but once its lease has run out on its own clock the layer lets no
/// request through: it does not wait for the store or an observer to say
/// so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_ran_out_stops_serving() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .lease(Duration::from_secs(2))
        .connect(&server.url())
        .await
        .unwrap();
    let a = replica(&client, LeaderLayer::unavailable).await;
    let leadership = a.seat.campaign(Wait::Once).await.unwrap();
    let reply = send(a.addr, "POST", "/admin/compact").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    server.kill();
    until("the lease runs out on the local clock", || {
        !leadership.is_leader()
    })
    .await;
    let reply = send(a.addr, "POST", "/admin/compact").await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a leader past its lease served: {reply:?}"
    );
    assert_eq!(a.served.load(Ordering::SeqCst), 1);
    assert!(a.seat.term().is_none());
    drop(leadership);
}

/// The order service: `Pay` answers the leader's term as its token.
struct Leading(Arc<AtomicUsize>);

#[tonic::async_trait]
impl Orders for Leading {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<PayReply>, Status> {
        let term = request
            .extensions()
            .get::<Term>()
            .cloned()
            .ok_or_else(|| Status::internal("no term"))?;
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(PayReply {
            order_id: request.into_inner().order_id,
            fencing_token: term.token(),
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        Ok(Response::new(StatusReply {
            order_id: request.into_inner().order_id,
            paid: false,
        }))
    }
}

/// One gRPC replica: its address, its seat and its served count.
async fn grpc_replica(client: &LockClient) -> Replica {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seat = LeaderSeat::new(
        client
            .election("orders-grpc")
            .metadata(format!("http://{addr}")),
    );
    let layer = LeaderLayer::new(seat.clone())
        .grpc()
        .term_header(HeaderName::from_static(TERM_HEADER));
    let served = Arc::new(AtomicUsize::new(0));
    let service = OrdersServer::new(Leading(served.clone()));
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    Replica { addr, seat, served }
}

async fn pay(addr: SocketAddr) -> Result<Response<PayReply>, Status> {
    let mut client: OrdersClient<Channel> = OrdersClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut request = Request::new(PayRequest {
        order_id: 7,
        amount_cents: 100,
    });
    request.set_timeout(LONG);
    client.pay(request).await
}

/// With a real tonic client: the follower answers `UNAVAILABLE` with the
/// leader's address in `x-leader` metadata, the leader serves with its term
/// (extension and metadata), and after the leader resigns the other replica
/// serves with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_follower_is_unavailable_naming_the_leader() {
    let server = RedisServer::start();
    let client_a = LockClient::connect(&server.url()).await.unwrap();
    let client_b = LockClient::connect(&server.url()).await.unwrap();
    let a = grpc_replica(&client_a).await;
    let b = grpc_replica(&client_b).await;

    let leadership = a.seat.campaign(Wait::Once).await.unwrap();
    let first = leadership.term();
    let runner = tokio::spawn({
        let seat = b.seat.clone();
        async move { seat.run(|_term| std::future::pending()).await }
    });
    until("B observes A", || {
        b.seat
            .leader()
            .is_some_and(|leader| leader.term == first && leader.metadata.is_some())
    })
    .await;

    let status = pay(b.addr).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.metadata().get("x-leader").unwrap().to_str().unwrap(),
        format!("http://{}", a.addr)
    );
    assert!(status.message().contains("orders-grpc"), "{status:?}");
    assert_eq!(b.served.load(Ordering::SeqCst), 0);

    let reply = pay(a.addr).await.unwrap();
    assert_eq!(reply.get_ref().fencing_token, first);
    assert_eq!(
        reply.metadata().get(TERM_HEADER).unwrap().to_str().unwrap(),
        first.to_string()
    );

    leadership.resign().await.unwrap();
    until("B's run loop leads", || b.seat.term().is_some()).await;
    let reply = pay(b.addr).await.unwrap();
    assert!(reply.get_ref().fencing_token > first, "{reply:?}");
    let status = pay(a.addr).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(a.served.load(Ordering::SeqCst), 1);
    runner.abort();
}
