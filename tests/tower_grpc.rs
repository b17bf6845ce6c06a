//! The tower `LockLayer` in a real tonic server (`Server::builder().layer`),
//! called by a real tonic client over loopback, against a real `redis-server`;
//! the concurrency-limit mode and the family modes on Redlock at the end.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::tower::mode::LockMode;
use distlock::tower::{FencingToken, Grpc, GrpcKey, LockLayer};
use distlock::LockClient;
use http::HeaderName;
use lock_test_support::RedisServer;
use orders_proto::{
    Orders, OrdersClient, OrdersServer, PayReply, PayRequest, StatusReply, StatusRequest,
    PAY_METHOD,
};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::timeout;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

/// The order service under test: `Pay` records overlaps, and the first
/// `block_first` calls wait for a permit of `release`.
struct OrderService {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    calls: AtomicUsize,
    first_entered: Notify,
    release: Semaphore,
    block_first: usize,
}

impl Default for OrderService {
    fn default() -> Self {
        OrderService {
            inside: AtomicUsize::new(0),
            max_inside: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            first_entered: Notify::new(),
            release: Semaphore::new(0),
            block_first: 0,
        }
    }
}

/// The tonic service: a handle on the shared [`OrderService`].
struct OrderHandle(Arc<OrderService>);

#[tonic::async_trait]
impl Orders for OrderHandle {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<PayReply>, Status> {
        let token = request
            .extensions()
            .get::<FencingToken>()
            .cloned()
            .ok_or_else(|| Status::internal("no fencing token"))?;
        let order_id = request.into_inner().order_id;
        if token.key.starts_with("order:") {
            assert_eq!(token.key, format!("order:{order_id}"));
        }
        let this = &self.0;
        let now = this.inside.fetch_add(1, Ordering::SeqCst) + 1;
        this.max_inside.fetch_max(now, Ordering::SeqCst);
        if this.calls.fetch_add(1, Ordering::SeqCst) < this.block_first {
            this.first_entered.notify_one();
            this.release.acquire().await.unwrap().forget();
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        this.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(Response::new(PayReply {
            order_id,
            fencing_token: token.token,
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        Ok(Response::new(StatusReply {
            order_id: request.into_inner().order_id,
            paid: self.0.calls.load(Ordering::SeqCst) > 0,
        }))
    }
}

fn pay_layer(client: &LockClient) -> LockLayer<GrpcKey, Grpc> {
    LockLayer::new(
        client.clone(),
        GrpcKey::new(PAY_METHOD, "x-order-id").prefix("order:"),
    )
    .grpc()
    .fencing_token_header(HeaderName::from_static("x-fencing-token"))
}

/// Serves `service` behind `layer` (in any mode) on a free loopback port.
async fn serve<M>(service: Arc<OrderService>, layer: LockLayer<GrpcKey, Grpc, M>) -> SocketAddr
where
    M: LockMode<http::Request<tonic::body::Body>> + Clone + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(OrdersServer::new(OrderHandle(service)))
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    addr
}

async fn connect(addr: SocketAddr) -> OrdersClient<Channel> {
    OrdersClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Pays `order_id`, sending it in the metadata the layer locks on.
async fn pay(
    client: &mut OrdersClient<Channel>,
    order_id: u64,
) -> Result<Response<PayReply>, Status> {
    let mut request = Request::new(PayRequest {
        order_id,
        amount_cents: 100,
    });
    request
        .metadata_mut()
        .insert("x-order-id", order_id.to_string().parse().unwrap());
    request.set_timeout(Duration::from_secs(30));
    client.pay(request).await
}

/// While one `Pay` of order 1 runs, another gets `ABORTED` naming the lock;
/// a `Pay` of another order and an unlocked `Status` go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_call_is_aborted() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let service = Arc::new(OrderService {
        block_first: 1,
        ..OrderService::default()
    });
    let addr = serve(service.clone(), pay_layer(&client)).await;
    let mut grpc = connect(addr).await;

    let first = tokio::spawn({
        let mut grpc = grpc.clone();
        async move { pay(&mut grpc, 1).await }
    });
    timeout(Duration::from_secs(10), service.first_entered.notified())
        .await
        .unwrap();

    let busy = pay(&mut grpc, 1).await.unwrap_err();
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
    assert!(busy.message().contains("order:1"), "{busy:?}");

    let other = pay(&mut grpc, 2).await.unwrap();
    assert_eq!(other.get_ref().order_id, 2);
    let status = grpc.status(StatusRequest { order_id: 1 }).await.unwrap();
    assert_eq!(status.get_ref().order_id, 1);

    service.release.add_permits(1);
    let first = first.await.unwrap().unwrap();
    let header: u64 = first
        .metadata()
        .get("x-fencing-token")
        .expect("the token in the response metadata")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        header,
        first.get_ref().fencing_token,
        "metadata = extension"
    );
    // Released before the reply went out.
    assert!(pay(&mut grpc, 1).await.is_ok());
}

