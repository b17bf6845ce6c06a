//! Key extractors: which lock, if any, a request takes.
//!
//! A [`KeyExtractor`] turns a request into a lock name, or `None` for a
//! request that runs without a lock. Closures `Fn(&R) -> Option<String>` are
//! extractors; the built-in ones cover the common cases:
//! [`PathTemplate`] (`/orders/{id}/pay` -> `order:{id}`), [`HeaderKey`] (a
//! header's value) and [`GrpcKey`] (a gRPC method plus a metadata value).
//! [`KeyExtractor::or`] tries a second extractor when the first gives `None`.

use std::fmt;

use http::{HeaderName, Method, Request};

/// Chooses the lock a request takes: `Some(name)` locks `name` (e.g.
/// `"order:42"`) around the request, `None` lets it through without a lock.
///
/// It runs once per request, synchronously, before the lock is taken, in the
/// spirit of tower-http's `MakeRequestId`. Any `Fn(&R) -> Option<String>` is
/// one (annotate the closure's argument type):
///
/// ```
/// use http::Request;
/// use distlock_tower::KeyExtractor;
///
/// let by_tenant = |req: &Request<()>| {
///     let tenant = req.headers().get("x-tenant")?.to_str().ok()?;
///     Some(format!("tenant:{tenant}:import"))
/// };
/// let req = Request::builder().header("x-tenant", "acme").body(()).unwrap();
/// assert_eq!(by_tenant.extract_key(&req).as_deref(), Some("tenant:acme:import"));
/// ```
pub trait KeyExtractor<R> {
    /// The lock name for `request`, or `None` to run it without a lock.
    fn extract_key(&self, request: &R) -> Option<String>;

    /// For a request [`extract_key`](KeyExtractor::extract_key) gave no
    /// name: `Some(what)` when it should have carried one and must be
    /// refused rather than run unlocked, `what` naming the missing part
    /// (`"x-order-id metadata of /orders.v1.Orders/Pay"`). The layer answers
    /// it as an invalid lock name (400, `INVALID_ARGUMENT` with
    /// `distlock-reason: missing-key`) and the handler does not run.
    /// The default: `None`, run it unlocked. [`GrpcKey`] refuses calls of its
    /// method without its metadata.
    fn missing_key(&self, request: &R) -> Option<String> {
        let _ = request;
        None
    }

    /// An extractor that asks `self` first and `other` when `self` gives
    /// `None`. (The built-in extractors have the same method inherently, as
    /// they work for any request body.)
    fn or<E>(self, other: E) -> Or<Self, E>
    where
        Self: Sized,
        E: KeyExtractor<R>,
    {
        Or::new(self, other)
    }
}

/// The `or` combinator of the built-in extractors, which implement
/// [`KeyExtractor`] for every request body type: an inherent method lets
/// the compiler pick the body type from where the extractor is used.
macro_rules! inherent_or {
    ($($ty:ident $(<$($param:ident),+>)?),+) => {$(
        impl$(<$($param),+>)? $ty$(<$($param),+>)? {
            /// An extractor that asks `self` first and `other` when `self`
            /// gives `None`.
            pub fn or<E>(self, other: E) -> Or<Self, E> {
                Or::new(self, other)
            }
        }
    )+};
}

inherent_or!(PathTemplate, HeaderKey, GrpcKey, Or<A, B>);

impl<R, F> KeyExtractor<R> for F
where
    F: Fn(&R) -> Option<String>,
{
    fn extract_key(&self, request: &R) -> Option<String> {
        self(request)
    }
}

/// Two extractors, the second asked when the first gives `None`; made by
/// [`KeyExtractor::or`].
#[derive(Clone, Debug)]
pub struct Or<A, B> {
    first: A,
    second: B,
}

impl<A, B> Or<A, B> {
    /// Asks `first`, then `second` when `first` gives `None`.
    pub fn new(first: A, second: B) -> Self {
        Or { first, second }
    }
}

