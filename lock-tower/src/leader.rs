//! [`LeaderLayer`]: routes that only the leader of a role serves. A
//! [`LeaderSeat`] tells the layer whether this process leads (the code that
//! campaigns seats its leadership there) and who leads elsewhere; the
//! service lets a request through on the leader, with the term, and answers
//! it itself on a follower (a redirect to the leader, or 503; a gRPC
//! `UNAVAILABLE`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use distlock_core::{CurrentLock, Election, Leader, Leadership, LockError, Observer, Term, Wait};
use http::header::{CONTENT_TYPE, LOCATION, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::grpc::percent_encode;
use crate::http::{retry_after_secs, TEXT_PLAIN};

/// The header a follower's answer names the leader's advertised address in,
/// by default (HTTP header and gRPC metadata alike).
pub const LEADER_HEADER: &str = "x-leader";

/// This process's leadership of one role, as [`LeaderLayer`]s see it:
/// shared (cheap to clone) between the code that campaigns and the layers
/// of the routes only the leader serves.
///
/// Seat the leadership through the seat, in one of two ways:
///
/// - [`run`](LeaderSeat::run): the run loop of
///   [`Election::run`] (campaign, run a leader-only future, re-campaign),
///   for a service that also has leader-only background work;
/// - [`campaign`](LeaderSeat::campaign): one campaign, whose
///   [`Leadership`] the caller keeps (and resigns).
///
/// The seat also watches who leads (an [`Observer`] of the role, started
/// with the seat on a tokio runtime, else at the first request), for the
/// followers' answers.
///
/// # When a request passes
/// A request passes while [`term`](LeaderSeat::term) is `Some`: a term won
/// through this seat whose role lock is still held **by the local lease
/// deadline** (the lock's `is_held`: no loss seen and the lease known to run
/// on this process's clock). A leadership lost by a partition, a pause or a
/// force release stops requests at that deadline, before any other process
/// can have been elected, without waiting for the store or the observer to
/// say so. What no check at the door can cover: a request let in just
/// before the loss runs on (its handler is not cancelled), and a process
/// paused between the check and its write writes late. Fence the handler's
/// writes with the term ([`Term::token`]; `distlock::fence`) for
/// correctness, as every lock's writes.
///
/// For a term seated by [`run`](LeaderSeat::run) the check is the lease's
/// when the run loop's future runs in the role lock's scope (then
/// `distlock::current()` inside it is the role lock); otherwise the seat
/// learns of the loss when the run loop drops the future, which it does as
/// soon as [`Leadership::lost`] resolves (by the local deadline): the
/// window is the time the run loop's task takes to be polled then.
#[derive(Clone)]
pub struct LeaderSeat {
    inner: Arc<SeatInner>,
}

struct SeatInner {
    election: Election,
    /// The name of the role's lock (`leader:<role>`).
    lock_name: String,
    state: Mutex<Seated>,
    observer: OnceLock<Observer>,
}

/// What the seat holds.
#[derive(Default)]
struct Seated {
    /// The term this process leads in, if any (see [`Entry::leads`]).
    entry: Option<Entry>,
    /// The last term this process held through the seat: an observed leader
    /// of that term is this process itself, seen late.
    last_term: Option<u64>,
    /// Identifies entries, so that a finished run-loop term removes its own
    /// entry only.
    next_id: u64,
}

struct Entry {
    term: Term,
    /// The role lock, read through its `is_held` (the local deadline);
    /// `None` for a run-loop term whose future runs outside the lock's scope.
    lock: Option<CurrentLock>,
    id: u64,
}

impl Entry {
    fn leads(&self) -> bool {
        self.lock.as_ref().is_none_or(CurrentLock::is_held)
    }
}

impl fmt::Debug for LeaderSeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSeat")
            .field("role", &self.inner.election.role())
            .field("term", &self.term().map(|term| term.token()))
            .finish()
    }
}

impl LeaderSeat {
    /// The seat of `election`'s role (made with
    /// [`LockClient::election`](distlock_core::LockClient::election); give it
    /// the [`metadata`](Election::metadata) followers redirect to: this
    /// process's advertised base URL, e.g. `http://10.0.0.7:8080`). Starts
    /// watching who leads when called on a tokio runtime.
    pub fn new(election: Election) -> Self {
        let inner = SeatInner {
            lock_name: election.lock_name(),
            election,
            state: Mutex::default(),
            observer: OnceLock::new(),
        };
        let seat = LeaderSeat {
            inner: Arc::new(inner),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            seat.observer();
        }
        seat
    }

