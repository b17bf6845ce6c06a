//! [`RedisMasters`]: N independent plain masters.

use crate::{RedisServer, ServerOptions};

/// N independent `redis-server` masters (no replication between them), e.g. for quorum
/// locks across several Redis instances.
///
/// Each is a [`RedisServer`] on its own free port; a test can kill, pause or restart any one
/// through [`RedisMasters::server_mut`]. Dropping the set kills every server.
///
/// ```no_run
/// use lock_test_support::RedisMasters;
///
/// let mut masters = RedisMasters::start(3);
/// let urls = masters.urls(); // ["redis://127.0.0.1:P1/", ...]
/// masters.server_mut(1).pause(); // one of three unreachable
/// # let _ = urls;
/// ```
#[derive(Debug)]
pub struct RedisMasters {
    servers: Vec<RedisServer>,
}

impl RedisMasters {
    /// Starts `n` plain masters with default options, one after another, each ready on return.
    ///
    /// # Panics
    ///
    /// Panics if `n` is 0, or as [`RedisServer::start`] does.
    pub fn start(n: usize) -> RedisMasters {
        Self::start_with(n, ServerOptions::new())
    }

    /// Starts `n` masters, each configured by a clone of `options`.
    ///
    /// # Panics
    ///
    /// Panics if `n` is 0, or as [`RedisServer::start_with`] does.
    pub fn start_with(n: usize, options: ServerOptions) -> RedisMasters {
        assert!(
            n > 0,
            "lock-test-support: RedisMasters needs at least one server"
        );
        let servers = (0..n)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect();
        RedisMasters { servers }
    }

    /// The number of servers (never 0).
    pub fn count(&self) -> usize {
        self.servers.len()
    }

    /// The URLs of all servers, in index order ([`RedisServer::url`]).
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The server at `index`.
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn server(&self, index: usize) -> &RedisServer {
        self.servers.get(index).unwrap_or_else(|| {
            panic!(
                "RedisMasters: no server {index} (there are {})",
                self.servers.len()
            )
        })
    }

    /// The server at `index`, mutably (to kill or restart it).
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn server_mut(&mut self, index: usize) -> &mut RedisServer {
        let count = self.servers.len();
        self.servers
            .get_mut(index)
            .unwrap_or_else(|| panic!("RedisMasters: no server {index} (there are {count})"))
    }

    /// All servers, in index order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// All servers, mutably.
    pub fn servers_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }
}
