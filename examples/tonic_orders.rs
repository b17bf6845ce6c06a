//! A gRPC order service on tonic: calls of `orders.v1.Orders/Pay` run under
//! the lock `order:{x-order-id}`, taken by the tower `LockLayer` in
//! `Server::builder().layer(..)`. A busy order answers `ABORTED`, an
//! unreachable lock backend `UNAVAILABLE`. A second layer, in the
//! concurrency-limit mode, lets at most 2 payments per merchant
//! (`x-merchant-id`) run at once across every replica (the payment
//! provider's limit); a third answers `RESOURCE_EXHAUSTED`. The service
//! definition is in the `orders-proto` crate next to this file, built
//! without `protoc`.
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

use std::time::Duration;

use distlock::fence::FenceError;
use distlock::tower::{FencingToken, GrpcKey, LockLayer};
use distlock::LockClient;
use http::HeaderName;
use orders_proto::{
    Orders, OrdersClient, OrdersServer, PayReply, PayRequest, StatusReply, StatusRequest,
    PAY_METHOD,
};
use tokio::net::TcpListener;
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

mod payments;

/// The orders, by id: the amount paid, in cents, in a store fenced with
/// claim-on-read (`payments/mod.rs`).
#[derive(Clone)]
struct OrderService {
    paid: payments::Payments,
}

/// `ABORTED` when a newer holder of the order's lock has read or written it
/// (this call's lease ran out, a pause, or its lock was force-released);
/// `UNAVAILABLE` when the store could not answer.
fn refused(error: FenceError) -> Status {
    match error {
        FenceError::Stale { .. } => Status::aborted(error.to_string()),
        other => Status::unavailable(other.to_string()),
    }
}

#[tonic::async_trait]
impl Orders for OrderService {
    async fn pay(&self, request: Request<PayRequest>) -> Result<Response<PayReply>, Status> {
        // Put there by the layer: the lock of this call and its fencing token.
        let lock = request
            .extensions()
            .get::<FencingToken>()
            .cloned()
            .ok_or_else(|| Status::failed_precondition("send the order id as x-order-id"))?;
        let PayRequest {
            order_id,
            amount_cents,
        } = request.into_inner();
        if lock.key != format!("order:{order_id}") {
            return Err(Status::invalid_argument(
                "x-order-id does not match order_id",
            ));
        }
        // Read and write with the fencing token: a holder that was paused past
        // its lease can neither overwrite its successor nor pay an order its
        // successor has read as unpaid.
        if self
            .paid
            .read(order_id, lock.token)
            .await
            .map_err(refused)?
            > 0
        {
            return Err(Status::already_exists(format!("order {order_id} is paid")));
        }
        // The payment provider is slow.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.paid
            .write(order_id, lock.token, amount_cents)
            .await
            .map_err(refused)?;
        Ok(Response::new(PayReply {
            order_id,
            fencing_token: lock.token,
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        let order_id = request.into_inner().order_id;
        let (paid, _) = self.paid.peek(order_id).await.map_err(refused)?;
        Ok(Response::new(StatusReply {
            order_id,
            paid: paid > 0,
        }))
    }
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
            (client, payments::Payments::redis(&url).await?)
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis)");
            (LockClient::memory(), payments::Payments::memory())
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

    // Only Pay is locked, on the order id the client sends as metadata.
    let locks = LockLayer::new(
        client.clone(),
        GrpcKey::new(PAY_METHOD, "x-order-id").prefix("order:"),
    )
    .grpc()
    .fencing_token_header(HeaderName::from_static("x-fencing-token"));
    // At most 2 payments per merchant at once, fleet-wide: one semaphore per
    // merchant (`payments:merchant:m1`, 2 permits). Calls without
    // x-merchant-id are not limited.
    let limits = LockLayer::new(
        client,
        GrpcKey::new(PAY_METHOD, "x-merchant-id").prefix("payments:merchant:"),
    )
    .grpc()
    .concurrency_limit(2);
    let server = tokio::spawn(
        Server::builder()
            // The first layer added is the outer one: a call over its
            // merchant's limit is refused before it locks its order.
            .layer(limits)
            .layer(locks)
            .add_service(OrdersServer::new(OrderService { paid }))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    if !demo {
        println!(
            "serving orders.v1.Orders on {addr}; Pay calls must carry x-order-id metadata \
             (and may carry x-merchant-id: at most 2 payments per merchant at once)"
        );
        return Ok(server.await??);
    }

    let orders = OrdersClient::connect(format!("http://{addr}")).await?;
    // Three payments of order 1 at once, and one of order 2.
    let calls: Vec<_> = [1, 1, 1, 2]
        .into_iter()
        .map(|order_id| {
            let mut orders = orders.clone();
            tokio::spawn(async move {
                let mut request = Request::new(PayRequest {
                    order_id,
                    amount_cents: 4200,
                });
                request.metadata_mut().insert("x-order-id", order_id.into());
                (order_id, orders.pay(request).await)
            })
        })
        .collect();
    for call in calls {
        match call.await? {
            (id, Ok(reply)) => println!(
                "Pay order {id} -> OK, fencing token {}",
                reply.get_ref().fencing_token
            ),
            (id, Err(status)) => {
                println!(
                    "Pay order {id} -> {:?}: {}",
                    status.code(),
                    status.message()
                )
            }
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
                "Pay order {id} (merchant m1) -> {:?}: {}",
                status.code(),
                status.message()
            ),
        }
    }
    server.abort();
    Ok(())
}
