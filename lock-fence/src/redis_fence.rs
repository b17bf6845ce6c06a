//! [`RedisFence`]: claim-on-read fenced reads and writes of Redis keys and
//! hash fields, each one atomic script.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{
    cmd, Arg, Cmd, ErrorKind, FromRedisValue, Script, ServerErrorKind, ToRedisArgs, Value,
};

use crate::error::FenceError;
use crate::key::{fence_key, key_slot};

/// The script behind every operation of [`RedisFence`], for running a
/// fenced command from another client (`redis-cli`, another language).
///
/// `KEYS[1]` is the fence hash ([`RedisFence::fence_key`]), `KEYS[2]` the
/// data key (leave it out for a bare check). `ARGV[1]` is the token in
/// decimal without leading zeros, `ARGV[2]` the fence field (`k` for the
/// whole key, `f:<field>` for a hash field), and `ARGV[3..]` the command to
/// run when the claim holds (none: only claim). The answer is `{1, reply}`
/// when the claim held (and the command ran), or `{0, seen}` when the token
/// is lower than `seen`, the highest token that has claimed the resource;
/// then nothing ran. Tokens are compared as decimal strings (length, then
/// digits), so every `u64` compares exactly.
///
/// From a shell, under `lockctl run` (which exports `LOCK_FENCING_TOKEN`):
///
/// ```sh
/// redis-cli --raw EVAL "$FENCE_SCRIPT" 2 'fence:{report}:report' report \
///     "$LOCK_FENCING_TOKEN" k SET report "$(cat report.txt)"
/// ```
pub const REDIS_SCRIPT: &str = r"
local token, field = ARGV[1], ARGV[2]
local seen = redis.call('HGET', KEYS[1], field)
if seen and (#token < #seen or (#token == #seen and token < seen)) then
  return {0, seen}
end
if seen ~= token then
  redis.call('HSET', KEYS[1], field, token)
end
if #ARGV < 3 then
  return {1, false}
end
return {1, redis.call(unpack(ARGV, 3))}
";

/// The script behind [`RedisFence::run_all`]: several commands under one
/// fence check, in one atomic step, for other clients too.
///
/// `KEYS[1]` is the fence hash ([`RedisFence::fence_key`]), `KEYS[2]` the
/// fenced data key, `KEYS[3..]` every other key the commands touch. All of
/// them must be in the fenced key's cluster slot (the same hash tag, or no
/// other key): the script does not read `KEYS[2..]`, it declares them so
/// that a cluster routes the call and refuses a key of another slot.
/// `ARGV[1]` is the token in decimal without leading zeros, `ARGV[2]` the
/// fence field (`k` for the whole key), `ARGV[3]` the number of commands
/// `n`, then each command as its number of arguments followed by them
/// (`2 GET k 3 RPUSH log x` is `GET k` then `RPUSH log x`). The answer is
/// `{1, {reply 1, ..., reply n}}` when the claim held and every command ran,
/// in order, or `{0, seen}` as for [`REDIS_SCRIPT`], when nothing ran. A
/// malformed command list is an error before the claim. A command that
/// fails stops the script with its error: the commands before it have run
/// (Redis does not roll a script back), and the claim is recorded.
///
/// From a shell (write the report and log it, under `lockctl run`):
///
/// ```sh
/// redis-cli EVAL "$FENCE_RUN_ALL_SCRIPT" 3 'fence:{report}:report' report '{report}:log' \
///     "$LOCK_FENCING_TOKEN" k 2 3 SET report "$(cat report.txt)" 3 RPUSH '{report}:log' written
/// ```
pub const REDIS_RUN_ALL_SCRIPT: &str = r"
local token, field, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not n or n < 0 then
  return redis.error_reply('ERR fence: ARGV[3] is not a number of commands')
end
local at = 4
for _ = 1, n do
  local argc = tonumber(ARGV[at])
  if not argc or argc < 1 then
    return redis.error_reply('ERR fence: ARGV[' .. at .. '] is not a number of arguments')
  end
  at = at + argc + 1
end
if at ~= #ARGV + 1 then
  return redis.error_reply('ERR fence: the commands do not add up to the arguments')
end
local seen = redis.call('HGET', KEYS[1], field)
if seen and (#token < #seen or (#token == #seen and token < seen)) then
  return {0, seen}
end
if seen ~= token then
  redis.call('HSET', KEYS[1], field, token)
end
local replies = {}
at = 4
for i = 1, n do
  local argc = tonumber(ARGV[at])
  replies[i] = redis.call(unpack(ARGV, at + 1, at + argc))
  at = at + argc + 1
end
return {1, replies}
";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REDIS_SCRIPT));

static RUN_ALL_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REDIS_RUN_ALL_SCRIPT));

