//! Finding the master of a Sentinel-managed set: asked of the sentinels at
//! connect time and again after an error that may mean a failover.

use redis::{ConnectionAddr, ConnectionInfo};

use crate::backend::redis::command::bounded;
use crate::backend::redis::{server_name, RedisSettings};
use crate::{BackendError, LockError};

/// The sentinels of one master name.
#[derive(Debug)]
pub(crate) struct Sentinel {
    sentinels: Vec<redis::Client>,
    master_name: String,
}

impl Sentinel {
    /// `sentinels` are clients of the sentinel processes; the master is
    /// reached with the first one's credentials and TLS settings.
    pub(crate) fn new(sentinels: Vec<redis::Client>, master_name: String) -> Self {
        Sentinel {
            sentinels,
            master_name,
        }
    }

    /// For messages: `mymaster via host:port,host:port`.
    pub(crate) fn label(&self) -> String {
        let servers: Vec<String> = self.sentinels.iter().map(server_name).collect();
        format!("{} via sentinels {}", self.master_name, servers.join(","))
    }

    /// A client of the master the first answering sentinel reports.
    pub(crate) async fn resolve(
        &self,
        settings: &RedisSettings,
    ) -> Result<redis::Client, LockError> {
        let mut last_error = None;
        for sentinel in &self.sentinels {
            match self.ask(sentinel, settings).await {
                Ok(Some((host, port))) => match self.master_client(sentinel, host, port) {
                    Ok(client) => return Ok(client),
                    Err(err) => last_error = Some(err),
                },
                Ok(None) => {
                    last_error = Some(BackendError::Protocol(format!(
                        "sentinel does not know master `{}`",
                        self.master_name
                    )));
                }
                Err(err) => last_error = Some(err),
            }
        }
        Err(LockError::Connect {
            server: self.label(),
            source: last_error.unwrap_or_else(|| BackendError::Protocol("no sentinels".into())),
        })
    }

    async fn ask(
        &self,
        sentinel: &redis::Client,
        settings: &RedisSettings,
    ) -> Result<Option<(String, u16)>, BackendError> {
        let connecting = sentinel.get_multiplexed_async_connection();
        let mut conn = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(conn) => conn?,
            Err(_) => return Err(BackendError::Timeout(settings.connect_timeout)),
        };
        let mut query = redis::cmd("SENTINEL");
        query.arg("get-master-addr-by-name").arg(&self.master_name);
        bounded(
            settings.response_timeout,
            query.query_async::<Option<(String, u16)>>(&mut conn),
        )
        .await
    }

    fn master_client(
        &self,
        sentinel: &redis::Client,
        host: String,
        port: u16,
    ) -> Result<redis::Client, BackendError> {
        let template: &ConnectionInfo = sentinel.get_connection_info();
        let addr = match template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(redis::Client::open(template.clone().set_addr(addr))?)
    }
}
