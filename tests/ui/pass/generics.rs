//! Generic fns, `impl Trait` arguments, where clauses, destructured and
//! reference arguments, fields and method calls in placeholders.
use std::fmt::Display;

use distlock::{distributed_lock, LockClient, LockError};

struct Request {
    user_id: u32,
    path: String,
}

#[distributed_lock(key = "user:{id}", client = client)]
async fn generic<T: Display + Send + Sync>(client: &LockClient, id: T) -> Result<String, LockError> {
    Ok(id.to_string())
}

#[distributed_lock(key = "user:{id}", client = client)]
async fn impl_arg(client: &LockClient, id: impl Display + Send + Sync) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "req:{req.user_id}:{req.path.to_lowercase()}", client = *client)]
async fn fields<'a, C>(client: &C, req: &'a Request) -> Result<&'a str, LockError>
where
    C: std::borrow::Borrow<LockClient> + Sync,
{
    let _ = client;
    Ok(&req.path)
}

#[distributed_lock(key = "pair:{a}:{b}", client = client)]
async fn destructured(client: &LockClient, (a, b): (u8, u8), mut n: u32) -> Result<u32, LockError> {
    n += u32::from(a) + u32::from(b);
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    assert_eq!(generic(&client, 7).await.unwrap(), "7");
    impl_arg(&client, "x").await.unwrap();
    let req = Request { user_id: 1, path: "/A".into() };
    assert_eq!(fields(&client, &req).await.unwrap(), "/A");
    assert_eq!(destructured(&client, (1, 2), 3).await.unwrap(), 6);
}
