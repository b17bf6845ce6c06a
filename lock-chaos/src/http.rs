//! The `LockLayer` workload: each worker serves HTTP with the tower layer on a route whose
//! lock name comes from the path, and its task sends real HTTP requests to another
//! worker's server, so that each request crosses processes. The handler records the hold
//! (the token from the request's `FencingToken`, the owner from `distlock::current()`) and
//! does the read-modify-write of the lock's registers, as a guard task does.

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
use crate::event::{Event, LockKind};
use crate::task::TaskCtx;

/// How long the layer waits for a busy lock.
const WAIT: Duration = Duration::from_secs(2);
/// How long a request may take in all before the requester gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

struct Served {
    ctx: Arc<TaskCtx>,
    hold_max_ms: u64,
}

/// Starts the worker's server on a free loopback port and publishes the port in
/// `dir/http-{worker}.port`.
pub async fn start(
    ctx: Arc<TaskCtx>,
    dir: &Path,
    hold_max_ms: u64,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let layer = LockLayer::new(
        ctx.client.clone(),
        PathTemplate::new("/locked/{name}", "{name}"),
    )
    .wait(WAIT);
    let worker = ctx.worker;
    let app = Router::new()
        .route("/locked/{name}", post(handle))
        .route_layer(layer)
        .with_state(Arc::new(Served { ctx, hold_max_ms }));
    let tmp = dir.join(format!("http-{worker}.port.tmp"));
    std::fs::write(&tmp, port.to_string())?;
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
) -> StatusCode {
    let ctx = &served.ctx;
    let t = now_ns();
    let current = distlock::current();
    let hold_id = ctx.next_hold();
    let owner = current
        .as_ref()
        .map_or_else(|| format!("layer-{hold_id}"), |c| c.owner().to_owned());
    let token = lock.token;
    ctx.sink.emit(&Event::Acquired {
        t_start: t,
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.clone(),
        mode: ctx.mode,
        name: name.clone(),
        owner: owner.clone(),
        token,
        kind: LockKind::Layer,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    });
    // The server drops this future when the requester's connection closes (the requester
    // was killed): the layer then releases the lock, and the hold ends here.
    let mut unfinished = Unfinished {
        ctx,
        hold: hold_id.clone(),
        name: name.clone(),
        owner: owner.clone(),
        token,
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
    tokio::select! {
        biased;
        () = work => {}
        t = watch => end = Some(t),
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
    done: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let t = now_ns();
        self.ctx.sink.emit(&Event::Released {
            t_start: t,
            t,
            worker: self.ctx.worker,
            task: self.ctx.task,
            hold: std::mem::take(&mut self.hold),
            name: std::mem::take(&mut self.name),
            owner: std::mem::take(&mut self.owner),
            token: self.token,
            result: "dropped".to_owned(),
        });
    }
}

/// The published ports of every worker's server but `own`'s (own's when it is the only one).
fn peers(dir: &Path, own: u32) -> Vec<(u32, u16)> {
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
        if let Some(port) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            out.push((id, port));
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
    let (peer, port) = peers[rand::rng().random_range(0..peers.len())];
    let t_start = now_ns();
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, post_request(port, name)).await;
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
async fn post_request(port: u16, name: &str) -> std::io::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!(
        "POST /locked/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
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
