//! The recommended tonic pattern, `examples/tonic_orders.rs`, served over
//! loopback against a real `redis-server` and called by a real tonic
//! client: what a client gets in each case, told apart by the
//! `distlock-reason` metadata, and under Redis faults.

use std::net::SocketAddr;
use std::time::Duration;

use distlock::LockClient;
use lock_test_support::RedisServer;
use orders_proto::{OrdersClient, PayReply, PayRequest, StatusRequest};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

#[allow(dead_code)] // its `main` and the demo's helpers
#[path = "../examples/tonic_orders.rs"]
mod tonic_orders;

use tonic_orders::payments::Payments;
use tonic_orders::{reason_of, OrderService};

/// The example's server on a free port, with a payment provider that takes
/// `provider` (long enough that a call is surely still running while the
/// test makes its next one).
async fn start(server: &RedisServer, provider: Duration) -> (SocketAddr, LockClient) {
    let client = LockClient::connect(&server.url()).await.unwrap();
    let paid = Payments::redis(&server.url()).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = OrderService {
        client: client.clone(),
        paid,
        provider,
    };
    tokio::spawn(tonic_orders::serve(
        service,
        listener,
        std::future::pending(),
    ));
    (addr, client)
}

async fn connect(addr: SocketAddr) -> OrdersClient<Channel> {
    OrdersClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A `Pay` of `order_id` with `x-order-id: metadata` (none when `None`) and
/// `x-merchant-id: merchant` (none when `None`), in a task of its own.
fn pay(
    orders: &OrdersClient<Channel>,
    order_id: u64,
    metadata: Option<&str>,
    merchant: Option<&'static str>,
) -> JoinHandle<Result<Response<PayReply>, Status>> {
    let mut orders = orders.clone();
    let mut request = Request::new(PayRequest {
        order_id,
        amount_cents: 4200,
    });
    if let Some(value) = metadata {
        request
            .metadata_mut()
            .insert("x-order-id", value.parse().unwrap());
    }
    if let Some(merchant) = merchant {
        request
            .metadata_mut()
            .insert("x-merchant-id", MetadataValue::from_static(merchant));
    }
    tokio::spawn(async move { orders.pay(request).await })
}

/// The code and `distlock-reason` of a refused call.
async fn refusal(call: JoinHandle<Result<Response<PayReply>, Status>>) -> (Code, String) {
    match call.await.unwrap() {
        Ok(reply) => panic!("served: {reply:?}"),
        Err(status) => (status.code(), reason_of(&status).to_owned()),
    }
}

/// Generous: the machine running the tests may be busy.
const LONG_WAIT: Duration = Duration::from_secs(60);

/// Waits until `done` (checked every 10 ms, for at most `LONG_WAIT`).
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LONG_WAIT;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn held(client: &LockClient, name: &str) -> bool {
    client
        .admin()
        .inspect(name)
        .await
        .is_ok_and(|info| info.holder.is_some())
}

async fn is_paid(orders: &OrdersClient<Channel>, order_id: u64) -> bool {
    orders
        .clone()
        .status(StatusRequest { order_id })
        .await
        .unwrap()
        .into_inner()
        .paid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_has_its_code_and_reason() {
    let server = RedisServer::start();
    let (addr, client) = start(&server, Duration::from_secs(2)).await;
    let orders = connect(addr).await;

    // busy: a second Pay of an order whose first Pay runs.
    let first = pay(&orders, 1, Some("1"), None);
    until("the first Pay to hold order:1", async || {
        held(&client, "order:1").await
    })
    .await;
    let busy = pay(&orders, 1, Some("1"), None);
    assert_eq!(refusal(busy).await, (Code::Aborted, "busy".into()));
    let reply = first.await.unwrap().unwrap().into_inner();
    assert_eq!(reply.order_id, 1);
    assert!(is_paid(&orders, 1).await);

    // missing-key: no x-order-id; refused before the handler (order 3 unpaid).
    let missing = pay(&orders, 3, None, None);
    assert_eq!(
        refusal(missing).await,
        (Code::InvalidArgument, "missing-key".into())
    );
    assert!(!is_paid(&orders, 3).await, "the call ran unlocked");
    // key-mismatch: the metadata names another order than the message.
    let mismatch = pay(&orders, 3, Some("4"), None);
    assert_eq!(
        refusal(mismatch).await,
        (Code::InvalidArgument, "key-mismatch".into())
    );
    // invalid-key: refused by the layer's validate_key.
    let invalid = pay(&orders, 3, Some("abc"), None);
    assert_eq!(
        refusal(invalid).await,
        (Code::InvalidArgument, "invalid-key".into())
    );
    assert!(!is_paid(&orders, 3).await);

    // limit: a merchant's third payment while two run.
    let two: Vec<_> = [11, 12]
        .into_iter()
        .map(|id| pay(&orders, id, Some(&id.to_string()), Some("m1")))
        .collect();
    until("two payments of merchant m1", async || {
        client
            .admin()
            .inspect_semaphore("payments:merchant:m1")
            .await
            .is_ok_and(|info| info.in_use == 2)
    })
    .await;
    let third = pay(&orders, 13, Some("13"), Some("m1"));
    assert_eq!(
        refusal(third).await,
        (Code::ResourceExhausted, "limit".into())
    );
    for call in two {
        call.await.unwrap().unwrap();
    }

    // stale-token: the first Pay of order 9 loses its lock (an operator's
    // force-release) while its provider runs; a second Pay takes the lock and
    // reads the payment: the first one's write is refused, and never OK.
    let stale = pay(&orders, 9, Some("9"), None);
    until("the first Pay to hold order:9", async || {
        held(&client, "order:9").await
    })
    .await;
    assert!(client.admin().force_release("order:9").await.unwrap());
    let successor = pay(&orders, 9, Some("9"), None);
    assert_eq!(refusal(stale).await, (Code::Aborted, "stale-token".into()));
    successor.await.unwrap().unwrap();
}

/// Redis paused (as a stalled or failing-over master looks) and killed:
/// `UNAVAILABLE` with `backend-unavailable`, so a client backs off and
/// retries; once Redis is back the same call is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_faults_are_unavailable_with_their_reason() {
    let mut server = RedisServer::start();
    let (addr, _client) = start(&server, Duration::from_millis(1)).await;
    let orders = connect(addr).await;
    pay(&orders, 1, Some("1"), None).await.unwrap().unwrap();

    {
        let _paused = server.paused();
        let call = pay(&orders, 2, Some("2"), None);
        assert_eq!(
            refusal(call).await,
            (Code::Unavailable, "backend-unavailable".into())
        );
    }
    until("Redis to answer again", async || {
        pay(&orders, 2, Some("2"), None).await.unwrap().is_ok()
    })
    .await;

    server.kill();
    let call = pay(&orders, 3, Some("3"), None);
    assert_eq!(
        refusal(call).await,
        (Code::Unavailable, "backend-unavailable".into())
    );
}
