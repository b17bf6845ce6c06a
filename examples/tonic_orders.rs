//! The recommended pattern for a tonic service, the gRPC twin of the
//! README's axum pattern (and of `axum_orders.rs`): calls of
//! `orders.v1.Orders/Pay` are locked by the tower `LockLayer` on the
//! `x-order-id` metadata (the layer runs before the message is decoded, so
//! metadata is all it can read); the domain function `charge`, annotated
//! with `#[distributed_lock(key = "order:{order_id}")]`, takes the order's
//! lock itself from the message and re-enters the layer's lock (same call
//! chain, no round trip), so it is safe from anywhere; every read and write
//! of the payment carries the fencing token; SIGINT and SIGTERM stop the
//! server and the lock client gracefully.
//!
//! What a client gets when the call is not served, with the metadata
//! `distlock-reason` for machines (`distlock::tower::REASON_METADATA`):
//!
//! | status | `distlock-reason` | when | retry? |
//! |---|---|---|---|
//! | `ABORTED` | `busy` | another call holds the order's lock | yes, after a short back-off |
//! | `ABORTED` | `stale-token` | a newer holder has read or written the payment (this call's lease ran out) | yes, as a new call (new lock, new token) |
//! | `RESOURCE_EXHAUSTED` | `limit` | the merchant already has 2 payments running | yes, backing off |
//! | `UNAVAILABLE` | `backend-unavailable` | Redis did not answer (down, paused, failing over) | yes, backing off |
//! | `UNAVAILABLE` | `shutting-down` | this replica is shutting down | yes, on another replica |
//! | `INVALID_ARGUMENT` | `missing-key` | the call has no `x-order-id` metadata | no: send it |
//! | `INVALID_ARGUMENT` | `key-mismatch` | `x-order-id` is not the message's `order_id` | no: fix the client |
//!
//! A second layer, in the concurrency-limit mode, lets at most 2 payments
//! per merchant (`x-merchant-id`, optional) run at once across every
//! replica. The service definition is in the `orders-proto` crate next to
//! this file, built without `protoc`.
//!
//! Uses Redis when `REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`),
//! otherwise the in-memory backend, and says which. With Redis, the
//! payments are kept there too, fenced by `distlock::fence::RedisFence`
//! (`payments/mod.rs`); in memory, by the same rule written by hand.
//!
//! ```sh
//! cargo run --example tonic_orders             # serves on 127.0.0.1:50051 (ADDR to change)
//! cargo run --example tonic_orders -- --demo   # calls itself concurrently, then exits
//! ```

use std::future::Future;
use std::time::Duration;

use distlock::fence::FenceError;
use distlock::tower::{grpc_status, FencingToken, GrpcKey, LockLayer, REASON_METADATA};
use distlock::{distributed_lock, LockClient, LockError};
use http::HeaderName;
use orders_proto::{
    Orders, OrdersClient, OrdersServer, PayReply, PayRequest, StatusReply, StatusRequest,
    PAY_METHOD,
};
use tokio::net::TcpListener;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Code, Request, Response, Status};

pub(crate) mod payments;

use payments::Payments;

/// How long a running call may take to finish after SIGINT or SIGTERM.
const GRACE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// The domain: charging an order, under its lock, against fenced payments.
// ---------------------------------------------------------------------------

