//! The `LockLayer` workload: each worker serves HTTP with the tower layer on a route whose
//! lock name comes from the path, and its task sends real HTTP requests to another
//! worker's server, so that each request crosses processes. The handler records the hold
//! (the token from the request's `FencingToken`, the owner from `distlock::current()`) and
//! does the read-modify-write of the lock's registers, as a guard task does.
//!
//! Two routes: `/locked/{name}`, whose handler watches its lock and stops its work at the
//! loss (as a careful handler does), and `/aborting/{name}`, under a layer with
//! `abort_on_lost(true)`, whose handler does not watch: the layer must drop it at the loss
//! (recorded as its `lost()` and its end) and answer 503, so that no request whose lock
//! was lost runs on past the documented bound or answers 200 (a completed handler past
//! the bound is a `late_lost`, a successor while it runs an `overlap`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use distlock::tower::{FencingToken, LockLayer, PathTemplate};
use rand::Rng as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::clock::now_ns;
use crate::event::{Event, LockKind, TaskMode};
use crate::task::TaskCtx;

/// How long the layer waits for a busy lock.
const WAIT: Duration = Duration::from_secs(2);
/// How long a request may take in all before the requester gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

struct Served {
    ctx: Arc<TaskCtx>,
    hold_max_ms: u64,
}

/// When a request reached this worker's server, before the layer took its lock: the
/// hold's `t_start`. The layer acquires before the handler runs (a grant can precede the
/// handler's record by a wait), so a fault between the grant and the handler, such as a
/// Redlock master restarted empty under a lock on a bare majority, falls in the hold's
/// span (the checker's `granted_from`) only with it.
#[derive(Debug, Clone, Copy)]
struct Arrived(u64);

/// Stamps the request with its arrival ([`Arrived`]).
async fn stamp(mut request: axum::extract::Request) -> axum::extract::Request {
    request.extensions_mut().insert(Arrived(now_ns()));
    request
}

/// The route whose layer drops the handler at the loss.
const ABORTING: &str = "aborting";

/// The address this process reaches the lock servers from (the first of `urls`): in a
/// worker's network namespace its own address there, which the other workers' namespaces
/// reach over the lab's bridge; loopback without a namespace or a usable URL.
pub fn own_address(urls: &[String]) -> IpAddr {
    let server = urls.first().and_then(|url| {
        let rest = url.split("://").nth(1)?;
        let authority = rest.split('/').next()?;
        let host_port = authority.rsplit('@').next()?;
        host_port.to_socket_addrs().ok()?.next()
    });
    server
        .and_then(|server| {
            let socket = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
            socket.connect(server).ok()?;
            Some(socket.local_addr().ok()?.ip())
        })
        .unwrap_or(Ipv4Addr::LOCALHOST.into())
}

/// Starts the worker's server on a free port of `host` and publishes `host:port` in
/// `dir/http-{worker}.port`.
pub async fn start(
    ctx: Arc<TaskCtx>,
    dir: &Path,
    host: IpAddr,
    hold_max_ms: u64,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind((host, 0)).await?;
    let address = listener.local_addr()?;
    let layer = LockLayer::new(
        ctx.client.clone(),
        PathTemplate::new("/locked/{name}", "{name}"),
    )
    .wait(WAIT);
    let aborting = LockLayer::new(
        ctx.client.clone(),
        PathTemplate::new("/aborting/{name}", "{name}"),
    )
    .wait(WAIT)
    .abort_on_lost(true);
    let worker = ctx.worker;
    let served = Arc::new(Served { ctx, hold_max_ms });
    let app = Router::new()
        .route("/locked/{name}", post(handle))
        .route_layer(layer)
        .with_state(served.clone())
        .merge(
            Router::new()
                .route("/aborting/{name}", post(handle_aborting))
                .route_layer(aborting)
                .with_state(served),
        )
        .layer(axum::middleware::map_request(stamp));
    let tmp = dir.join(format!("http-{worker}.port.tmp"));
    std::fs::write(&tmp, address.to_string())?;
    std::fs::rename(&tmp, dir.join(format!("http-{worker}.port")))
        .context("publishing the HTTP port")?;
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }))
}

/// The handler: runs inside the layer's guard scope.
async fn handle(
    State(served): State<Arc<Served>>,
    UrlPath(name): UrlPath<String>,
    Extension(lock): Extension<FencingToken>,
    Extension(arrived): Extension<Arrived>,
) -> StatusCode {
    handle_request(&served, name, lock, arrived, false).await
}

/// The handler of the route whose layer aborts at the loss: it does not watch its lock.
async fn handle_aborting(
    State(served): State<Arc<Served>>,
    UrlPath(name): UrlPath<String>,
    Extension(lock): Extension<FencingToken>,
    Extension(arrived): Extension<Arrived>,
) -> StatusCode {
    handle_request(&served, name, lock, arrived, true).await
}