impl<R, A, B> KeyExtractor<R> for Or<A, B>
where
    A: KeyExtractor<R>,
    B: KeyExtractor<R>,
{
    fn extract_key(&self, request: &R) -> Option<String> {
        self.first
            .extract_key(request)
            .or_else(|| self.second.extract_key(request))
    }

    fn missing_key(&self, request: &R) -> Option<String> {
        self.first
            .missing_key(request)
            .or_else(|| self.second.missing_key(request))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// Locks requests whose path matches a template, on a name built from the
/// path's parameters: `PathTemplate::new("/orders/{id}/pay", "order:{id}")`
/// locks `order:42` for `/orders/42/pay` and lets every other path through.
///
/// A `{name}` in the path stands for one whole, non-empty segment; the rest
/// must match exactly (no trailing slash, case-sensitive). The segment is used
/// as it appears in the URI (not percent-decoded). The lock name may use each
/// parameter any number of times.
///
/// ```
/// use http::{Method, Request};
/// use distlock_tower::{KeyExtractor, PathTemplate};
///
/// let pay = PathTemplate::new("/orders/{id}/pay", "order:{id}").method(Method::POST);
/// let req = |method, uri| Request::builder().method(method).uri(uri).body(()).unwrap();
/// assert_eq!(pay.extract_key(&req(Method::POST, "/orders/42/pay")).as_deref(), Some("order:42"));
/// assert_eq!(pay.extract_key(&req(Method::GET, "/orders/42/pay")), None);
/// assert_eq!(pay.extract_key(&req(Method::POST, "/orders/42")), None);
/// ```
#[derive(Clone)]
pub struct PathTemplate {
    path: Vec<Segment>,
    key: Vec<Segment>,
    source: (String, String),
    methods: Vec<Method>,
}

impl PathTemplate {
    /// A template matching `path` (e.g. `/orders/{id}/pay`) that locks `key`
    /// (e.g. `order:{id}`), for every method (see
    /// [`method`](PathTemplate::method)).
    ///
    /// # Panics
    /// When `path` does not start with `/`, a `{` or `}` is unbalanced, a
    /// parameter is not a whole segment or appears twice, or `key` uses a
    /// parameter the path does not have: a mistake in the program, caught
    /// when the layer is built.
    // A malformed template is a bug in the program (a literal written next to
    // the route), caught once when the layer is built, as `Regex::new(..)`
    // callers unwrap; it never depends on a request.
    #[allow(clippy::panic, clippy::indexing_slicing)]
    pub fn new(path: &str, key: &str) -> Self {
        assert!(
            path.starts_with('/'),
            "path template `{path}` must start with `/`"
        );
        let mut params = Vec::new();
        let segments: Vec<Segment> = path[1..]
            .split('/')
            .map(|segment| match parse_template(segment) {
                Ok(parts) => match parts.as_slice() {
                    [Segment::Param(name)] => {
                        assert!(
                            !params.contains(name),
                            "path template `{path}` uses `{{{name}}}` twice"
                        );
                        params.push(name.clone());
                        Segment::Param(name.clone())
                    }
                    [] => Segment::Literal(String::new()),
                    [Segment::Literal(text)] => Segment::Literal(text.clone()),
                    _ => panic!(
                        "path template `{path}`: a parameter must be a whole segment, got `{segment}`"
                    ),
                },
                Err(reason) => panic!("path template `{path}`: {reason}"),
            })
            .collect();
        let key_parts =
            parse_template(key).unwrap_or_else(|reason| panic!("key template `{key}`: {reason}"));
        for part in &key_parts {
            if let Segment::Param(name) = part {
                assert!(
                    params.contains(name),
                    "key template `{key}` uses `{{{name}}}`, which path template `{path}` does not have"
                );
            }
        }
        PathTemplate {
            path: segments,
            key: key_parts,
            source: (path.to_owned(), key.to_owned()),
            methods: Vec::new(),
        }
    }

    /// Only requests with this method are locked (call it again to allow
    /// several); by default every method is.
    pub fn method(mut self, method: Method) -> Self {
        self.methods.push(method);
        self
    }

    /// The lock name for `path`, when it matches (the method is not checked).
    pub fn key_for_path(&self, path: &str) -> Option<String> {
        let rest = path.strip_prefix('/')?;
        let mut values: Vec<(&str, &str)> = Vec::new();
        let mut segments = rest.split('/');
        for expected in &self.path {
            let segment = segments.next()?;
            match expected {
                Segment::Literal(text) if text == segment => {}
                Segment::Literal(_) => return None,
                Segment::Param(_) if segment.is_empty() => return None,
                Segment::Param(name) => values.push((name, segment)),
            }
        }
        if segments.next().is_some() {
            return None;
        }
        let mut key = String::new();
        for part in &self.key {
            match part {
                Segment::Literal(text) => key.push_str(text),
                Segment::Param(name) => {
                    let (_, value) = values.iter().find(|(param, _)| param == name)?;
                    key.push_str(value);
                }
            }
        }
        Some(key)
    }
}

impl fmt::Debug for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PathTemplate")
            .field("path", &self.source.0)
            .field("key", &self.source.1)
            .field("methods", &self.methods)
            .finish()
    }
}