/// The fence field of a whole key.
const KEY_FIELD: &str = "k";

/// The default prefix of fence keys.
const DEFAULT_PREFIX: &str = "fence:";

/// The shortest timeout of [`RedisFence::replicas`]: 1 ms (`WAIT` with 0
/// would wait forever).
pub const MIN_REPLICAS_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest timeout of [`RedisFence::replicas`]: one day.
pub const MAX_REPLICAS_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Fenced reads and writes of data in a Redis (a single node, or a cluster
/// through its cluster connection), with claim-on-read: every read and write
/// carries the holder's fencing token, is refused with
/// [`FenceError::Stale`] when a higher token has read or written the same
/// resource, and otherwise records its token as the highest seen, in the
/// same script as the read or the write.
///
/// A resource is a whole key (`read`, `write`, `incr_by`, `update`, `run`)
/// or one field of a hash (`read_field`, `write_field`, `incr_field_by`,
/// `update_field`); each has its own fence, so use one or the other for the
/// same data. The fences of key `K` are fields of the hash
/// [`fence_key(K)`](RedisFence::fence_key), `fence:{T}:K`, where `{T}` puts it
/// in `K`'s cluster slot (see the crate docs, "Redis layout"). Fences have no
/// expiry: deleting one lets a stale holder in again.
///
/// `C` is any async connection: a `MultiplexedConnection`, a
/// `ConnectionManager` or a cluster's `ClusterConnection` (cloned per call).
/// With the locks on Redis too, build it on the lock client's data
/// connection (`LockClient::data_connection` in distlock), which goes where
/// the locks go and follows them across a Sentinel failover; add
/// [`replicas`](RedisFence::replicas) so that a failover cannot lose what
/// the fence reported done.
///
/// # Cancel safety
/// Every operation is one script, so dropping its future leaves the resource
/// either untouched or claimed and read or written in full; the caller then
/// does not know which, as after a lost connection. `update` and
/// `update_field` are two scripts: dropped between them, the resource is
/// claimed and unchanged.
#[derive(Debug, Clone)]
pub struct RedisFence<C> {
    conn: C,
    prefix: Arc<str>,
    /// `WAIT` for this many replicas, this long (in ms), after every script.
    replicas: Option<(u32, u64)>,
}

impl<C> RedisFence<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Fences data through `conn`, with fence keys under prefix `fence:`.
    pub fn new(conn: C) -> Self {
        RedisFence {
            conn,
            prefix: Arc::from(DEFAULT_PREFIX),
            replicas: None,
        }
    }

    /// After every fenced operation (reads and checks too: a claim is a
    /// write, and a claim that a failover loses lets a stale holder in
    /// again), waits up to `timeout` for `replicas` replicas to acknowledge
    /// it, with `WAIT` sent in the same round trip as the script (on a
    /// cluster, to the master of the fenced key). An operation that fewer
    /// replicas acknowledged fails with [`FenceError::NotReplicated`]: it ran
    /// on the master, and may or may not survive a failover, so the caller
    /// must not report it done. [`seen`](Self::seen), a plain read that
    /// claims nothing, does not wait.
    ///
    /// Use it with the lock client's `sync_replicas` (its locks and fencing
    /// counters are then replicated as the data is). Replication stays
    /// asynchronous: this makes a lost write an error the caller sees, it
    /// does not make Redis durable (a replica that acknowledged may lose the
    /// write too if it restarts without persistence).
    ///
    /// Refused ([`FenceError::Invalid`]) for 0 replicas, and for a timeout
    /// below [`MIN_REPLICAS_TIMEOUT`] (1 ms) or above
    /// [`MAX_REPLICAS_TIMEOUT`] (one day).
    ///
    /// ```no_run
    /// # fn demo(conn: redis::aio::MultiplexedConnection) -> Result<(), distlock_fence::FenceError> {
    /// use std::time::Duration;
    /// let fence = distlock_fence::RedisFence::new(conn).replicas(1, Duration::from_millis(50))?;
    /// # let _ = fence; Ok(()) }
    /// ```
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Result<Self, FenceError> {
        if replicas == 0 {
            return Err(FenceError::Invalid {
                what: "replicas",
                name: "0".to_owned(),
                reason: "wait for at least one replica (without the option, none is waited for)",
            });
        }
        if !(MIN_REPLICAS_TIMEOUT..=MAX_REPLICAS_TIMEOUT).contains(&timeout) {
            return Err(FenceError::Invalid {
                what: "replicas timeout",
                name: format!("{timeout:?}"),
                reason: "the timeout must be between 1 ms and one day",
            });
        }
        let millis = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.replicas = Some((replicas, millis));
        Ok(self)
    }

    /// Puts the fence keys under `prefix` instead of `fence:`. Refused when
    /// the prefix contains `{` or `}`, which would take the fence out of its
    /// key's cluster slot.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, FenceError> {
        if prefix.contains(['{', '}']) {
            return Err(FenceError::Invalid {
                what: "key prefix",
                name: prefix.to_owned(),
                reason: "a fence key prefix must not contain `{` or `}`",
            });
        }
        self.prefix = Arc::from(prefix);
        Ok(self)
    }

    /// The key of the hash that holds the fences of data key `key`
    /// (`fence:{order:42}:order:42` for `order:42`); in `key`'s cluster slot.
    pub fn fence_key(&self, key: &str) -> String {
        fence_key(&self.prefix, key)
    }

    /// Reads `key` (`GET`) for the holder of `token`, claiming it. A missing
    /// key reads as `nil` (take an `Option<T>`).
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn read<T: FromRedisValue>(&self, key: &str, token: u64) -> Result<T, FenceError> {
        let reply = self
            .eval(key, KEY_FIELD, token, Some(cmd("GET").arg(key)))
            .await?;
        parse(key, reply)
    }

    /// Writes `value` to `key` (`SET`) for the holder of `token`: refused
    /// when a higher token has read or written `key`.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn write<V: ToRedisArgs>(
        &self,
        key: &str,
        token: u64,
        value: V,
    ) -> Result<(), FenceError> {
        self.eval(key, KEY_FIELD, token, Some(cmd("SET").arg(key).arg(value)))
            .await
            .map(drop)
    }

    /// Adds `delta` to the integer at `key` (`INCRBY`, a missing key counts
    /// as 0) for the holder of `token`: a read-modify-write in one script.
    /// Returns the new value.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn incr_by(&self, key: &str, token: u64, delta: i64) -> Result<i64, FenceError> {
        let reply = self
            .eval(
                key,
                KEY_FIELD,
                token,
                Some(cmd("INCRBY").arg(key).arg(delta)),
            )
            .await?;
        parse(key, reply)
    }

    /// A read-modify-write of `key` with a change computed in the client:
    /// a fenced [`read`](Self::read), then a fenced [`write`](Self::write) of
    /// `change(value)`. The write is refused if a newer holder has read or
    /// written `key` in between, so no update is lost. Returns what was
    /// written.
    ///
    /// # Cancel safety
    /// Two scripts: dropped between them, `key` is claimed and unchanged
    /// (see [`RedisFence`]).
    pub async fn update<T, V, F>(&self, key: &str, token: u64, change: F) -> Result<V, FenceError>
    where
        T: FromRedisValue,
        V: ToRedisArgs,
        F: FnOnce(T) -> V,
    {
        let value = change(self.read(key, token).await?);
        self.write(key, token, &value).await?;
        Ok(value)
    }

    /// Reads field `field` of the hash `key` (`HGET`) for the holder of
    /// `token`, claiming that field.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn read_field<T: FromRedisValue>(
        &self,
        key: &str,
        field: &str,
        token: u64,
    ) -> Result<T, FenceError> {
        let reply = self
            .eval_field(key, field, token, cmd("HGET").arg(key).arg(field))
            .await?;
        parse(&field_name(key, field), reply)
    }

    /// Writes field `field` of the hash `key` (`HSET`) for the holder of
    /// `token`.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn write_field<V: ToRedisArgs>(
        &self,
        key: &str,
        field: &str,
        token: u64,
        value: V,
    ) -> Result<(), FenceError> {
        self.eval_field(
            key,
            field,
            token,
            cmd("HSET").arg(key).arg(field).arg(value),
        )
        .await
        .map(drop)
    }

    /// Adds `delta` to field `field` of the hash `key` (`HINCRBY`) for the
    /// holder of `token`, in one script. Returns the new value.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn incr_field_by(
        &self,
        key: &str,
        field: &str,
        token: u64,
        delta: i64,
    ) -> Result<i64, FenceError> {
        let reply = self
            .eval_field(
                key,
                field,
                token,
                cmd("HINCRBY").arg(key).arg(field).arg(delta),
            )
            .await?;
        parse(&field_name(key, field), reply)
    }

    /// [`update`](Self::update) for field `field` of the hash `key`.
    ///
    /// # Cancel safety
    /// Two scripts: dropped between them, the field is claimed and
    /// unchanged (see [`RedisFence`]).
    pub async fn update_field<T, V, F>(
        &self,
        key: &str,
        field: &str,
        token: u64,
        change: F,
    ) -> Result<V, FenceError>
    where
        T: FromRedisValue,
        V: ToRedisArgs,
        F: FnOnce(T) -> V,
    {
        let value = change(self.read_field(key, field, token).await?);
        self.write_field(key, field, token, &value).await?;
        Ok(value)
    }

    /// Runs `command` under the fence of `key`, in the same script as the
    /// claim: it runs only if `token` is not stale for `key`, and nothing
    /// runs between the check and the command. Returns its reply.
    ///
    /// The command may touch `key` and other keys of its cluster slot (keys
    /// with the same hash tag); on a cluster, a key of another slot fails.
    /// It must be a command a script may run (no blocking or subscribing
    /// commands).
    ///
    /// ```no_run
    /// # async fn demo(fence: distlock_fence::RedisFence<redis::aio::MultiplexedConnection>, token: u64)
    /// # -> Result<(), distlock_fence::FenceError> {
    /// // Push to a list and trim it, fenced by the list's key.
    /// let len: i64 = fence.run("events", token, redis::cmd("RPUSH").arg("events").arg("paid")).await?;
    /// # let _ = len; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn run<T: FromRedisValue>(
        &self,
        key: &str,
        token: u64,
        command: &Cmd,
    ) -> Result<T, FenceError> {
        let reply = self.eval(key, KEY_FIELD, token, Some(command)).await?;
        parse(key, reply)
    }

    /// Runs `commands` in order under the fence of `key`, in the same script
    /// as the claim: all of them run if `token` is not stale for `key`, none
    /// of them if it is, and no other client's command runs in between.
    /// Returns their replies as one array (parse it as a tuple or a `Vec`).
    /// For a write that must leave a trace, fenced: set the value and append
    /// to an audit log in one step.
    ///
    /// `keys` are the other keys the commands touch. On a cluster a script
    /// runs on one node, so every one of them must be in `key`'s cluster
    /// slot: give them `key`'s hash tag (`{order:42}:log` for `order:42`,
    /// `{42}:log` for `user:{42}:cart`). A key of another slot is refused
    /// before anything is sent ([`FenceError::Invalid`]), on a single node
    /// too, so that code tested there works on a cluster. A command must be
    /// one a script may run, with at least its name; an empty list only
    /// claims `key` (as [`check`](Self::check)) and returns an empty array.
    ///
    /// If a command fails (a wrong type, say), the script stops there with
    /// its error ([`FenceError::Redis`]): the commands before it have run,
    /// as in a Redis transaction. [`REDIS_RUN_ALL_SCRIPT`] is the script,
    /// with its wire format for other clients.
    ///
    /// ```no_run
    /// # async fn demo(fence: distlock_fence::RedisFence<redis::aio::MultiplexedConnection>, token: u64)
    /// # -> Result<(), distlock_fence::FenceError> {
    /// // Set the balance and append to its audit log, fenced by the balance.
    /// let (previous, entries): (Option<i64>, i64) = fence
    ///     .run_all(
    ///         "balance:7",
    ///         token,
    ///         &["{balance:7}:audit"],
    ///         &[
    ///             redis::cmd("SET").arg("balance:7").arg(120).arg("GET").clone(),
    ///             redis::cmd("RPUSH").arg("{balance:7}:audit").arg(format!("{token}: 120")).clone(),
    ///         ],
    ///     )
    ///     .await?;
    /// # let _ = (previous, entries); Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn run_all<T: FromRedisValue>(
        &self,
        key: &str,
        token: u64,
        keys: &[&str],
        commands: &[Cmd],
    ) -> Result<T, FenceError> {
        let slot = key_slot(key);
        if let Some(other) = keys.iter().find(|other| key_slot(other) != slot) {
            return Err(FenceError::Invalid {
                what: "key",
                name: (*other).to_owned(),
                reason: "every key of a fenced command must be in the fenced key's cluster slot (give it the same hash tag)",
            });
        }
        let mut invocation = Call::new(&RUN_ALL_SCRIPT, REDIS_RUN_ALL_SCRIPT);
        invocation.key(self.fence_key(key));
        invocation.key(key);
        for other in keys {
            invocation.key(*other);
        }
        invocation
            .arg(token.to_string())
            .arg(KEY_FIELD)
            .arg(commands.len());
        for command in commands {
            let args = plain_args(key, command)?;
            if args.is_empty() {
                return Err(FenceError::Invalid {
                    what: "command",
                    name: key.to_owned(),
                    reason: "a command under a fence needs at least its name",
                });
            }
            invocation.arg(args.len());
            for arg in args {
                invocation.arg(arg);
            }
        }
        let reply = self.invoke(key, token, &invocation).await?;
        parse(key, reply)
    }

    /// Claims `key` for `token` without reading or writing it: refused when
    /// a higher token has read or written `key`, else records `token`.
    ///
    /// # Cancel safety
    /// One script: dropped, it ran in full or not at all (see
    /// [`RedisFence`]).
    pub async fn check(&self, key: &str, token: u64) -> Result<(), FenceError> {
        self.eval(key, KEY_FIELD, token, None).await.map(drop)
    }

    /// The highest token that has read or written `key` (0 when none has),
    /// without claiming it: for displays and operators, not for a
    /// read-modify-write.
    ///
    /// # Cancel safety
    /// A plain read: dropping it changes nothing.
    pub async fn seen(&self, key: &str) -> Result<u64, FenceError> {
        let mut conn = self.conn.clone();
        let seen: Option<String> = cmd("HGET")
            .arg(self.fence_key(key))
            .arg(KEY_FIELD)
            .query_async(&mut conn)
            .await
            .map_err(|source| redis_error(key, source))?;
        seen.map_or(Ok(0), |seen| parse_token(key, &seen))
    }

    async fn eval_field(
        &self,
        key: &str,
        field: &str,
        token: u64,
        command: &Cmd,
    ) -> Result<Value, FenceError> {
        let fence_field = format!("f:{field}");
        self.eval(key, &fence_field, token, Some(command))
            .await
            .map_err(|err| rename(err, key, field))
    }

    /// Runs the script: claim `fence_field` of `key`'s fence for `token`,
    /// then `command`; the command's reply.
    async fn eval(
        &self,
        key: &str,
        fence_field: &str,
        token: u64,
        command: Option<&Cmd>,
    ) -> Result<Value, FenceError> {
        let mut invocation = Call::new(&SCRIPT, REDIS_SCRIPT);
        invocation.key(self.fence_key(key));
        invocation.arg(token.to_string()).arg(fence_field);
        if let Some(command) = command {
            invocation.key(key);
            for arg in plain_args(key, command)? {
                invocation.arg(arg);
            }
        }
        self.invoke(key, token, &invocation).await
    }

    /// Runs a script call of the fence's wire format: `{1, reply}` gives
    /// the reply, `{0, seen}` the refusal. With [`replicas`](Self::replicas),
    /// `WAIT` follows the script in the same round trip; its count is
    /// checked unless the script refused a stale token (then nothing ran).
    async fn invoke(&self, key: &str, token: u64, invocation: &Call) -> Result<Value, FenceError> {
        let (reply, acknowledged) = self
            .send(invocation)
            .await
            .map_err(|source| redis_error(key, source))?;
        let value = decode(key, token, reply)?;
        if let (Some((wanted, _)), Some(acknowledged)) = (self.replicas, acknowledged) {
            if acknowledged < u64::from(wanted) {
                return Err(FenceError::NotReplicated {
                    key: key.to_owned(),
                    wanted,
                    acknowledged,
                });
            }
        }
        Ok(value)
    }

    /// Sends the script by its hash (by its text after `NOSCRIPT`: the
    /// server then caches it), followed by `WAIT` with
    /// [`replicas`](Self::replicas); its reply, and how many replicas
    /// acknowledged. The script comes first in the pipeline: a cluster
    /// connection sends a pipeline to the master of its first keyed
    /// command, so `WAIT` runs where the script ran.
    async fn send(&self, invocation: &Call) -> Result<(Value, Option<u64>), redis::RedisError> {
        let mut conn = self.conn.clone();
        // The script, and `WAIT` when the fence waits for replicas, in one round trip;
        // sent again as `EVAL` when the server does not have the script.
        let pipeline = |by_hash| {
            let mut pipe = redis::pipe();
            pipe.add_command(invocation.cmd(by_hash));
            if let Some((replicas, millis)) = self.replicas {
                pipe.cmd("WAIT").arg(replicas).arg(millis);
            }
            pipe
        };
        let replies: Vec<Value> = match pipeline(true).query_async(&mut conn).await {
            Err(err) if is_noscript(&err) => pipeline(false).query_async(&mut conn).await?,
            outcome => outcome?,
        };
        let mut replies = replies.into_iter();
        let reply = replies.next().unwrap_or(Value::Nil);
        let acknowledged = replies.next().map(u64::from_redis_value).transpose()?;
        Ok((reply, acknowledged))
    }
}