    /// The election.
    pub fn election(&self) -> &Election {
        &self.inner.election
    }

    /// The term this process leads the role in, while it does (see
    /// [When a request passes](LeaderSeat#when-a-request-passes)); `None` on
    /// a follower.
    pub fn term(&self) -> Option<Term> {
        let state = self.state();
        state
            .entry
            .as_ref()
            .filter(|entry| entry.leads())
            .map(|entry| entry.term.clone())
    }

    /// Who leads the role, as last observed (`None`: nobody, or not read
    /// yet). A view of a term this process held through the seat and no
    /// longer leads is left out: it is this process itself, seen late.
    pub fn leader(&self) -> Option<Leader> {
        let leader = self.observer().leader()?;
        let state = self.state();
        let own_stale = state.last_term == Some(leader.term)
            && state.entry.as_ref().is_none_or(|entry| !entry.leads());
        (!own_stale).then_some(leader)
    }

    /// Campaigns for the role as [`Election::campaign`] does, and seats the
    /// leadership won: the seat's layers let requests through while it is
    /// held (until it is resigned, dropped or lost).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Election::campaign`]: a campaign dropped before it
    /// won seats nothing.
    pub async fn campaign(&self, wait: impl Into<Wait>) -> Result<Leadership, LockError> {
        let leadership = self.inner.election.campaign(wait).await?;
        let lock = leadership
            .guard()
            .and_then(|guard| guard.in_scope(distlock_core::current));
        // A campaign's term stays seated: its lock's `is_held` ends it.
        if let Some(lock) = lock {
            self.seat(leadership.term_info(), Some(lock));
        }
        Ok(leadership)
    }

    /// Runs `work` only while this process leads, as [`Election::run`]
    /// does (campaign, run, drop the future at a loss, re-campaign after the
    /// back-off, resign at the client's shutdown), and seats each term for
    /// as long as its future runs.
    ///
    /// ```no_run
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LeaderLayer, LeaderSeat};
    ///
    /// # async fn demo(client: LockClient) -> Result<(), distlock_core::LockError> {
    /// let seat = LeaderSeat::new(client.election("scheduler").metadata("http://10.0.0.7:8080"));
    /// let layer = LeaderLayer::new(seat.clone()).redirect();
    /// tokio::spawn(async move {
    ///     seat.run(|term| async move {
    ///         // leader-only background work; every write carries term.token()
    ///         std::future::pending::<()>().await
    ///     })
    ///     .await
    /// });
    /// // Router::new().route("/admin/compact", post(compact)).route_layer(layer)
    /// # let _ = layer; Ok(()) }
    /// ```
    ///
    /// Errors: as [`Election::run`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Election::run`]: dropped, it drops `work`'s future
    /// (unseating its term) and resigns in the background.
    pub async fn run<F, Fut>(&self, mut work: F) -> Result<(), LockError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()>,
    {
        self.inner
            .election
            .run(|term| {
                let seat = self.clone();
                let future = work(term.clone());
                async move {
                    // The role lock, when the run loop polls this future in
                    // its scope.
                    let lock = distlock_core::current().filter(|lock| {
                        lock.key() == seat.inner.lock_name && lock.fencing_token() == term.token()
                    });
                    let _unseat = Unseat {
                        id: seat.seat(term, lock),
                        seat,
                    };
                    future.await
                }
            })
            .await
    }

    /// Seats `term` (replacing an earlier term); returns the entry's id.
    fn seat(&self, term: Term, lock: Option<CurrentLock>) -> u64 {
        let mut state = self.state();
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1);
        state.last_term = Some(term.token());
        state.entry = Some(Entry { term, lock, id });
        id
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Seated> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn observer(&self) -> &Observer {
        self.inner
            .observer
            .get_or_init(|| self.inner.election.observe())
    }
}

/// Unseats a run-loop term when its future ends or is dropped.
struct Unseat {
    seat: LeaderSeat,
    id: u64,
}

