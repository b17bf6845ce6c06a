//! [`FencingToken`]: the request extension that tells a handler which lock it
//! runs under.

/// The lock a request runs under and its fencing token, put in the request's
/// extensions by the HTTP and gRPC flavours of the layer (on by default, see
/// [`LockLayer::fencing_token_extension`](crate::LockLayer::fencing_token_extension)).
///
/// In axum, take it as `Extension<FencingToken>` (or
/// `Option<Extension<FencingToken>>` on a route that may run unlocked); in
/// tonic, read it with `request.extensions().get::<FencingToken>()`. Pass
/// [`token`](FencingToken::token) with every write to the guarded resource,
/// which rejects tokens lower than the highest it has seen (see
/// "Guarantees" in the README).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
