//! A fault-injecting TCP proxy between one worker and one Redis server.
//!
//! It accepts on a loopback port and forwards every connection to the target. The nemesis
//! switches its mode at run time: pass, delay every chunk by N ms, blackhole (accept and
//! read but forward nothing until healed, as a partition whose packets TCP keeps
//! retransmitting), and reset (close every open connection with an RST).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What a proxy does with the bytes it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward at once.
    Pass,
    /// Forward each chunk after this delay.
    Delay(Duration),
    /// Forward nothing (new connections are accepted and held) until the mode changes.
    Blackhole,
}

/// One proxy: a loopback listener forwarding to `target`.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    mode: watch::Sender<ProxyMode>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `127.0.0.1:target_port`.
    pub async fn start(target_port: u16) -> anyhow::Result<FaultProxy> {
        FaultProxy::start_on(Ipv4Addr::LOCALHOST, target_port).await
    }

    /// Starts a proxy on a free port of `addr` forwarding to `127.0.0.1:target_port` (the
    /// network lab's door to a server that listens on loopback only).
    pub async fn start_on(addr: Ipv4Addr, target_port: u16) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind((addr, 0))
            .await
            .context("binding a proxy port")?;
        let port = listener.local_addr()?.port();
        let target = SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
        let (mode, _) = watch::channel(ProxyMode::Pass);
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = tokio::spawn({
            let mode = mode.clone();
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let task = tokio::spawn(forward(client, target, mode.subscribe()));
                    let mut open = connections.lock().unwrap_or_else(|e| e.into_inner());
                    open.retain(|h| !h.is_finished());
                    open.push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Ok(FaultProxy {
            port,
            mode,
            connections,
            accept,
        })
    }

    /// The loopback port workers connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Switches the mode of every open and future connection.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }

    /// Closes every open connection (with an RST: linger 0); new ones are accepted as before.
    pub fn reset(&self) {
        let open = std::mem::take(&mut *self.connections.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in open {
            handle.abort();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset();
    }
}

/// Forwards one connection both ways until either side closes or the task is aborted.
// `set_linger` is deprecated because a non-zero linger blocks on drop; a zero linger never
// blocks (the kernel resets the connection at once), and an RST is what a reset must send.
#[allow(deprecated)]
async fn forward(client: TcpStream, target: SocketAddr, mode: watch::Receiver<ProxyMode>) {
    // A blackholed proxy does not even connect upstream until healed.
    let mut gate = mode.clone();
    if wait_for_traffic(&mut gate).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        let _ = client.set_linger(Some(Duration::ZERO));
        return;
    };
    let _ = server.set_nodelay(true);
    // Dropping a socket with linger 0 sends an RST, as a reset connection does.
    let _ = client.set_linger(Some(Duration::ZERO));
    let _ = server.set_linger(Some(Duration::ZERO));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, mode.clone()) => {}
        _ = pump(server_read, client_write, mode) => {}
    }
}

/// Copies one direction, applying the current mode to each chunk.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<ProxyMode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if wait_for_traffic(&mut mode).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Waits until the mode lets a chunk through (sleeping for a delay); errs when the proxy is
/// gone.
async fn wait_for_traffic(mode: &mut watch::Receiver<ProxyMode>) -> Result<(), ()> {
    loop {
        let current = *mode.borrow_and_update();
        match current {
            ProxyMode::Pass => return Ok(()),
            ProxyMode::Delay(delay) => {
                tokio::time::sleep(delay).await;
                return Ok(());
            }
            ProxyMode::Blackhole => mode.changed().await.map_err(|_| ())?,
        }
    }
}