impl Drop for Unseat {
    fn drop(&mut self) {
        let mut state = self.seat.state();
        if state
            .entry
            .as_ref()
            .is_some_and(|entry| entry.id == self.id)
        {
            state.entry = None;
        }
    }
}

/// What a follower answers an HTTP request with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FollowerAnswer {
    /// `307 Temporary Redirect` to the leader's advertised address.
    Redirect,
    /// `503 Service Unavailable` with `Retry-After`.
    Unavailable,
    /// A gRPC `UNAVAILABLE` status.
    Grpc,
}

#[derive(Clone, Debug)]
struct LeaderConfig {
    answer: FollowerAnswer,
    retry_after: Option<Duration>,
    term_extension: bool,
    term_header: Option<HeaderName>,
    leader_header: Option<HeaderName>,
}

/// A tower [`Layer`] for routes that only the leader of a role serves, for
/// axum (`Router::route_layer`) and tonic (`Server::builder().layer`).
///
/// Whether this process leads is its [`LeaderSeat`]'s
/// [`term`](LeaderSeat::term): the leadership seated there by the code that
/// campaigns (see the seat for when exactly a request passes).
///
/// - **On the leader** the request goes to the inner service with the
///   [`Term`] in its extensions (`Extension<distlock::Term>` in axum,
///   `request.extensions().get::<Term>()` in tonic; see
///   [`term_extension`](LeaderLayer::term_extension)), and, with
///   [`term_header`](LeaderLayer::term_header), the term in a response
///   header, as [`LockLayer`](crate::LockLayer) passes a lock's fencing
///   token. Pass [`Term::token`] with every write to a fenced store.
/// - **On a follower** the layer answers itself, never calling the inner
///   service: by default `503 Service Unavailable` with `Retry-After: 1`
///   ([`retry_after`](LeaderLayer::retry_after)); with
///   [`redirect`](LeaderLayer::redirect), `307 Temporary Redirect` to the
///   leader (`Location`: the leader's advertised address, its
///   [`metadata`](Election::metadata), followed by the request's path and
///   query; method and body are kept), and 503 when no leader with an
///   address is known (nobody leads, or in the moment after an election);
///   with [`grpc`](LeaderLayer::grpc), a trailers-only `UNAVAILABLE`
///   status. Every follower answer names the known leader's address in the
///   `x-leader` header (or metadata; see
///   [`leader_header`](LeaderLayer::leader_header)) and in its message.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::LockClient;
/// use distlock_tower::{LeaderLayer, LeaderSeat};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let client = LockClient::memory();
/// let seat = LeaderSeat::new(client.election("scheduler").metadata("http://10.0.0.7:8080"));
/// let layer = LeaderLayer::new(seat.clone())
///     .redirect()
///     .retry_after(Some(Duration::from_secs(2)))
///     .term_header(http::HeaderName::from_static("x-leader-term"));
/// assert!(seat.term().is_none()); // a follower until it wins
/// let leadership = seat.campaign(Duration::ZERO).await?;
/// assert_eq!(seat.term().map(|term| term.token()), Some(leadership.term()));
/// leadership.resign().await?;
/// assert!(seat.term().is_none());
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderLayer {
    seat: LeaderSeat,
    config: Arc<LeaderConfig>,
}

impl fmt::Debug for LeaderLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLayer")
            .field("seat", &self.seat)
            .field("config", &self.config)
            .finish()
    }
}

impl LeaderLayer {
    /// A layer for the routes only `seat`'s leader serves: followers answer
    /// 503 with `Retry-After: 1`, the leader's requests carry the [`Term`]
    /// extension, no term header.
    pub fn new(seat: LeaderSeat) -> Self {
        LeaderLayer {
            seat,
            config: Arc::new(LeaderConfig {
                answer: FollowerAnswer::Unavailable,
                retry_after: Some(Duration::from_secs(1)),
                term_extension: true,
                term_header: None,
                leader_header: Some(HeaderName::from_static(LEADER_HEADER)),
            }),
        }
    }

