//! Fencing tokens that never repeat or go back when Redis loses its data: the
//! acquire scripts issue `max(counter + 1, server TIME in µs)` (the
//! guarantees guide's proof), so an empty restart, `FLUSHALL` or a lost
//! counter cannot hand out a token that an earlier holder had, on every
//! primitive and both layouts; upgrading from a counter of small numbers only
//! raises tokens; the in-memory backend does the same with the system clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{Layout, LockClient, LockError};
use lock_test_support::RedisServer;
use redis::Commands;

/// The primitives that issue tokens.
#[derive(Debug, Clone, Copy)]
enum Primitive {
    Plain,
    Fair,
    Read,
    Write,
    Permit,
}

const EVERY: [Primitive; 5] = [
    Primitive::Plain,
    Primitive::Fair,
    Primitive::Read,
    Primitive::Write,
    Primitive::Permit,
];

/// Takes and gives back `primitive` of `name`, returning its token.
async fn token_of(client: &LockClient, primitive: Primitive, name: &str) -> Result<u64, LockError> {
    let lock = match primitive {
        Primitive::Plain => client.lock(name),
        Primitive::Fair => client.fair_lock(name),
        Primitive::Read => client.read_write_lock(name).read(),
        Primitive::Write => client.read_write_lock(name).write(),
        Primitive::Permit => client.semaphore(name, 3).permit(),
    };
    let guard = lock.wait(Duration::from_secs(5)).acquire().await?;
    let token = guard.fencing_token();
    guard.release().await?;
    Ok(token)
}

async fn connect(server: &RedisServer, layout: Layout) -> LockClient {
    LockClient::builder()
        .layout(layout)
        // Both layouts take turns on one server, on names of their own.
        .allow_mixed_layouts(true)
        .redis(&server.url())
        .connect()
        .await
        .unwrap()
}

fn micros_now() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// Whether the layout has the primitive (Redisson's has no fair lock of ours).
fn supported(result: &Result<u64, LockError>) -> bool {
    !matches!(result, Err(LockError::Unsupported { .. }))
}

/// Before the clock floor, the counter started over at 1 after an empty
/// restart and the first holders got tokens that earlier holders had had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_across_an_empty_restart_on_every_primitive_and_layout() {
    let mut server = RedisServer::start();
    for layout in [Layout::Native, Layout::Redisson] {
        let mut before = Vec::new();
        {
            let client = connect(&server, layout).await;
            for primitive in EVERY {
                let name = format!("floor-{primitive:?}");
                // A few tokens, so that a counter restarted at 1 would repeat one.
                let mut last = Ok(0);
                for _ in 0..3 {
                    last = token_of(&client, primitive, &name).await;
                }
                if supported(&last) {
                    before.push((primitive, name, last.unwrap()));
                }
            }
            let _ = client.shutdown(Duration::from_secs(1)).await;
        }
        assert!(before.len() >= 4, "{layout:?}: {before:?}");

        server.restart();

        let client = connect(&server, layout).await;
        for (primitive, name, earlier) in &before {
            let after = token_of(&client, *primitive, name).await.unwrap();
            assert!(
                after > *earlier,
                "{layout:?} {primitive:?}: token {after} after the empty restart, {earlier} before"
            );
        }
        let _ = client.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_across_flushall_and_a_deleted_counter() {
    let server = RedisServer::start();
    let client = connect(&server, Layout::Native).await;
    let first = token_of(&client, Primitive::Plain, "flushed")
        .await
        .unwrap();
    let fence_key = client.admin().inspect("flushed").await.unwrap().fence_key;

    let mut conn = server.conn();
    redis::cmd("FLUSHALL").exec(&mut conn).unwrap();
    let second = token_of(&client, Primitive::Plain, "flushed")
        .await
        .unwrap();
    assert!(second > first, "{second} after FLUSHALL, {first} before");

    let _: () = conn.del(&fence_key).unwrap();
    let third = token_of(&client, Primitive::Plain, "flushed")
        .await
        .unwrap();
    assert!(
        third > second,
        "{third} after DEL {fence_key}, {second} before"
    );
    let _ = client.shutdown(Duration::from_secs(1)).await;
}

/// A counter of an earlier version holds small numbers: the next token jumps
/// to the clock (up, never down). A counter ahead of the clock (set by hand)
/// goes on from where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_raises_tokens_and_a_counter_ahead_of_the_clock_goes_on() {
    let server = RedisServer::start();
    let client = connect(&server, Layout::Native).await;
    let fence_key = client.admin().inspect("upgraded").await.unwrap().fence_key;
    let mut conn = server.conn();

    let _: () = conn.set(&fence_key, 41).unwrap();
    let started = micros_now();
    let token = token_of(&client, Primitive::Plain, "upgraded")
        .await
        .unwrap();
    assert!(
        token > 41 && token + 5_000_000 >= started,
        "{token}: the clock floor (about {started})"
    );
    let stored: u64 = conn.get(&fence_key).unwrap();
    assert_eq!(stored, token, "the counter holds the last token");

    let ahead = micros_now() + 3_600_000_000;
    let _: () = conn.set(&fence_key, ahead).unwrap();
    assert_eq!(
        token_of(&client, Primitive::Plain, "upgraded")
            .await
            .unwrap(),
        ahead + 1
    );
    assert_eq!(
        token_of(&client, Primitive::Fair, "upgraded")
            .await
            .unwrap(),
        ahead + 2
    );
    let _ = client.shutdown(Duration::from_secs(1)).await;
}

/// A counter that holds something else (set by hand) is refused as a key of
/// the wrong type that names the counter, and the lock is not left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_that_is_not_a_number_is_refused_and_leaves_nothing_held() {
    let server = RedisServer::start();
    let client = connect(&server, Layout::Native).await;
    let fence_key = client.admin().inspect("garbled").await.unwrap().fence_key;
    let mut conn = server.conn();
    for bad in ["abc", "1.5", "9007199254740993"] {
        let _: () = conn.set(&fence_key, bad).unwrap();
        for primitive in EVERY {
            match token_of(&client, primitive, "garbled").await {
                Err(LockError::WrongType { key, redis_key }) => {
                    assert_eq!((key.as_str(), redis_key.as_str()), ("garbled", &*fence_key));
                }
                other => panic!("{primitive:?} {bad}: {other:?}"),
            }
        }
        let left: Vec<String> = conn.keys("*{garbled}*").unwrap();
        assert!(left.is_empty(), "{bad}: {left:?} left behind");
    }
    let _: () = conn.del(&fence_key).unwrap();
    token_of(&client, Primitive::Plain, "garbled")
        .await
        .unwrap();
    let _ = client.shutdown(Duration::from_secs(1)).await;
}

/// A memory store is new in every process: without the floor, a restarted
/// service issued 1, 2, 3 again.
#[tokio::test]
async fn a_new_memory_store_issues_tokens_above_an_earlier_one() {
    let earlier = LockClient::memory();
    let mut last = 0;
    for _ in 0..3 {
        last = token_of(&earlier, Primitive::Plain, "m").await.unwrap();
    }
    let restarted = LockClient::memory();
    for primitive in EVERY {
        let token = token_of(&restarted, primitive, "m").await.unwrap();
        assert!(token > last, "{primitive:?}: {token} after {last}");
        last = token;
    }
}
