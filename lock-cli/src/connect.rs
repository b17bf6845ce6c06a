//! Connection set-up: the one place that turns the connection options into a
//! [`LockClient`].

use std::time::Duration;

use distlock_core::{Layout, LockClient, LockClientBuilder, ShardedPubSub};

use crate::cli::{ConnectionArgs, LayoutArg, ShardedArg};
use crate::exit::{self, Failure};

/// The layout `--layout` (or `--forget`) names.
pub(crate) fn layout_of(arg: LayoutArg) -> Layout {
    match arg {
        LayoutArg::Native => Layout::Native,
        LayoutArg::Redisson => Layout::Redisson,
    }
}

/// Connects to the backend that `args` names, for work on `subject` (a lock
/// name, or a pattern for `list`), with `lease` as the watchdog lease when
/// given; `takes_locks`: the client records its layout in the store's
/// registry (`run`), which looking at locks does not.
///
/// Every backend option is read here, so a new backend (its flags in
/// [`ConnectionArgs`]) is added in this one function.
pub(crate) async fn connect(
    args: &ConnectionArgs,
    subject: &str,
    lease: Option<Duration>,
    takes_locks: bool,
) -> Result<LockClient, Failure> {
    let mut builder = LockClient::builder()
        // Only a client that takes locks records its layout in the store's
        // registry: looking at a store is not using it in a layout.
        .record_layout(takes_locks)
        .allow_mixed_layouts(args.allow_mixed_layouts)
        .layout(layout_of(args.layout))
        .connect_timeout(args.connect_timeout);
    let sharded = match args.sharded_pubsub {
        ShardedArg::Auto => ShardedPubSub::Auto,
        ShardedArg::On => ShardedPubSub::On,
        ShardedArg::Off => ShardedPubSub::Off,
    };
    if args.cluster.is_empty() && sharded == ShardedPubSub::On {
        return Err(Failure::new(
            exit::USAGE,
            "--sharded-pubsub on is for a cluster (--cluster) only: one node, Sentinel and \
             Redlock use classic pub/sub, as Redisson does",
        ));
    }
    if let Some(prefix) = &args.key_prefix {
        builder = builder.key_prefix(prefix.clone());
    }
    if let Some(lease) = lease {
        builder = builder.lease(lease);
    }
    builder = tls(builder, args)?;
    let servers = |urls: &[String]| {
        urls.iter()
            .map(|u| server_of(u))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (connected, server) = if !args.cluster.is_empty() {
        (
            builder
                .cluster(&args.cluster)
                .sharded_pubsub(sharded)
                .connect()
                .await,
            format!("cluster {}", servers(&args.cluster)),
        )
    } else if !args.sentinel.is_empty() {
        let master = args.master.as_deref().unwrap_or_default();
        (
            builder.connect_sentinel(&args.sentinel, master).await,
            format!("{master} via sentinels {}", servers(&args.sentinel)),
        )
    } else if !args.redlock.is_empty() {
        (
            builder.connect_redlock(&args.redlock).await,
            format!("redlock {}", servers(&args.redlock)),
        )
    } else {
        (builder.connect(&args.url).await, server_of(&args.url))
    };
    connected.map_err(|err| Failure::from_lock(&err, subject, &server, exit::USAGE))
}

fn tls(
    mut builder: LockClientBuilder,
    args: &ConnectionArgs,
) -> Result<LockClientBuilder, Failure> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|err| {
            Failure::new(
                exit::NO_INPUT,
                format!("cannot read TLS file {}: {err}", path.display()),
            )
        })
    };
    if let Some(ca) = &args.tls_ca_cert {
        builder = builder.tls_root_certificate(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls_client_certificate(read(cert)?, read(key)?);
    }
    Ok(builder)
}

/// `host:port` of a Redis URL for messages, never with its credentials; the
/// URL's scheme and host when it cannot be parsed (a PostgreSQL URL).
pub(crate) fn server_of(url: &str) -> String {
    if url.starts_with("postgres") {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let host = rest.split(['/', '?']).next().unwrap_or(rest);
        let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
        return host.to_owned();
    }
    match distlock_core::redis::Client::open(url) {
        Ok(client) => client.get_connection_info().addr().to_string(),
        Err(_) => {
            let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
            let host = rest.split('/').next().unwrap_or(rest);
            let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
            format!("`{host}`")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_named_without_credentials() {
        assert_eq!(
            server_of("redis://user:secret@127.0.0.1:7000/0"),
            "127.0.0.1:7000"
        );
        let bad = server_of("redis://user:secret@host:notaport/");
        assert!(!bad.contains("secret"), "{bad}");
        assert_eq!(
            server_of("postgres://app:secret@db.internal:5433/app?sslmode=disable"),
            "db.internal:5433"
        );
    }
}