    /// Followers redirect to the leader: `307 Temporary Redirect` with
    /// `Location` = the leader's advertised address (its
    /// [`metadata`](Election::metadata), a base URL such as
    /// `http://10.0.0.7:8080`, a trailing `/` ignored) followed by the
    /// request's path and query. When no leader with an address that makes
    /// a valid `Location` is known, 503 as without it.
    pub fn redirect(mut self) -> Self {
        self.config().answer = FollowerAnswer::Redirect;
        self
    }

    /// Followers answer `503 Service Unavailable` (the default).
    pub fn unavailable(mut self) -> Self {
        self.config().answer = FollowerAnswer::Unavailable;
        self
    }

    /// The gRPC answer, for tonic: a follower answers a trailers-only
    /// `UNAVAILABLE` status (14) whose message names the role and the
    /// leader, with the leader's address in the
    /// [`leader_header`](LeaderLayer::leader_header) metadata. gRPC has no
    /// redirect and no `Retry-After`: a client picks the leader from the
    /// metadata, or retries.
    pub fn grpc(mut self) -> Self {
        self.config().answer = FollowerAnswer::Grpc;
        self
    }

    /// The `Retry-After` of a follower's 503, in whole seconds rounded up,
    /// never 0 (default 1 s); `None` leaves the header out. About the time
    /// an election takes after a leader's loss: a resignation hands over
    /// within a round trip, a dead leader after its lease.
    pub fn retry_after(mut self, after: Option<Duration>) -> Self {
        self.config().retry_after = after;
        self
    }

    /// Puts the [`Term`] in the extensions of each request the leader
    /// serves (default: on).
    pub fn term_extension(mut self, enabled: bool) -> Self {
        self.config().term_extension = enabled;
        self
    }

    /// Adds the term to each response the leader serves, in header `name`
    /// (e.g. `x-leader-term`; in gRPC, response metadata; default: none).
    pub fn term_header(mut self, name: HeaderName) -> Self {
        self.config().term_header = Some(name);
        self
    }

    /// The header (gRPC: metadata) in which a follower's answer names the
    /// leader's advertised address (default `x-leader`); `None` leaves it
    /// out.
    pub fn leader_header(mut self, name: Option<HeaderName>) -> Self {
        self.config().leader_header = name;
        self
    }

    /// The seat.
    pub fn seat(&self) -> &LeaderSeat {
        &self.seat
    }

    fn config(&mut self) -> &mut LeaderConfig {
        Arc::make_mut(&mut self.config)
    }
}

impl<S> Layer<S> for LeaderLayer {
    type Service = LeaderService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LeaderService {
            inner,
            seat: self.seat.clone(),
            config: self.config.clone(),
        }
    }
}

/// The service made by [`LeaderLayer`]: calls the inner service on the
/// leader, answers itself on a follower. Readiness is the inner service's.
#[derive(Clone)]
pub struct LeaderService<S> {
    inner: S,
    seat: LeaderSeat,
    config: Arc<LeaderConfig>,
}

impl<S> LeaderService<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the middleware.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for LeaderService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderService")
            .field("inner", &self.inner)
            .field("seat", &self.seat)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, B, ResBody> Service<Request<B>> for LeaderService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = LeaderFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// On the leader, calls the inner service with the term; on a follower,
    /// answers at once.
    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.seat.term() {
            Some(term) => {
                let token = term.token();
                if self.config.term_extension {
                    request.extensions_mut().insert(term);
                }
                let header = self.config.term_header.clone().map(|name| (name, token));
                LeaderFuture::leading(self.inner.call(request), header)
            }
            None => {
                let leader = self.seat.leader();
                let answer = follower_answer(&self.config, &self.seat, leader.as_ref(), &request);
                LeaderFuture::following(answer)
            }
        }
    }
}

pin_project! {
    /// The response future of [`LeaderService`]: the inner service's on the
    /// leader (with the term header added), the follower's answer
    /// otherwise. Polled again after it completed, it stays pending.
    ///
    /// # Cancel safety
    /// It holds nothing: dropping it drops the inner service's future.
    pub struct LeaderFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        // The leader serves: the inner service's future, and the term
        // header to add.
        Leading {
            #[pin]
            future: F,
            header: Option<(HeaderName, u64)>,
        },
        // A follower answers (until the answer is given).
        Following {
            answer: Option<Response<ResponseBody<B>>>,
        },
    }
}

