//! The server's version, checked once when a backend connects, so that a
//! server too old for the backend is refused with an error that names its
//! version and what is missing, instead of failing later, lock by lock,
//! with an unknown command.
//!
//! The version comes from `INFO server`: `redis_version` (which Valkey
//! reports too, as the Redis version it is compatible with) and, for
//! Valkey, `server_name:valkey` and `valkey_version`. A server that does
//! not let the client run `INFO` (an ACL without `+info`) is not checked.

use std::fmt;

use redis::RedisError;

use crate::LockError;

/// What a backend needs of its servers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requirement {
    /// The backend, as the error names it.
    pub(crate) backend: &'static str,
    /// The oldest Redis version (or Redis version a Valkey reports) it works with.
    pub(crate) redis: (u32, u32, u32),
    /// Why: the first thing older servers lack.
    pub(crate) reason: &'static str,
}

/// One Redis node, a Sentinel's master, or each Redlock master.
pub(crate) const NODE: Requirement = Requirement {
    backend: "the standalone, Sentinel and Redlock backends",
    redis: (6, 0, 0),
    reason: "listing locks uses `SCAN .. TYPE` and `redis://user:password@` URLs need ACL \
             users, both new in Redis 6.0",
};

/// A Redis Cluster.
pub(crate) const CLUSTER: Requirement = Requirement {
    backend: "the Cluster backend",
    redis: (7, 0, 0),
    reason: "its wake-ups use sharded pub/sub (SSUBSCRIBE and SPUBLISH, new in Redis 7.0)",
};

/// A server's product and version, as `INFO server` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    /// `redis_version`, parsed.
    pub(crate) redis: (u32, u32, u32),
    /// `Redis 7.0.15`, or `Valkey 8.0.1 (Redis 7.2.4 compatible)`.
    pub(crate) described: String,
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.described)
    }
}

/// `INFO server`'s version fields, or `None` when it has no `redis_version`.
pub(crate) fn parse_info(info: &str) -> Option<ServerVersion> {
    let field = |name: &str| {
        info.lines().find_map(|line| {
            let (key, value) = line.trim_end_matches('\r').split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    };
    let redis_text = field("redis_version")?;
    let redis = parse_version(&redis_text)?;
    let valkey = field("valkey_version").or_else(|| {
        (field("server_name").as_deref() == Some("valkey")).then(|| redis_text.clone())
    });
    let described = match valkey {
        Some(valkey) if valkey != redis_text => {
            format!("Valkey {valkey} (Redis {redis_text} compatible)")
        }
        Some(valkey) => format!("Valkey {valkey}"),
        None => format!("Redis {redis_text}"),
    };
    Some(ServerVersion { redis, described })
}

/// `7.0.15` as `(7, 0, 15)`; missing parts count as 0, a suffix after
/// the digits (`7.2.0-rc1`) is ignored.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

impl Requirement {
    /// Judges the answer to `INFO server` from `server`: an error when it
    /// is older than required. A server that refused `INFO` (an ACL) or
    /// answered something unreadable passes: it is not checked.
    pub(crate) fn check(
        &self,
        server: &str,
        info: Result<String, RedisError>,
    ) -> Result<(), LockError> {
        let info = match info {
            Ok(info) => info,
            Err(err) => {
                tracing::debug!(server, error = %err, "INFO refused: the server's version is not checked");
                return Ok(());
            }
        };
        let Some(version) = parse_info(&info) else {
            tracing::debug!(
                server,
                "no redis_version in INFO: the server's version is not checked"
            );
            return Ok(());
        };
        if version.redis >= self.redis {
            return Ok(());
        }
        let (major, minor, patch) = self.redis;
        Err(LockError::UnsupportedServer {
            server: server.to_owned(),
            found: version.described,
            needed: format!("Redis {major}.{minor}.{patch}"),
            backend: self.backend,
            reason: self.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS_5: &str = "# Server\r\nredis_version:5.0.14\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\nos:Linux\r\n";
    const VALKEY_8: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nredis_mode:cluster\r\n";

    #[test]
    fn versions_are_read_from_info() {
        assert_eq!(
            parse_info(REDIS_5),
            Some(ServerVersion {
                redis: (5, 0, 14),
                described: "Redis 5.0.14".into()
            })
        );
        let valkey = parse_info(VALKEY_8).unwrap();
        assert_eq!(valkey.redis, (7, 2, 4));
        assert_eq!(valkey.to_string(), "Valkey 8.0.1 (Redis 7.2.4 compatible)");
        assert_eq!(parse_version("7.2.0-rc1"), Some((7, 2, 0)));
        assert_eq!(parse_version("7"), Some((7, 0, 0)));
        assert_eq!(parse_version("x.1"), None);
        assert_eq!(parse_info("# Server\r\nos:Linux\r\n"), None);
    }

    #[test]
    fn an_old_server_is_refused_with_its_version_and_the_reason() {
        let err = NODE
            .check("127.0.0.1:7000", Ok(REDIS_5.into()))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, LockError::UnsupportedServer { .. }),
            "{err:?}"
        );
        assert!(text.contains("Redis 5.0.14"), "{text}");
        assert!(text.contains("Redis 6.0.0"), "{text}");
        assert!(text.contains("127.0.0.1:7000"), "{text}");
        let err = CLUSTER
            .check("cluster a:1", Ok("redis_version:6.2.14\r\n".into()))
            .unwrap_err();
        assert!(err.to_string().contains("SSUBSCRIBE"), "{err}");
        assert!(CLUSTER.check("v", Ok(VALKEY_8.into())).is_ok());
        assert!(NODE
            .check("r", Ok("redis_version:7.0.15\r\n".into()))
            .is_ok());
    }

    #[test]
    fn a_server_that_refuses_info_is_not_checked() {
        let denied = RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "this user has no permissions to run the 'info' command".to_owned(),
        ));
        assert!(NODE.check("r", Err(denied)).is_ok());
    }
}
