//! distlock-fence's `FenceLayer` in a real tonic server
//! (`Server::builder().layer`), called by a real tonic client over loopback,
//! with its fences in a real `redis-server`: a stale holder's call is
//! answered `ABORTED` before the handler runs, a call without a token
//! `INVALID_ARGUMENT`, and the handler gets the accepted token.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use distlock_fence::{FenceLayer, Fenced, RedisFence, KEY_HEADER, TOKEN_HEADER};
use lock_test_support::RedisServer;
use orders_proto::{
    Orders, OrdersClient, OrdersServer, PayReply, PayRequest, StatusReply, StatusRequest,
};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

/// Counts the calls that reached the handler; answers with the accepted token.
struct Payments(Arc<AtomicUsize>);

#[tonic::async_trait]
impl Orders for Payments {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<PayReply>, Status> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let fenced = request
            .extensions()
            .get::<Fenced>()
            .cloned()
            .ok_or_else(|| Status::internal("no Fenced extension"))?;
        let order_id = request.into_inner().order_id;
        assert_eq!(fenced.key, format!("order:{order_id}"));
        Ok(Response::new(PayReply {
            order_id,
            fencing_token: fenced.token,
        }))
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        Err(Status::unimplemented("status"))
    }
}

async fn serve(layer: FenceLayer, calls: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(OrdersServer::new(Payments(calls)))
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    addr
}

/// Pays order 1 as the holder of `token` (none: no token metadata).
async fn pay(client: &mut OrdersClient<Channel>, token: Option<u64>) -> Result<u64, Status> {
    let mut request = Request::new(PayRequest {
        order_id: 1,
        amount_cents: 100,
    });
    request
        .metadata_mut()
        .insert(KEY_HEADER, "order:1".parse().unwrap());
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert(TOKEN_HEADER, token.to_string().parse().unwrap());
    }
    Ok(client.pay(request).await?.into_inner().fencing_token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_aborted_before_the_handler() {
    let server = RedisServer::start();
    let conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let addr = serve(
        FenceLayer::new(RedisFence::new(conn.clone())).grpc(),
        calls.clone(),
    )
    .await;
    let mut client = OrdersClient::connect(format!("http://{addr}"))
        .await
        .unwrap();

    assert_eq!(pay(&mut client, Some(5)).await.unwrap(), 5);
    assert_eq!(pay(&mut client, Some(6)).await.unwrap(), 6);
    let stale = pay(&mut client, Some(5)).await.unwrap_err();
    assert_eq!(stale.code(), Code::Aborted, "{stale:?}");
    assert!(
        stale
            .message()
            .contains("stale fencing token 5 for order:1"),
        "{stale:?}"
    );
    // Told apart from a busy lock (also ABORTED) by the reason metadata.
    assert_eq!(
        stale
            .metadata()
            .get("distlock-reason")
            .map(|v| v.to_str().unwrap()),
        Some("stale-token"),
        "{stale:?}"
    );
    let missing = pay(&mut client, None).await.unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert_eq!(
        missing
            .metadata()
            .get("distlock-reason")
            .map(|v| v.to_str().unwrap()),
        Some("bad-token"),
        "{missing:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "refused calls never reach the handler"
    );
    // The layer's fence is the key's own: a fenced write of `order:1` under
    // the stale token is refused as well.
    let fence = RedisFence::new(conn);
    assert!(fence.write("order:1", 5, "x").await.unwrap_err().is_stale());
}