impl<B> KeyExtractor<Request<B>> for PathTemplate {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        if !self.methods.is_empty() && !self.methods.contains(request.method()) {
            return None;
        }
        self.key_for_path(request.uri().path())
    }
}

/// Splits `template` into literal text and `{name}` parameters.
fn parse_template(template: &str) -> Result<Vec<Segment>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Segment::Literal(rest.to_owned()));
                break;
            }
            Some(at) if rest.as_bytes().get(at) == Some(&b'}') => {
                return Err(format!("unmatched `}}` in `{template}`"));
            }
            Some(at) => {
                if at > 0 {
                    parts.push(Segment::Literal(rest[..at].to_owned()));
                }
                let after = &rest[at + 1..];
                let end = after
                    .find('}')
                    .ok_or_else(|| format!("unclosed `{{` in `{template}`"))?;
                let name = &after[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    return Err(format!(
                        "parameter `{{{name}}}` must be a non-empty name of letters, digits and `_`"
                    ));
                }
                parts.push(Segment::Param(name.to_owned()));
                rest = &after[end + 1..];
            }
        }
    }
    Ok(parts)
}

/// Locks on the value of a request header: `HeaderKey::new("x-account-id")
/// .prefix("account:")` locks `account:7` for a request carrying
/// `x-account-id: 7`, and lets requests without the header through.
///
/// A value that is empty, only whitespace, or not visible ASCII gives `None`
/// (no lock); surrounding whitespace is trimmed.
///
/// ```
/// use http::Request;
/// use distlock_tower::{HeaderKey, KeyExtractor};
///
/// let account = HeaderKey::new("x-account-id").prefix("account:");
/// let req = Request::builder().header("x-account-id", "7").body(()).unwrap();
/// assert_eq!(account.extract_key(&req).as_deref(), Some("account:7"));
/// assert_eq!(account.extract_key(&Request::new(())), None);
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    header: HeaderName,
    prefix: String,
}

impl HeaderKey {
    /// Locks on the value of `header` (case-insensitive), with no prefix.
    ///
    /// # Panics
    /// When `header` is not a valid header name.
    // As `PathTemplate::new`: a bad header name literal is a program bug.
    #[allow(clippy::panic)]
    pub fn new(header: &str) -> Self {
        let header = HeaderName::try_from(header)
            .unwrap_or_else(|err| panic!("`{header}` is not a valid header name: {err}"));
        HeaderKey {
            header,
            prefix: String::new(),
        }
    }

    /// Puts `prefix` before the value in the lock name (e.g. `account:`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    fn key(&self, headers: &http::HeaderMap) -> Option<String> {
        let value = headers.get(&self.header)?.to_str().ok()?.trim();
        if value.is_empty() {
            return None;
        }
        Some(format!("{}{value}", self.prefix))
    }
}

impl<B> KeyExtractor<Request<B>> for HeaderKey {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        self.key(request.headers())
    }
}

