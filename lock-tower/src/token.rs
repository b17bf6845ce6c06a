//! [`FencingToken`]: the request extension that tells a handler which lock it
//! runs under.

/// The lock a request runs under and its fencing token, put in the request's
/// extensions by the HTTP and gRPC flavours of the layer (on by default, see
/// [`LockLayer::fencing_token_extension`](crate::LockLayer::fencing_token_extension)).
///
/// In axum, take it as `Extension<FencingToken>` on a route that is always
/// locked. On a route that may run unlocked (the key extractor gave `None`
/// for the request), take `Option<Extension<FencingToken>>`: it is `None`
/// there, where a bare `Extension<FencingToken>` makes axum answer
/// `500 Internal Server Error` (missing request extension). In tonic, read it
/// with `request.extensions().get::<FencingToken>()`, `None` when unlocked.
/// Pass [`token`](FencingToken::token) with every write to the guarded
/// resource, which rejects tokens lower than the highest it has seen (see
/// `distlock::guide::guarantees`).
///
/// In the layer's other [modes](crate::mode) it names the primitive of the
/// family the request holds: the fair lock, the read-write lock (a read and
/// a write hold both get a token; a writer's is the one a resource checks),
/// or the semaphore of a concurrency limit (the permit's token).
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, as
/// `{"key": "order:42", "token": 7}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct FencingToken {
    /// The lock name, e.g. `order:42`.
    pub key: String,
    /// The fencing token of this hold: strictly increasing from one holder
    /// of the lock to the next.
    pub token: u64,
}

impl FencingToken {
    /// The lock name and token of a hold.
    pub fn new(key: impl Into<String>, token: u64) -> Self {
        FencingToken {
            key: key.into(),
            token,
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_key_and_token() {
        let token = FencingToken::new("order:42", 7);
        let json = serde_json::to_string(&token).unwrap();
        assert_eq!(json, r#"{"key":"order:42","token":7}"#);
        assert_eq!(serde_json::from_str::<FencingToken>(&json).unwrap(), token);
    }
}
