//! The behavioural suite and the Redis-only tests (processes, faults, wrong
//! types, TLS, ACL) against a real `redis-server` started per test.

mod suite;

use distributed_lock::{LockClient, LockClientBuilder};
use lock_test_support::RedisServer;
use suite::Fixture;

/// Clients on one `redis-server` of this test's own.
struct Standalone {
    server: RedisServer,
}

impl Standalone {
    fn new() -> Self {
        Standalone {
            server: RedisServer::start(),
        }
    }
}

impl Fixture for Standalone {
    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder.connect(&self.server.url()).await.unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let deleted: i64 = redis::cmd("DEL")
            .arg(format!("lock:{{{name}}}"))
            .query(&mut self.server.conn())
            .unwrap();
        assert_eq!(deleted, 1, "{name} was not held");
    }
}

behaviour_suite!(Standalone::new());