/// The reply of a fence script: the command's reply when the claim held,
/// [`FenceError::Stale`] when it did not.
fn decode(key: &str, token: u64, reply: Value) -> Result<Value, FenceError> {
    let mut items = match reply {
        Value::Array(items) if items.len() == 2 => items.into_iter(),
        other => return Err(reply_error(key, format!("not {{flag, value}}: {other:?}"))),
    };
    match (items.next(), items.next()) {
        (Some(Value::Int(1)), Some(value)) => Ok(value),
        (Some(Value::Int(0)), Some(seen)) => {
            let seen =
                String::from_redis_value(seen).map_err(|err| reply_error(key, err.to_string()))?;
            Err(FenceError::Stale {
                key: key.to_owned(),
                token,
                seen: parse_token(key, &seen)?,
            })
        }
        (flag, _) => Err(reply_error(key, format!("unknown flag {flag:?}"))),
    }
}

/// Whether `err` is `NOSCRIPT`: the server does not have the script (it
/// restarted, was promoted, or its scripts were flushed).
fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || err.code() == Some("NOSCRIPT")
}

/// One call of a fence script: its keys and arguments, sent as `EVALSHA`
/// (or, after `NOSCRIPT`, `EVAL`).
struct Call {
    script: &'static Script,
    code: &'static str,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    fn new(script: &'static Script, code: &'static str) -> Self {
        Call {
            script,
            code,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    fn key(&mut self, key: impl Into<String>) -> &mut Self {
        self.keys.push(key.into());
        self
    }

    fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// The command: `EVALSHA <hash>` when `by_hash`, else `EVAL <text>`.
    fn cmd(&self, by_hash: bool) -> Cmd {
        let mut call = if by_hash {
            let mut call = cmd("EVALSHA");
            call.arg(self.script.get_hash());
            call
        } else {
            let mut call = cmd("EVAL");
            call.arg(self.code);
            call
        };
        call.arg(self.keys.len());
        for key in &self.keys {
            call.arg(key.as_str());
        }
        for arg in &self.args {
            call.arg(arg.as_slice());
        }
        call
    }
}

/// The arguments of `command`, refused when one is not a plain argument.
fn plain_args<'a>(key: &str, command: &'a Cmd) -> Result<Vec<&'a [u8]>, FenceError> {
    command
        .args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => Ok(bytes),
            _ => Err(FenceError::Invalid {
                what: "command",
                name: key.to_owned(),
                reason: "only plain arguments can run under a fence (no cursor)",
            }),
        })
        .collect()
}