#[derive(Debug)]
pub(crate) enum PayError {
    Lock(LockError),
    AlreadyPaid,
    /// `FenceError::Stale` when a newer holder of the order's lock has read
    /// or written it (this holder's lease ran out, a pause, or the lock was
    /// force-released).
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

/// Charges order `order_id` once, under the order's lock, taken from the
/// message's id: called from `Pay`, it re-enters the lock the layer holds
/// for the call; called from anywhere else (a job, a CLI), it takes it.
/// The payment provider takes `provider`.
#[distributed_lock(key = "order:{order_id}", wait = "2s", client = client)]
pub(crate) async fn charge(
    client: &LockClient,
    payments: &Payments,
    order_id: u64,
    cents: u64,
    provider: Duration,
) -> Result<u64, PayError> {
    let token = distlock::current()
        .expect("inside the lock")
        .fencing_token();
    // Claim-on-read, then a fenced write: a holder paused past its lease gets
    // FenceError::Stale once its successor has read the payment.
    if payments.read(order_id, token).await? > 0 {
        return Err(PayError::AlreadyPaid);
    }
    tokio::time::sleep(provider).await;
    payments.write(order_id, token, cents).await?;
    Ok(token)
}

/// A status with `distlock-reason: reason`, as the layer answers.
fn status_with_reason(code: Code, message: String, reason: &'static str) -> Status {
    let mut metadata = MetadataMap::new();
    metadata.insert(REASON_METADATA, MetadataValue::from_static(reason));
    Status::with_metadata(code, message, metadata)
}

/// What a client gets for each failure of `charge` (see the table above).
fn refused(error: PayError) -> Status {
    match error {
        // The layer's own answers, `distlock-reason` included.
        PayError::Lock(error) => grpc_status(&error),
        // Never OK here: a newer holder has the order.
        PayError::Fence(error @ FenceError::Stale { .. }) => {
            status_with_reason(Code::Aborted, error.to_string(), "stale-token")
        }
        PayError::Fence(error) => {
            status_with_reason(Code::Unavailable, error.to_string(), "fence-unavailable")
        }
        PayError::AlreadyPaid => Status::already_exists("the order is paid"),
    }
}

// ---------------------------------------------------------------------------
// The gRPC service.
// ---------------------------------------------------------------------------

/// The orders service: the lock client, the fenced payments, and how long
/// the payment provider takes.
#[derive(Clone)]
pub(crate) struct OrderService {
    pub(crate) client: LockClient,
    pub(crate) paid: Payments,
    pub(crate) provider: Duration,
}

#[tonic::async_trait]
impl Orders for OrderService {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<PayReply>, Status> {
        // Put there by the layer, which refuses a Pay without x-order-id
        // (INVALID_ARGUMENT, `missing-key`): the lock of this call.
        let lock = request.extensions().get::<FencingToken>().cloned();
        let PayRequest {
            order_id,
            amount_cents,
        } = request.into_inner();
        // `charge` locks the message's order whatever the metadata says;
        // a metadata naming another order is a client bug, refused.
        if lock.map(|lock| lock.key) != Some(format!("order:{order_id}")) {
            return Err(status_with_reason(
                Code::InvalidArgument,
                format!("x-order-id must be the message's order_id ({order_id})"),
                "key-mismatch",
            ));
        }
        let token = charge(
            &self.client,
            &self.paid,
            order_id,
            amount_cents,
            self.provider,
        )
        .await
        .map_err(refused)?;
        Ok(Response::new(PayReply {
            order_id,
            fencing_token: token,
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        let order_id = request.into_inner().order_id;
        let (paid, _) = self.paid.peek(order_id).await.map_err(|error| {
            status_with_reason(Code::Unavailable, error.to_string(), "fence-unavailable")
        })?;
        Ok(Response::new(StatusReply {
            order_id,
            paid: paid > 0,
        }))
    }
}

/// Serves `service` on `listener` until `stop` resolves: `Pay` locked by the
/// order's lock (the `x-order-id` metadata, required), and at most 2 payments
/// per merchant (`x-merchant-id`, optional) at once, fleet-wide.
pub(crate) async fn serve(
    service: OrderService,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let client = service.client.clone();
    let locks = LockLayer::new(
        client.clone(),
        GrpcKey::new(PAY_METHOD, "x-order-id").prefix("order:"),
    )
    .grpc()
    // `x-order-id: abc` is refused (INVALID_ARGUMENT) before any lock is taken.
    .validate_key(|key: &str| {
        key.strip_prefix("order:")
            .is_some_and(|id| id.parse::<u64>().is_ok())
    })
    .fencing_token_header(HeaderName::from_static("x-fencing-token"));
    // One semaphore per merchant (`payments:merchant:m1`, 2 permits). Calls
    // without x-merchant-id are not limited (`optional`).
    let limits = LockLayer::new(
        client,
        GrpcKey::new(PAY_METHOD, "x-merchant-id")
            .prefix("payments:merchant:")
            .optional(),
    )
    .grpc()
    .concurrency_limit(2);
    Server::builder()
        // The first layer added is the outer one: a call over its
        // merchant's limit is refused before it locks its order.
        .layer(limits)
        .layer(locks)
        .add_service(OrdersServer::new(service))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop)
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (client, paid) = match std::env::var("REDIS_URL") {
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
        std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:50051".to_owned())
    };
    let listener = TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    let service = OrderService {
        client: client.clone(),
        paid,
        // The payment provider is slow.
        provider: Duration::from_millis(300),
    };
    if !demo {
        println!(
            "serving orders.v1.Orders on {addr}; Pay calls must carry x-order-id metadata \
             (and may carry x-merchant-id: at most 2 payments per merchant at once)"
        );
        serve(service, listener, stop(client.clone())).await?;
        // Waits for the shutdown `stop` began: locks released, watchdog stopped.
        println!("locks at shutdown: {:?}", client.shutdown(GRACE).await?);
        return Ok(());
    }

    let (stop_demo, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(service, listener, async {
        let _ = stopped.await;
    }));
    let orders = OrdersClient::connect(format!("http://{addr}")).await?;
    // Three payments of order 1 at once, one of order 2, one without x-order-id.
    let calls: Vec<_> = [Some(1), Some(1), Some(1), Some(2), None]
        .into_iter()
        .map(|order| {
            let mut orders = orders.clone();
            tokio::spawn(async move {
                let order_id = order.unwrap_or(3);
                let mut request = Request::new(PayRequest {
                    order_id,
                    amount_cents: 4200,
                });
                if let Some(id) = order {
                    request.metadata_mut().insert("x-order-id", id.into());
                }
                (order, orders.pay(request).await)
            })
        })
        .collect();
    for call in calls {
        match call.await? {
            (order, Ok(reply)) => println!(
                "Pay order {order:?} -> OK, fencing token {}",
                reply.get_ref().fencing_token
            ),
            (order, Err(status)) => println!(
                "Pay order {order:?} -> {:?} ({}): {}",
                status.code(),
                reason_of(&status),
                status.message()
            ),
        }
    }
    let status = orders.clone().status(StatusRequest { order_id: 1 }).await?;
    println!("Status order 1 -> paid: {}", status.get_ref().paid);

    // Five payments of merchant m1 at once, of different orders: two run,
    // three are over the merchant's limit.
    let calls: Vec<_> = (11..=15)
        .map(|order_id| {
            let mut orders = orders.clone();
            tokio::spawn(async move {
                let mut request = Request::new(PayRequest {
                    order_id,
                    amount_cents: 990,
                });
                request.metadata_mut().insert("x-order-id", order_id.into());
                request
                    .metadata_mut()
                    .insert("x-merchant-id", MetadataValue::from_static("m1"));
                (order_id, orders.pay(request).await)
            })
        })
        .collect();
    for call in calls {
        match call.await? {
            (id, Ok(_)) => println!("Pay order {id} (merchant m1) -> OK"),
            (id, Err(status)) => println!(
                "Pay order {id} (merchant m1) -> {:?} ({}): {}",
                status.code(),
                reason_of(&status),
                status.message()
            ),
        }
    }
    let _ = stop_demo.send(());
    server.await??;
    println!("locks at shutdown: {:?}", client.shutdown(GRACE).await?);
    Ok(())
}

/// The `distlock-reason` of a refused call, or `-` when it has none (an
/// answer of the transport, not of the layers).
pub(crate) fn reason_of(status: &Status) -> &str {
    status
        .metadata()
        .get(REASON_METADATA)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("-")
}

/// Ctrl-C (SIGINT) or SIGTERM (what Kubernetes, systemd and docker send):
/// no new locks from then on (waiting calls get `UNAVAILABLE`,
/// `shutting-down`), running ones have GRACE.
async fn stop(locks: LockClient) {
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term => {} }
    tokio::spawn(locks.shutdown(GRACE));
}