/// Locks calls of one gRPC method on a metadata value:
/// `GrpcKey::new("/orders.v1.Orders/Pay", "x-order-id").prefix("order:")`
/// locks `order:42` for a `Pay` call whose metadata has `x-order-id: 42`.
/// Other methods go through unlocked. A call of the method without the
/// metadata (or with a value that is not ASCII) is refused with
/// `INVALID_ARGUMENT` and `distlock-reason: missing-key` before its handler
/// runs, never run unlocked; [`optional`](GrpcKey::optional) lets such
/// calls through unlocked instead (a per-tenant limit that calls without a
/// tenant are exempt from).
///
/// The method is the HTTP/2 path of the call, `/<package>.<Service>/<Method>`.
/// Metadata is sent as HTTP headers, so the same rules as [`HeaderKey`]
/// apply to the value (ASCII metadata only, not `-bin` keys).
///
/// ```
/// use http::Request;
/// use distlock_tower::{GrpcKey, KeyExtractor};
///
/// let pay = GrpcKey::new("/orders.v1.Orders/Pay", "x-order-id").prefix("order:");
/// let call = |path| Request::builder().uri(path).header("x-order-id", "42").body(()).unwrap();
/// assert_eq!(pay.extract_key(&call("/orders.v1.Orders/Pay")).as_deref(), Some("order:42"));
/// assert_eq!(pay.extract_key(&call("/orders.v1.Orders/Status")), None);
///
/// // A Pay call without x-order-id is refused, not run unlocked.
/// let bare = Request::builder().uri("/orders.v1.Orders/Pay").body(()).unwrap();
/// assert_eq!(pay.extract_key(&bare), None);
/// assert!(pay.missing_key(&bare).is_some());
/// assert_eq!(pay.optional().missing_key(&bare), None);
/// ```
#[derive(Clone, Debug)]
pub struct GrpcKey {
    method: String,
    metadata: HeaderKey,
    required: bool,
}

impl GrpcKey {
    /// Locks calls of `method` (e.g. `/orders.v1.Orders/Pay`) on the value
    /// of the ASCII metadata `key`.
    ///
    /// # Panics
    /// When `method` does not look like `/<service>/<method>`, or `key` is
    /// not a valid metadata key.
    pub fn new(method: &str, key: &str) -> Self {
        let well_formed = method
            .strip_prefix('/')
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(service, name)| {
                !service.is_empty() && !name.is_empty() && !name.contains('/')
            });
        assert!(
            well_formed,
            "`{method}` is not a gRPC method path like `/orders.v1.Orders/Pay`"
        );
        assert!(
            !key.ends_with("-bin"),
            "`{key}` is binary metadata; a lock name needs an ASCII metadata value"
        );
        GrpcKey {
            method: method.to_owned(),
            metadata: HeaderKey::new(key),
            required: true,
        }
    }

    /// Lets calls of the method without the metadata through unlocked,
    /// instead of refusing them (`INVALID_ARGUMENT`, the default).
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// Puts `prefix` before the metadata value in the lock name.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.metadata = self.metadata.prefix(prefix);
        self
    }
}

