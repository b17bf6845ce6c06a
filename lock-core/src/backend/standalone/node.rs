//! The node commands go to: its client, its multiplexed auto-reconnecting
//! connection, and its address.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};

use crate::backend::redis::command::{bounded, Target};
use crate::backend::redis::scripts::Scripts;
use crate::backend::redis::version;
use crate::backend::redis::{server_name, RedisSettings};
use crate::{BackendError, LockError};

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
    pub(crate) server: String,
}

impl Node {
    /// Connects and loads the scripts, within the connect and response timeouts.
    pub(crate) async fn connect(
        client: redis::Client,
        settings: &RedisSettings,
        scripts: &Scripts,
    ) -> Result<Self, LockError> {
        let server = server_name(&client);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            // Every call on this connection is bounded by `command::run`
            // (which also covers waiting for a reconnect): a per-request
            // timer of the connection itself would be a second timer per
            // command.
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let connecting = ConnectionManager::new_with_config(client.clone(), config);
        let mut conn = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(connect_error(&server, err)),
            Err(_) => {
                return Err(LockError::Connect {
                    server,
                    source: BackendError::Timeout(settings.connect_timeout),
                })
            }
        };
        // A server too old for the lock is refused now, naming its version.
        let mut info_cmd = redis::cmd("INFO");
        let info = info_cmd.arg("server").query_async::<String>(&mut conn);
        match bounded(settings.response_timeout, info).await {
            Ok(info) => version::NODE.check(&server, Ok(info))?,
            Err(BackendError::Redis(err)) => version::NODE.check(&server, Err(err))?,
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        // Load the scripts up front, in one round trip, so that the first
        // concurrent acquisitions do not each meet NOSCRIPT. (After a restart,
        // a failover or SCRIPT FLUSH they are reloaded on demand.)
        match bounded(settings.response_timeout, conn.load(&scripts.all())).await {
            Ok(()) => {}
            Err(BackendError::Redis(err)) => return Err(connect_error(&server, err)),
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        Ok(Node {
            client,
            conn,
            server,
        })
    }
}

/// Turns an error met while connecting into the client's error.
pub(crate) fn connect_error(server: &str, err: RedisError) -> LockError {
    let auth = err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
    if auth {
        LockError::Authentication {
            server: server.to_owned(),
            message: err.to_string(),
        }
    } else {
        LockError::Connect {
            server: server.to_owned(),
            source: err.into(),
        }
    }
}