/// The name of a hash field's resource in errors: `key#field`.
fn field_name(key: &str, field: &str) -> String {
    format!("{key}#{field}")
}

/// An error about `key` made about its field `field`.
fn rename(err: FenceError, key: &str, field: &str) -> FenceError {
    let name = field_name(key, field);
    match err {
        FenceError::Stale { token, seen, .. } => FenceError::Stale {
            key: name,
            token,
            seen,
        },
        FenceError::Redis { source, .. } => FenceError::Redis { key: name, source },
        FenceError::Reply { detail, .. } => FenceError::Reply { key: name, detail },
        other => other,
    }
}

fn parse<T: FromRedisValue>(key: &str, value: Value) -> Result<T, FenceError> {
    T::from_redis_value(value).map_err(|err| reply_error(key, err.to_string()))
}

fn parse_token(key: &str, text: &str) -> Result<u64, FenceError> {
    text.parse()
        .map_err(|_| reply_error(key, format!("the fence holds {text:?}, not a token")))
}

fn redis_error(key: &str, source: redis::RedisError) -> FenceError {
    FenceError::Redis {
        key: key.to_owned(),
        source,
    }
}

fn reply_error(key: &str, detail: String) -> FenceError {
    FenceError::Reply {
        key: key.to_owned(),
        detail,
    }
}