impl<F, B> LeaderFuture<F, B> {
    fn leading(future: F, header: Option<(HeaderName, u64)>) -> Self {
        LeaderFuture {
            state: State::Leading { future, header },
        }
    }

    fn following(answer: Response<ResponseBody<B>>) -> Self {
        LeaderFuture {
            state: State::Following {
                answer: Some(answer),
            },
        }
    }
}

impl<F, B, E> Future for LeaderFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Leading { future, header } => {
                let response = std::task::ready!(future.poll(cx))?;
                let (mut parts, body) = response.into_parts();
                if let Some((name, token)) = header.take() {
                    parts.headers.insert(name, HeaderValue::from(token));
                }
                Poll::Ready(Ok(Response::from_parts(
                    parts,
                    ResponseBody::inner(body, None),
                )))
            }
            StateProj::Following { answer } => match answer.take() {
                Some(answer) => Poll::Ready(Ok(answer)),
                None => Poll::Pending,
            },
        }
    }
}

impl<F, B> fmt::Debug for LeaderFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Leading { .. } => "leading",
            State::Following { .. } => "following",
        };
        f.debug_tuple("LeaderFuture").field(&state).finish()
    }
}

/// A follower's answer to `request`, naming `leader` (as observed) when
/// known.
fn follower_answer<B, ResBody>(
    config: &LeaderConfig,
    seat: &LeaderSeat,
    leader: Option<&Leader>,
    request: &Request<B>,
) -> Response<ResponseBody<ResBody>> {
    let role = seat.election().role();
    let address = leader
        .and_then(|leader| leader.metadata.as_deref())
        .filter(|address| !address.is_empty());
    let message = match (leader, address) {
        (Some(leader), Some(address)) => format!(
            "this process does not lead role `{role}`; its leader (term {}) is at {address}",
            leader.term
        ),
        (Some(leader), None) => format!(
            "this process does not lead role `{role}`; its leader (term {}) advertised no address",
            leader.term
        ),
        (None, _) => format!("this process does not lead role `{role}`, and no leader is known"),
    };
    tracing::debug!(
        role,
        leader = address,
        "a leader-only request reached a follower"
    );
    let leader_header = config
        .leader_header
        .clone()
        .zip(address.and_then(|address| HeaderValue::from_str(address).ok()));
    let mut response = match config.answer {
        FollowerAnswer::Grpc => grpc_unavailable(&message),
        FollowerAnswer::Redirect => match address.and_then(|a| location(a, request)) {
            Some(location) => {
                let mut response = text(StatusCode::TEMPORARY_REDIRECT, &message);
                response.headers_mut().insert(LOCATION, location);
                response
            }
            None => unavailable(config, &message),
        },
        FollowerAnswer::Unavailable => unavailable(config, &message),
    };
    if let Some((name, value)) = leader_header {
        response.headers_mut().insert(name, value);
    }
    response
}

/// `Location` for `request` on the leader at `address` (a base URL).
fn location<B>(address: &str, request: &Request<B>) -> Option<HeaderValue> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let base = address.trim_end_matches('/');
    HeaderValue::from_str(&format!("{base}{path}")).ok()
}

fn unavailable<B>(config: &LeaderConfig, message: &str) -> Response<ResponseBody<B>> {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, message);
    if let Some(after) = config.retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(after)));
    }
    response
}

fn text<B>(status: StatusCode, message: &str) -> Response<ResponseBody<B>> {
    let mut response = Response::new(ResponseBody::rejection(Bytes::from(format!("{message}\n"))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN));
    response
}

/// A trailers-only gRPC `UNAVAILABLE` (14) with `message`.
fn grpc_unavailable<B>(message: &str) -> Response<ResponseBody<B>> {
    let mut response = Response::new(ResponseBody::rejection(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static("14"));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_joins_the_address_and_the_path_and_query() {
        let request = Request::get("/admin/compact?dry=1").body(()).unwrap();
        assert_eq!(
            location("http://10.0.0.7:8080/", &request).unwrap(),
            "http://10.0.0.7:8080/admin/compact?dry=1"
        );
        assert_eq!(
            location("http://10.0.0.7:8080", &request).unwrap(),
            "http://10.0.0.7:8080/admin/compact?dry=1"
        );
        assert!(location("http://bad\naddress", &request).is_none());
    }
}