impl<B> KeyExtractor<Request<B>> for GrpcKey {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        if request.uri().path() != self.method {
            return None;
        }
        self.metadata.key(request.headers())
    }

    fn missing_key(&self, request: &Request<B>) -> Option<String> {
        (self.required && request.uri().path() == self.method)
            .then(|| format!("{} metadata of {}", self.metadata.header, self.method))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::builder().uri(uri).body(()).unwrap()
    }

    #[test]
    fn path_template_matches_whole_segments() {
        let t = PathTemplate::new("/orders/{id}/pay", "order:{id}");
        assert_eq!(
            t.key_for_path("/orders/42/pay").as_deref(),
            Some("order:42")
        );
        assert_eq!(
            t.extract_key(&get("/orders/42/pay?x=1")).as_deref(),
            Some("order:42")
        );
        for path in [
            "/orders/42",
            "/orders//pay",
            "/orders/42/pay/",
            "/orders/42/pay/x",
            "/Orders/42/pay",
            "orders/42/pay",
            "/",
        ] {
            assert_eq!(t.key_for_path(path), None, "{path}");
        }
    }

    #[test]
    fn path_template_with_several_parameters() {
        let t = PathTemplate::new("/t/{tenant}/jobs/{job}", "job:{tenant}/{job}:{tenant}");
        assert_eq!(
            t.key_for_path("/t/acme/jobs/7").as_deref(),
            Some("job:acme/7:acme")
        );
        let root = PathTemplate::new("/", "root");
        assert_eq!(root.key_for_path("/").as_deref(), Some("root"));
        assert_eq!(root.key_for_path("/x"), None);
    }

    #[test]
    fn path_template_method_filter() {
        let t = PathTemplate::new("/a/{x}", "a:{x}")
            .method(Method::POST)
            .method(Method::PUT);
        let req = |m: Method| Request::builder().method(m).uri("/a/1").body(()).unwrap();
        assert_eq!(t.extract_key(&req(Method::POST)).as_deref(), Some("a:1"));
        assert_eq!(t.extract_key(&req(Method::PUT)).as_deref(), Some("a:1"));
        assert_eq!(t.extract_key(&req(Method::GET)), None);
    }

    #[test]
    #[should_panic(expected = "does not have")]
    fn key_with_unknown_parameter_panics() {
        PathTemplate::new("/orders/{id}", "order:{order}");
    }

    #[test]
    #[should_panic(expected = "whole segment")]
    fn partial_segment_parameter_panics() {
        PathTemplate::new("/orders/{id}.json", "order:{id}");
    }

    #[test]
    #[should_panic(expected = "unclosed")]
    fn unclosed_brace_panics() {
        PathTemplate::new("/orders/{id", "order");
    }

    #[test]
    #[should_panic(expected = "twice")]
    fn repeated_parameter_panics() {
        PathTemplate::new("/a/{id}/{id}", "a:{id}");
    }

    #[test]
    fn header_key_trims_and_skips_empty() {
        let k = HeaderKey::new("X-Account-Id").prefix("account:");
        let req = |v: &str| {
            Request::builder()
                .header("x-account-id", v)
                .body(())
                .unwrap()
        };
        assert_eq!(k.extract_key(&req(" 7 ")).as_deref(), Some("account:7"));
        assert_eq!(k.extract_key(&req("   ")), None);
        let mut non_ascii = Request::new(());
        non_ascii.headers_mut().insert(
            "x-account-id",
            http::HeaderValue::from_bytes(b"\xe9t\xe9").unwrap(),
        );
        assert_eq!(k.extract_key(&non_ascii), None);
    }

    #[test]
    fn grpc_key_needs_method_and_metadata() {
        let k = GrpcKey::new("/orders.v1.Orders/Pay", "x-order-id").prefix("order:");
        let mut req = get("/orders.v1.Orders/Pay");
        assert_eq!(k.extract_key(&req), None);
        req.headers_mut().insert("x-order-id", "9".parse().unwrap());
        assert_eq!(k.extract_key(&req).as_deref(), Some("order:9"));
    }

    #[test]
    #[should_panic(expected = "not a gRPC method path")]
    fn grpc_key_rejects_bad_method() {
        GrpcKey::new("orders.v1.Orders.Pay", "x-order-id");
    }

    #[test]
    fn or_tries_the_second_extractor() {
        let k = PathTemplate::new("/orders/{id}/pay", "order:{id}")
            .or(PathTemplate::new("/orders/{id}/refund", "order:{id}"))
            .or(|req: &Request<()>| (req.uri().path() == "/batch").then(|| "batch".to_owned()));
        assert_eq!(
            k.extract_key(&get("/orders/1/pay")).as_deref(),
            Some("order:1")
        );
        assert_eq!(
            k.extract_key(&get("/orders/2/refund")).as_deref(),
            Some("order:2")
        );
        assert_eq!(k.extract_key(&get("/batch")).as_deref(), Some("batch"));
        assert_eq!(k.extract_key(&get("/health")), None);
    }
}