/// Records the hold and does the work; with `aborting`, leaves the loss to the layer.
async fn handle_request(
    served: &Served,
    name: String,
    lock: FencingToken,
    arrived: Arrived,
    aborting: bool,
) -> StatusCode {
    let ctx = &served.ctx;
    let mode = if aborting {
        TaskMode::MacroAbort
    } else {
        ctx.mode
    };
    let t = now_ns();
    let current = distlock::current();
    let hold_id = ctx.next_hold();
    let owner = current
        .as_ref()
        .map_or_else(|| format!("layer-{hold_id}"), |c| c.owner().to_owned());
    let token = lock.token;
    ctx.sink.emit(&Event::Acquired {
        t_start: arrived.0.min(t),
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.clone(),
        mode,
        name: name.clone(),
        owner: owner.clone(),
        token,
        kind: LockKind::Layer,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    });
    // The server drops this future when the requester's connection closes (the requester
    // was killed): the layer then releases the lock, and the hold ends here. The aborting
    // layer drops it at the loss.
    let mut unfinished = Unfinished {
        ctx,
        hold: hold_id.clone(),
        name: name.clone(),
        owner: owner.clone(),
        token,
        current: current.clone(),
        done: false,
    };
    let hold = Duration::from_millis(rand::rng().random_range(10..=served.hold_max_ms));
    let work = crate::task::read_modify_write(ctx, &name, &hold_id, token, hold);
    // The handler stops its work once the lock no longer counts itself held.
    let watch = async {
        loop {
            if current.as_ref().is_some_and(|c| !c.is_held()) {
                return now_ns();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let mut end = None;
    if aborting {
        work.await;
    } else {
        tokio::select! {
            biased;
            () = work => {}
            t = watch => end = Some(t),
        }
    }
    if let Some(t) = end {
        ctx.sink.emit(&Event::Lost {
            t,
            worker: ctx.worker,
            task: ctx.task,
            hold: hold_id.clone(),
            name: name.clone(),
            owner: owner.clone(),
            token,
        });
    }
    unfinished.done = true;
    let t_end = now_ns();
    ctx.sink.emit(&Event::Released {
        t_start: end.unwrap_or(t_end),
        t: t_end,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id,
        name,
        owner,
        token,
        result: "layer".to_owned(),
    });
    StatusCode::OK
}

/// Records the end of a hold whose handler was dropped before it finished.
struct Unfinished<'a> {
    ctx: &'a TaskCtx,
    hold: String,
    name: String,
    owner: String,
    token: u64,
    /// The handler's lock: not held when it is dropped means the layer aborted it.
    current: Option<distlock::CurrentLock>,
    done: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let t = now_ns();
        let lost = self.current.as_ref().is_some_and(|c| !c.is_held());
        if lost {
            self.ctx.sink.emit(&Event::Lost {
                t,
                worker: self.ctx.worker,
                task: self.ctx.task,
                hold: self.hold.clone(),
                name: self.name.clone(),
                owner: self.owner.clone(),
                token: self.token,
            });
        }
        self.ctx.sink.emit(&Event::Released {
            t_start: t,
            t,
            worker: self.ctx.worker,
            task: self.ctx.task,
            hold: std::mem::take(&mut self.hold),
            name: std::mem::take(&mut self.name),
            owner: std::mem::take(&mut self.owner),
            token: self.token,
            result: if lost { "aborted" } else { "dropped" }.to_owned(),
        });
    }
}

/// The published addresses of every worker's server but `own`'s (own's when it is the only
/// one).
fn peers(dir: &Path, own: u32) -> Vec<(u32, SocketAddr)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(id) = file
            .to_str()
            .and_then(|f| f.strip_prefix("http-"))
            .and_then(|f| f.strip_suffix(".port"))
            .and_then(|f| f.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(address) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            out.push((id, address));
        }
    }
    if out.iter().any(|(id, _)| *id != own) {
        out.retain(|(id, _)| *id != own);
    }
    out
}

/// Sends one `POST /locked/{name}` to a random other worker's server and records a
/// refused or failed request as a failed acquisition.
pub async fn request(ctx: &TaskCtx, name: &str) {
    let Some(dir): Option<&PathBuf> = ctx.http_dir.as_ref() else {
        return;
    };
    let peers = peers(dir, ctx.worker);
    if peers.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    }
    let (peer, address) = peers[rand::rng().random_range(0..peers.len())];
    let route = if rand::rng().random_bool(0.5) {
        ABORTING
    } else {
        "locked"
    };
    let t_start = now_ns();
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, post_request(address, route, name)).await;
    let (kind, error) = match answer {
        Ok(Ok(200)) => return,
        Ok(Ok(409)) => ("timed_out", "409 Conflict".to_owned()),
        Ok(Ok(status)) => ("backend", format!("HTTP status {status}")),
        Ok(Err(e)) => {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                // Its worker is gone (killed): ask the others from now on.
                let _ = std::fs::remove_file(dir.join(format!("http-{peer}.port")));
            }
            ("other", format!("request: {e}"))
        }
        Err(_) => ("other", "request timed out".to_owned()),
    };
    ctx.sink.emit(&Event::AcquireFailed {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        name: name.to_owned(),
        kind: kind.to_owned(),
        error,
    });
    if kind != "timed_out" {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal HTTP/1.1 client: one request per connection; returns the status code.
async fn post_request(address: SocketAddr, route: &str, name: &str) -> std::io::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "POST /{route}/{name} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let head = String::from_utf8_lossy(&response);
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))
}