/// With a wait, concurrent calls on one order all succeed, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_calls_run_one_at_a_time() {
    const CALLS: usize = 12;
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let service = Arc::new(OrderService::default());
    let addr = serve(
        service.clone(),
        pay_layer(&client).wait(Duration::from_secs(10)),
    )
    .await;
    let grpc = connect(addr).await;

    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let mut grpc = grpc.clone();
            tokio::spawn(async move { pay(&mut grpc, 3).await })
        })
        .collect();
    let mut tokens = Vec::new();
    for call in calls {
        tokens.push(call.await.unwrap().unwrap().get_ref().fencing_token);
    }
    assert_eq!(
        service.max_inside.load(Ordering::SeqCst),
        1,
        "calls overlapped"
    );
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), CALLS);
}

/// Redis is down: `UNAVAILABLE`, naming the lock; unlocked calls still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_unavailable() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let service = Arc::new(OrderService::default());
    let addr = serve(service, pay_layer(&client)).await;
    let mut grpc = connect(addr).await;
    assert!(pay(&mut grpc, 1).await.is_ok());

    server.kill();
    let down = pay(&mut grpc, 1).await.unwrap_err();
    assert_eq!(down.code(), Code::Unavailable, "{down:?}");
    assert!(down.message().contains("order:1"), "{down:?}");
    assert!(grpc.status(StatusRequest { order_id: 1 }).await.is_ok());
}

/// Pays `order_id` for `merchant`, sent in the `x-merchant` metadata.
async fn pay_for(
    client: &mut OrdersClient<Channel>,
    merchant: &str,
    order_id: u64,
) -> Result<Response<PayReply>, Status> {
    let mut request = Request::new(PayRequest {
        order_id,
        amount_cents: 100,
    });
    request
        .metadata_mut()
        .insert("x-merchant", merchant.parse().unwrap());
    request.set_timeout(Duration::from_secs(30));
    client.pay(request).await
}

/// Polls `condition` every 10 ms until it holds; panics with `what` after 15 s.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `concurrency_limit(2)` per merchant: while two payments of merchant `m1`
/// run, a third gets `RESOURCE_EXHAUSTED` (not `ABORTED`, a busy lock's code)
/// naming the semaphore and the limit; merchant `m2` pays meanwhile; once
/// the two are done `m1` pays again. With the plain lock the second payment
/// would already be refused, and with `ABORTED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_reached_is_resource_exhausted() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let service = Arc::new(OrderService {
        block_first: 2,
        ..OrderService::default()
    });
    let layer = LockLayer::new(
        client.clone(),
        GrpcKey::new(PAY_METHOD, "x-merchant").prefix("payments:merchant:"),
    )
    .grpc()
    .concurrency_limit(2);
    let addr = serve(service.clone(), layer).await;
    let mut grpc = connect(addr).await;

    let running: Vec<_> = (1..=2)
        .map(|order_id| {
            let mut grpc = grpc.clone();
            tokio::spawn(async move { pay_for(&mut grpc, "m1", order_id).await })
        })
        .collect();
    eventually("two m1 payments running", || {
        service.inside.load(Ordering::SeqCst) == 2
    })
    .await;

    let limited = pay_for(&mut grpc, "m1", 3).await.unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert!(
        limited.message().contains("payments:merchant:m1"),
        "{limited:?}"
    );
    assert!(limited.message().contains("at most 2"), "{limited:?}");
    let other = pay_for(&mut grpc, "m2", 4).await.unwrap();
    assert_eq!(other.get_ref().order_id, 4);

    service.release.add_permits(2);
    for call in running {
        assert!(call.await.unwrap().is_ok());
    }
    assert!(pay_for(&mut grpc, "m1", 5).await.is_ok());
    assert_eq!(
        service.calls.load(Ordering::SeqCst),
        4,
        "the limited call ran"
    );
}

/// On Redlock the family modes are refused per call with `INTERNAL`
/// (`LockError::Unsupported`), and `Pay` does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn family_mode_on_redlock_is_internal() {
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let client = LockClient::redlock(servers.iter().map(RedisServer::url))
        .await
        .unwrap();
    let service = Arc::new(OrderService::default());
    let addr = serve(service.clone(), pay_layer(&client).concurrency_limit(2)).await;
    let mut grpc = connect(addr).await;
    let refused = pay(&mut grpc, 1).await.unwrap_err();
    assert_eq!(refused.code(), Code::Internal, "{refused:?}");
    assert!(refused.message().contains("order:1"), "{refused:?}");

    let fair = Arc::new(OrderService::default());
    let addr = serve(fair.clone(), pay_layer(&client).fair()).await;
    let refused = pay(&mut connect(addr).await, 1).await.unwrap_err();
    assert_eq!(refused.code(), Code::Internal, "{refused:?}");
    assert_eq!(
        service.calls.load(Ordering::SeqCst) + fair.calls.load(Ordering::SeqCst),
        0
    );
}
