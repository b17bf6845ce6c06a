//! A service with a leader: every replica serves `GET /leader` (who leads, pushed to each
//! replica by the store), only the leader runs the outbox relay (a background job whose writes
//! carry its term through a fence) and serves `POST /admin/compact` (a follower redirects it
//! to the leader's advertised address). On SIGTERM or Ctrl-C the replica shuts down: the
//! relay is dropped and the role resigned first, so another replica leads within a round trip
//! instead of after a lease.
//!
//! ```sh
//! # One replica, in-memory (a demo of three replicas in one process: --demo):
//! cargo run --example leader_service -- --demo
//! # Three replicas of one Redis, in three terminals:
//! REDIS_URL=redis://127.0.0.1:6379/ ADDR=127.0.0.1:3001 cargo run --example leader_service
//! REDIS_URL=redis://127.0.0.1:6379/ ADDR=127.0.0.1:3002 cargo run --example leader_service
//! REDIS_URL=redis://127.0.0.1:6379/ ADDR=127.0.0.1:3003 cargo run --example leader_service
//! curl -i http://127.0.0.1:3002/leader
//! curl -i -X POST http://127.0.0.1:3002/admin/compact   # 307 to the leader, unless it leads
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::routing::{get, post};
use axum::{Extension, Router};
use distlock::fence::{FenceError, MemoryFence, RedisFence};
use distlock::tower::{LeaderLayer, LeaderSeat};
use distlock::{LockClient, MemoryStore, Term};
use tokio::net::TcpListener;

/// The role the replicas elect a leader for.
const ROLE: &str = "outbox-relay";

/// Where the leader's fenced writes go: Redis (the lock's own store, through the lock
/// client's data connection) or this process's memory for the demo.
#[derive(Clone)]
enum Outbox {
    Redis(RedisFence<distlock::DataConnection>),
    Memory(Arc<MemoryFence>, Arc<std::sync::atomic::AtomicU64>),
}

impl Outbox {
    /// Relays one batch under `term`: refused if a newer leader has written since.
    async fn relay(&self, term: u64) -> Result<i64, FenceError> {
        match self {
            Outbox::Redis(fence) => fence.incr_by("outbox:relayed", term, 1).await,
            Outbox::Memory(fence, relayed) => {
                fence.claim("outbox:relayed", term)?;
                let n = relayed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                Ok(i64::try_from(n).unwrap_or(i64::MAX))
            }
        }
    }
}

#[derive(Clone)]
struct App {
    seat: LeaderSeat,
    name: String,
}

/// `GET /leader`: who leads, as this replica sees it (pushed by the store).
async fn leader(State(app): State<App>) -> ([(header::HeaderName, &'static str); 1], String) {
    let leader = app.seat.leader();
    let json = serde_json::json!({
        "replica": app.name,
        "this_replica_leads": app.seat.term().is_some(),
        "leader": leader.map(|l| serde_json::json!({
            "term": l.term,
            "address": l.metadata,
            "client_id": l.client_id,
        })),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        json.to_string(),
    )
}

/// `POST /admin/compact`: only the leader serves it (the layer redirects the others).
async fn compact(Extension(term): Extension<Term>) -> String {
    format!("compacted by the leader of {term}\n")
}

/// One replica: its router and its run loop (the relay, only while it leads).
fn replica(client: &LockClient, outbox: Outbox, addr: &str) -> (Router, LeaderSeat) {
    let election = client
        .election(ROLE)
        .metadata(format!("http://{addr}"))
        .backoff(Duration::from_millis(200));
    let seat = LeaderSeat::new(election);
    let router = Router::new()
        .route("/admin/compact", post(compact))
        .route_layer(LeaderLayer::new(seat.clone()).redirect())
        .route("/leader", get(leader))
        .with_state(App {
            seat: seat.clone(),
            name: addr.to_owned(),
        });
    let relay = seat.clone();
    tokio::spawn(async move {
        // Runs the relay only while this replica leads; dropped the moment it stops.
        let run = relay.run(move |term| {
            let outbox = outbox.clone();
            async move {
                loop {
                    match outbox.relay(term.token()).await {
                        Ok(total) => println!("[{term}] relayed a batch ({total} in all)"),
                        // A newer leader wrote: this one lost the role (paused past its lease).
                        Err(err) if err.is_stale() => return,
                        Err(err) => eprintln!("[{term}] relay failed: {err}"),
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        });
        if let Err(err) = run.await {
            eprintln!("the run loop stopped: {err}");
        }
    });
    (router, seat)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--demo") {
        return demo().await;
    }
    let (client, outbox) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let client = LockClient::connect(&url).await?;
            let outbox = Outbox::Redis(RedisFence::new(client.data_connection()?));
            (client, outbox)
        }
        Err(_) => (
            LockClient::memory(),
            Outbox::Memory(Arc::default(), Arc::default()),
        ),
    };
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    let (router, _seat) = replica(&client, outbox, &addr);
    println!("replica on http://{addr}: GET /leader, POST /admin/compact");
    let shutdown = {
        let client = client.clone();
        async move {
            shutdown_signal().await;
            // Drops the relay and resigns first: another replica leads at once.
            match client.shutdown(Duration::from_secs(10)).await {
                Ok(report) => println!("shut down: {report:?}"),
                Err(err) => eprintln!("shutdown: {err}"),
            }
        }
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// SIGTERM (Unix) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Three replicas in one process on one in-memory store (or `REDIS_URL`): who leads, the
/// follower's redirect, and the hand-over when the leader shuts down.
async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();
    let fence = Arc::new(MemoryFence::new());
    let relayed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let client = LockClient::builder().memory(store.clone())?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let outbox = Outbox::Memory(fence.clone(), relayed.clone());
        let (router, seat) = replica(&client, outbox, &addr);
        tokio::spawn(async move { axum::serve(listener, router).await });
        replicas.push((client, seat, addr));
    }
    let leader = loop {
        if let Some(i) = replicas
            .iter()
            .position(|(_, seat, _)| seat.term().is_some())
        {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let follower = (leader + 1) % replicas.len();
    println!("leader: {}", replicas[leader].2);
    let (status, location) = http_post(&replicas[follower].2, "/admin/compact").await?;
    println!(
        "POST /admin/compact on follower {} -> {status}, location {location:?}",
        replicas[follower].2
    );
    let (status, _) = http_post(&replicas[leader].2, "/admin/compact").await?;
    println!("POST /admin/compact on the leader -> {status}");
    let before = replicas[leader].1.term().map(|t| t.token());
    let stopped = tokio::time::Instant::now();
    replicas[leader].0.shutdown(Duration::from_secs(5)).await?;
    let next = loop {
        if let Some(i) = replicas
            .iter()
            .position(|(client, seat, _)| !client.is_shutting_down() && seat.term().is_some())
        {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!(
        "the leader shut down; {} leads {:?} later with term {:?} (was {:?})",
        replicas[next].2,
        stopped.elapsed(),
        replicas[next].1.term().map(|t| t.token()),
        before,
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    println!(
        "batches relayed in all: {}",
        relayed.load(std::sync::atomic::Ordering::SeqCst)
    );
    Ok(())
}

/// `POST path` on `addr` without following redirects: the status and `Location`.
async fn http_post(
    addr: &str,
    path: &str,
) -> Result<(u16, Option<String>), Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let location = response
        .lines()
        .find_map(|line| line.strip_prefix("location: "))
        .map(str::to_owned);
    Ok((status, location))
}
