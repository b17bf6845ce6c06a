//! Parsing of the attribute's arguments (the options of [`OPTIONS`]) and the
//! checks between them.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr, Path, Token};

/// One option of the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Key,
    Keys,
    Wait,
    Lease,
    AtLeast,
    Fair,
    Read,
    Write,
    Permits,
    Take,
    Leader,
    OnBusy,
    Client,
    Crate,
    AbortOnLost,
}

/// Every option of the attribute by name, in the order messages list them:
/// the one table the parser and the "expected one of" message read, and the
/// documentation's tables are checked against (see the tests).
const OPTIONS: [(&str, Opt); 15] = [
    ("key", Opt::Key),
    ("keys", Opt::Keys),
    ("wait", Opt::Wait),
    ("lease", Opt::Lease),
    ("at_least", Opt::AtLeast),
    ("fair", Opt::Fair),
    ("read", Opt::Read),
    ("write", Opt::Write),
    ("permits", Opt::Permits),
    ("take", Opt::Take),
    ("leader", Opt::Leader),
    ("on_busy", Opt::OnBusy),
    ("client", Opt::Client),
    ("crate", Opt::Crate),
    ("abort_on_lost", Opt::AbortOnLost),
];

impl Opt {
    /// The option called `name`, if there is one.
    fn named(name: &str) -> Option<Self> {
        OPTIONS
            .iter()
            .find(|(option, _)| *option == name)
            .map(|&(_, opt)| opt)
    }
}

/// `` `key`, `keys`, ... `` for messages.
fn option_list() -> String {
    OPTIONS
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Names users bring from other lock libraries (Redisson's `waitTime` and
/// `leaseTime`, ShedLock's `lockAtMostFor`, lock4j's `acquireTimeout`, ...)
/// or guess, and the option that does it here, with what that option is.
/// Compared with underscores removed and in lower case.
const ALIASES: [(&str, &str, &str); 23] = [
    ("timeout", "wait", "how long a call waits for a busy lock"),
    ("waittime", "wait", "how long a call waits for a busy lock"),
    (
        "waittimeout",
        "wait",
        "how long a call waits for a busy lock",
    ),
    (
        "acquiretimeout",
        "wait",
        "how long a call waits for a busy lock",
    ),
    (
        "locktimeout",
        "wait",
        "how long a call waits for a busy lock",
    ),
    (
        "leasetime",
        "lease",
        "a fixed lease, not renewed by the watchdog",
    ),
    (
        "leaseduration",
        "lease",
        "a fixed lease, not renewed by the watchdog",
    ),
    ("ttl", "lease", "a fixed lease, not renewed by the watchdog"),
    (
        "expire",
        "lease",
        "a fixed lease, not renewed by the watchdog",
    ),
    (
        "expiry",
        "lease",
        "a fixed lease, not renewed by the watchdog",
    ),
    (
        "lockatmostfor",
        "lease",
        "a fixed lease, not renewed by the watchdog",
    ),
    (
        "lockatleastfor",
        "at_least",
        "the minimum hold of a scheduled job's lock",
    ),
    (
        "minhold",
        "at_least",
        "the minimum hold of a scheduled job's lock",
    ),
    (
        "holdatleast",
        "at_least",
        "the minimum hold of a scheduled job's lock",
    ),
    (
        "name",
        "key",
        "the lock name, a template such as `\"order:{id}\"`",
    ),
    (
        "lockname",
        "key",
        "the lock name, a template such as `\"order:{id}\"`",
    ),
    (
        "fairness",
        "fair",
        "the fair lock, granted in arrival order",
    ),
    ("krate", "crate", "the path of the `distlock` crate"),
    ("cratename", "crate", "the path of the `distlock` crate"),
    (
        "onlost",
        "abort_on_lost",
        "cancel the body when the lease is lost",
    ),
    (
        "role",
        "leader",
        "run the function only on the role's leader",
    ),
    (
        "leaderonly",
        "leader",
        "run the function only on the role's leader",
    ),
    (
        "election",
        "leader",
        "run the function only on the role's leader",
    ),
];

/// The message for an unknown option `name`: the option it most likely
/// means, when one stands out, and the valid ones.
fn unknown_option(name: &str) -> String {
    let normal = normalized(name);
    let hint = ALIASES
        .iter()
        .find(|(alias, _, _)| *alias == normal)
        .map(|(_, option, what)| format!(" did you mean `{option}` ({what})?"))
        .or_else(|| {
            // A typo: the nearest option within a third of the name's length.
            let most = (normal.len() / 3).max(1);
            OPTIONS
                .iter()
                .map(|(option, _)| (edit_distance(&normal, &normalized(option)), *option))
                .filter(|(distance, _)| *distance <= most)
                .min_by_key(|(distance, _)| *distance)
                .map(|(_, option)| format!(" did you mean `{option}`?"))
        })
        .unwrap_or_default();
    format!(
        "unknown option `{name}`;{hint} expected one of {}",
        option_list()
    )
}

/// `name` in lower case without underscores: `lease_time`, `leaseTime` and
/// `LEASETIME` are the same guess.
fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The edit distance between `a` and `b` in characters, a swap of two
/// neighbours counting as one edit (optimal string alignment), so that
/// `wiat` is one edit from `wait`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // rows[i][j]: the distance between the first i of `a` and the first j of `b`.
    let mut rows: Vec<Vec<usize>> = Vec::with_capacity(a.len() + 1);
    rows.push((0..=b.len()).collect());
    for (i, ca) in a.iter().enumerate() {
        let mut row = Vec::with_capacity(b.len() + 1);
        row.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let at = |row: &[usize], k: usize| row.get(k).copied().unwrap_or(usize::MAX);
            let above = rows.last().map_or(&[][..], Vec::as_slice);
            let mut best = at(above, j)
                .saturating_add(usize::from(ca != cb))
                .min(at(above, j + 1).saturating_add(1))
                .min(at(&row, j).saturating_add(1));
            let swapped = i > 0 && j > 0 && a.get(i - 1) == Some(cb) && b.get(j - 1) == Some(ca);
            if swapped {
                let two_above = rows.len().checked_sub(2).and_then(|k| rows.get(k));
                let two_above = two_above.map_or(&[][..], Vec::as_slice);
                best = best.min(at(two_above, j - 1).saturating_add(1));
            }
            row.push(best);
        }
        rows.push(row);
    }
    rows.last().and_then(|row| row.last()).copied().unwrap_or(0)
}

/// The lock's own range of fixed leases (`distlock_core::MIN_LEASE..=MAX_LEASE`),
/// checked here so that a bad literal fails the build.
const MIN_LEASE: Duration = Duration::from_millis(10);
const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// A value given as a literal (checked while compiling) or as an expression
/// of the option's type, evaluated at each call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Setting<T> {
    Literal(T),
    Runtime(Box<Expr>),
}

/// The parsed `wait = ...` argument: a literal checked while compiling, or
/// an expression. Not a vocabulary of its own: code generation turns it into
/// the runtime's `Wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitArg {
    Once,
    For(Duration),
    Forever,
    /// An expression of type `Duration` (zero tries once).
    Runtime(Expr),
}

/// Which member of the lock family the function takes.
pub(crate) enum Kind {
    Plain,
    Fair,
    Read,
    Write,
    Permits {
        total: Setting<u32>,
        take: Setting<u32>,
    },
    /// `leader = "role"`: the role's leadership (its key template is the
    /// role's name).
    Leader,
}

/// What to do when the lock cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    Error,
    Skip,
}

/// The parsed arguments.
pub(crate) struct Args {
    /// The key templates (one for `key`, any number for `keys`).
    pub(crate) keys: Vec<LitStr>,
    /// Whether they came as `keys = [...]`: several plain locks together.
    pub(crate) multi: bool,
    pub(crate) kind: Kind,
    pub(crate) wait: WaitArg,
    pub(crate) lease: Option<Setting<Duration>>,
    pub(crate) at_least: Option<Setting<Duration>>,
    pub(crate) on_busy: OnBusy,
    /// The `on_busy` value's span, for errors about the return type.
    pub(crate) on_busy_span: Option<Span>,
    pub(crate) client: Option<Expr>,
    pub(crate) krate: Option<Path>,
    /// Set when `abort_on_lost` was given: the token's span.
    pub(crate) abort_on_lost: Option<Span>,
}

/// One `name` or `name = value` item.
struct Item {
    name: Ident,
    value: Option<Value>,
}

enum Value {
    Str(LitStr),
    Strs(Vec<LitStr>),
    Expr(Expr),
}

impl Parse for Item {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // `crate` is a keyword: accept any identifier here.
        let name = Ident::parse_any(input)?;
        if !input.peek(Token![=]) {
            return Ok(Item { name, value: None });
        }
        input.parse::<Token![=]>()?;
        let value = if input.peek(LitStr) {
            Value::Str(input.parse()?)
        } else if input.peek(syn::token::Bracket) {
            let content;
            syn::bracketed!(content in input);
            let strs = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)?;
            Value::Strs(strs.into_iter().collect())
        } else {
            Value::Expr(input.parse()?)
        };
        Ok(Item {
            name,
            value: Some(value),
        })
    }
}

/// What the options said, before the checks between them.
#[derive(Default)]
struct Seen {
    /// `keys = [...]`'s name.
    keys: Option<Ident>,
    /// The first of `fair`, `read`, `write`, `permits` given.
    kind: Option<Ident>,
    /// `permits`' value, when valid.
    permits: Option<Setting<u32>>,
    /// Whether `permits` was given at all (valid or not).
    permits_named: bool,
    /// `take`'s name, value and the value's span.
    take: Option<(Ident, Setting<u32>, Span)>,
    /// `lease`'s literal, for the check of `at_least`.
    lease_literal: Option<(Duration, LitStr)>,
    /// `at_least`'s name, and its literal when it is one.
    at_least: Option<(Ident, Option<(Duration, LitStr)>)>,
    /// `lease`'s name.
    lease: Option<Ident>,
    /// `leader`'s name.
    leader: Option<Ident>,
}

impl Args {
    /// Parses the attribute's arguments; every problem found is reported,
    /// each at its own token.
    pub(crate) fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let items = Punctuated::<Item, Token![,]>::parse_terminated(input)?;
        let mut errors: Option<syn::Error> = None;
        let mut push = |err: syn::Error| match &mut errors {
            Some(errors) => errors.combine(err),
            None => errors = Some(err),
        };
        let mut args = Args {
            keys: Vec::new(),
            multi: false,
            kind: Kind::Plain,
            wait: WaitArg::Once,
            lease: None,
            at_least: None,
            on_busy: OnBusy::Error,
            on_busy_span: None,
            client: None,
            krate: None,
            abort_on_lost: None,
        };
        let mut seen = Seen::default();
        let mut names: Vec<String> = Vec::new();
        for item in items {
            let name = item.name.to_string();
            if names.contains(&name) {
                push(syn::Error::new(
                    item.name.span(),
                    format!("duplicate option `{name}`"),
                ));
                continue;
            }
            names.push(name.clone());
            let Some(opt) = Opt::named(&name) else {
                push(syn::Error::new(item.name.span(), unknown_option(&name)));
                continue;
            };
            if let Err(err) = args.apply(opt, item, &mut seen) {
                push(err);
            }
        }
        let named_a_key = names
            .iter()
            .any(|name| matches!(Opt::named(name), Some(Opt::Key | Opt::Keys | Opt::Leader)));
        if args.keys.is_empty() && !named_a_key {
            push(syn::Error::new(
                Span::call_site(),
                "missing option `key`: say which lock to take, e.g. `key = \"order:{id}\"`",
            ));
        }
        if let Err(err) = args.check(seen) {
            push(err);
        }
        match errors {
            Some(errors) => Err(errors),
            None => Ok(args),
        }
    }

    fn apply(&mut self, opt: Opt, item: Item, seen: &mut Seen) -> syn::Result<()> {
        let span = item.name.span();
        match opt {
            Opt::Leader if !self.keys.is_empty() => {
                let key = if self.multi { "keys" } else { "key" };
                Err(syn::Error::new(span, leader_conflict("leader", key)))
            }
            Opt::Key | Opt::Keys if seen.leader.is_some() => Err(syn::Error::new(
                span,
                leader_conflict(&item.name.to_string(), "leader"),
            )),
            Opt::Key | Opt::Keys if !self.keys.is_empty() => Err(syn::Error::new(
                span,
                "give either `key` or `keys`, not both",
            )),
            Opt::Key => {
                self.keys.push(string_value(&item.name, item.value)?);
                Ok(())
            }
            Opt::Keys => match item.value {
                Some(Value::Strs(strs)) if !strs.is_empty() => {
                    self.keys = strs;
                    self.multi = true;
                    seen.keys = Some(item.name);
                    Ok(())
                }
                Some(Value::Strs(_)) => Err(syn::Error::new(
                    span,
                    "`keys` needs at least one key template",
                )),
                _ => Err(syn::Error::new(
                    span,
                    "expected `keys = [\"template\", ...]`",
                )),
            },
            Opt::Wait => {
                self.wait = match duration_value(&item.name, item.value)? {
                    Setting::Runtime(expr) => WaitArg::Runtime(*expr),
                    Setting::Literal(lit) => match lit.value().trim() {
                        "forever" => WaitArg::Forever,
                        text => match duration(&lit, text, true)? {
                            wait if wait.is_zero() => WaitArg::Once,
                            wait => WaitArg::For(wait),
                        },
                    },
                };
                Ok(())
            }
            Opt::Lease => {
                seen.lease = Some(item.name.clone());
                self.lease = Some(match duration_value(&item.name, item.value)? {
                    Setting::Runtime(expr) => Setting::Runtime(expr),
                    Setting::Literal(lit) => {
                        let lease = duration(&lit, lit.value().trim(), false)?;
                        if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
                            return Err(syn::Error::new(
                                lit.span(),
                                "a lease must be between 10ms and 365days (leave `lease` out for a watchdog-renewed lock)",
                            ));
                        }
                        seen.lease_literal = Some((lease, lit));
                        Setting::Literal(lease)
                    }
                });
                Ok(())
            }
            Opt::AtLeast => {
                let (setting, literal) = match duration_value(&item.name, item.value)? {
                    Setting::Runtime(expr) => (Setting::Runtime(expr), None),
                    Setting::Literal(lit) => {
                        let at_least = duration(&lit, lit.value().trim(), false)?;
                        if at_least > MAX_LEASE {
                            return Err(syn::Error::new(
                                lit.span(),
                                "a minimum hold must be at most 365days (no lock is held longer)",
                            ));
                        }
                        (Setting::Literal(at_least), Some((at_least, lit)))
                    }
                };
                self.at_least = Some(setting);
                seen.at_least = Some((item.name, literal));
                Ok(())
            }
            Opt::Fair | Opt::Read | Opt::Write => {
                if item.value.is_some() {
                    let name = &item.name;
                    return Err(syn::Error::new(
                        span,
                        format!("`{name}` takes no value: write `{name}` alone"),
                    ));
                }
                self.kind = match opt {
                    Opt::Fair => Kind::Fair,
                    Opt::Read => Kind::Read,
                    _ => Kind::Write,
                };
                kind_once(seen, item.name)
            }
            Opt::Permits => {
                seen.permits_named = true;
                let (total, value_span) = count_value(&item.name, item.value, "permits = 5")?;
                if let Setting::Literal(0) = total {
                    return Err(syn::Error::new(
                        value_span,
                        "`permits = 0`: a semaphore needs at least one permit, or no call would ever run; give the number of calls that may run at once",
                    ));
                }
                seen.permits = Some(total);
                kind_once(seen, item.name)
            }
            Opt::Take => {
                let (take, value_span) = count_value(&item.name, item.value, "take = 2")?;
                if let Setting::Literal(0) = take {
                    return Err(syn::Error::new(
                        value_span,
                        "`take = 0`: a call must take at least one permit; leave `take` out to take one",
                    ));
                }
                seen.take = Some((item.name, take, value_span));
                Ok(())
            }
            Opt::Leader => {
                self.keys.push(string_value(&item.name, item.value)?);
                self.kind = Kind::Leader;
                seen.leader = Some(item.name.clone());
                kind_once(seen, item.name)
            }
            Opt::OnBusy => {
                let ident = match item.value {
                    Some(Value::Expr(Expr::Path(path))) => path.path.get_ident().cloned(),
                    _ => None,
                };
                match ident {
                    Some(ident) if ident == "error" || ident == "skip" => {
                        self.on_busy = if ident == "error" {
                            OnBusy::Error
                        } else {
                            OnBusy::Skip
                        };
                        self.on_busy_span = Some(ident.span());
                        Ok(())
                    }
                    Some(other) => Err(syn::Error::new(
                        other.span(),
                        format!("unknown `on_busy` value `{other}`; expected `error` or `skip`"),
                    )),
                    None => Err(syn::Error::new(
                        span,
                        "expected `on_busy = error` or `on_busy = skip`",
                    )),
                }
            }
            Opt::Client => match item.value {
                Some(Value::Expr(expr)) => {
                    self.client = Some(expr);
                    Ok(())
                }
                _ => Err(syn::Error::new(
                    span,
                    "expected `client = <expression giving a LockClient or &LockClient>`",
                )),
            },
            Opt::Crate => {
                let lit = string_value(&item.name, item.value)?;
                self.krate = Some(lit.parse().map_err(|_| {
                    syn::Error::new(lit.span(), "expected a path, e.g. `crate = \"my_locks\"`")
                })?);
                Ok(())
            }
            Opt::AbortOnLost => match item.value {
                None => {
                    self.abort_on_lost = Some(span);
                    Ok(())
                }
                Some(_) => Err(syn::Error::new(span, "`abort_on_lost` takes no value")),
            },
        }
    }

    /// The checks between options, once all are known.
    fn check(&mut self, seen: Seen) -> syn::Result<()> {
        let mut errors: Option<syn::Error> = None;
        let mut push = |err: syn::Error| match &mut errors {
            Some(errors) => errors.combine(err),
            None => errors = Some(err),
        };
        match (seen.permits, seen.take) {
            (Some(total), take) => {
                let take = match take {
                    Some((_, take, span)) => {
                        if let (Setting::Literal(total), Setting::Literal(take)) = (&total, &take) {
                            if take > total {
                                push(syn::Error::new(
                                    span,
                                    format!(
                                        "`take = {take}` is more than `permits = {total}`: the call would never get the lock; take at most {total}"
                                    ),
                                ));
                            }
                        }
                        take
                    }
                    None => Setting::Literal(1),
                };
                self.kind = Kind::Permits { total, take };
            }
            (None, Some((take, _, _))) if !seen.permits_named => push(syn::Error::new(
                take.span(),
                "`take` needs `permits = N`: it says how many of the semaphore's N permits a call takes; add `permits` or remove `take`",
            )),
            (None, _) => {}
        }
        if let Some(leader) = &seen.leader {
            if let Some(lease) = &seen.lease {
                push(syn::Error::new(
                    lease.span(),
                    format!(
                        "`{lease}` does not apply to `{leader}`: a term is held in watchdog mode with the client's lease (`LockClient::builder().lease(..)`), renewed while the function runs; remove `{lease}`"
                    ),
                ));
            }
            if let Some((at_least, _)) = &seen.at_least {
                push(syn::Error::new(
                    at_least.span(),
                    format!(
                        "`{at_least}` does not apply to `{leader}`: a term ends when the function returns (the role is resigned, a follower takes over at once); remove `{at_least}`"
                    ),
                ));
            }
        }
        if let (Some(keys), Some(kind)) = (&seen.keys, &seen.kind) {
            push(syn::Error::new(
                kind.span(),
                format!(
                    "`{kind}` locks one key, and `{keys} = [...]` names several: use `key = \"...\"` with `{kind}`, or drop `{kind}` to take several plain locks together"
                ),
            ));
        }
        if let Some((at_least, literal)) = &seen.at_least {
            if let Some(keys) = &seen.keys {
                push(syn::Error::new(
                    at_least.span(),
                    format!(
                        "`{at_least}` needs one key, and `{keys} = [...]` names several: use `key = \"...\"` for a scheduled job"
                    ),
                ));
            }
            // (With `leader`, both are refused above: no third message.)
            if let (Some((at_least, at_least_lit)), Some((lease, lease_lit)), None) =
                (literal, &seen.lease_literal, &seen.leader)
            {
                if at_least > lease {
                    push(syn::Error::new(
                        at_least_lit.span(),
                        format!(
                            "`at_least = {}` is longer than `lease = {}`: the lock would expire before its minimum hold; make the lease (ShedLock's lockAtMostFor) at least as long, or `at_least` shorter",
                            at_least_lit.token(),
                            lease_lit.token()
                        ),
                    ));
                }
            }
        }
        match errors {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}

/// The message for `option` given with `other`, where one of them is
/// `leader`.
fn leader_conflict(option: &str, other: &str) -> String {
    format!(
        "`{option}` conflicts with `{other}`: `leader = \"role\"` runs the function only on the role's leader, taking the role's own lock instead of a `key`; give one of `key`, `keys` or `leader`"
    )
}

/// Records `name` as the function's kind of lock; an error at `name` when
/// another kind was given before.
fn kind_once(seen: &mut Seen, name: Ident) -> syn::Result<()> {
    match &seen.kind {
        Some(first) => Err(syn::Error::new(
            name.span(),
            format!(
                "`{name}` conflicts with `{first}`: a function takes one kind of lock, plain (the default), `fair`, `read`, `write`, `permits = N` or `leader = \"role\"`; keep one"
            ),
        )),
        None => {
            seen.kind = Some(name);
            Ok(())
        }
    }
}

/// The string literal of `name = "..."`.
fn string_value(name: &Ident, value: Option<Value>) -> syn::Result<LitStr> {
    match value {
        Some(Value::Str(lit)) => Ok(lit),
        Some(Value::Strs(_)) if name == "key" => Err(syn::Error::new(
            name.span(),
            "`key` takes one template; use `keys = [...]` for several",
        )),
        _ => Err(syn::Error::new(
            name.span(),
            format!("expected `{name} = \"...\"`"),
        )),
    }
}

/// A duration option: a humantime string literal, or an expression of type
/// `Duration`.
fn duration_value(name: &Ident, value: Option<Value>) -> syn::Result<Setting<LitStr>> {
    let expected = || {
        format!(
            "expected `{name} = \"10s\"` (a duration checked while compiling) or `{name} = <expression of type std::time::Duration>` (evaluated at each call)"
        )
    };
    match value {
        Some(Value::Str(lit)) => Ok(Setting::Literal(lit)),
        Some(Value::Expr(Expr::Lit(lit))) => match lit.lit {
            Lit::Str(lit) => Ok(Setting::Literal(lit)),
            other => Err(syn::Error::new(other.span(), expected())),
        },
        Some(Value::Expr(expr)) => Ok(Setting::Runtime(Box::new(expr))),
        Some(Value::Strs(_)) | None => Err(syn::Error::new(name.span(), expected())),
    }
}

/// A count option (`permits`, `take`): a `u32` literal, or an expression of
/// type `u32`.
/// Returns the value's span too.
fn count_value(
    name: &Ident,
    value: Option<Value>,
    example: &str,
) -> syn::Result<(Setting<u32>, Span)> {
    let expected = || {
        format!(
            "expected `{example}` (a number checked while compiling) or `{name} = <expression of type u32>` (evaluated at each call)"
        )
    };
    match value {
        Some(Value::Expr(Expr::Lit(lit))) => match &lit.lit {
            Lit::Int(int) if matches!(int.suffix(), "" | "u32") => int
                .base10_parse::<u32>()
                .map(|n| (Setting::Literal(n), int.span()))
                .map_err(|_| {
                    syn::Error::new(
                        int.span(),
                        format!("`{name} = {int}` does not fit a u32: {}", expected()),
                    )
                }),
            other => Err(syn::Error::new(other.span(), expected())),
        },
        Some(Value::Expr(Expr::Unary(unary)))
            if matches!(unary.op, syn::UnOp::Neg(_)) && matches!(&*unary.expr, Expr::Lit(_)) =>
        {
            Err(syn::Error::new(
                unary.span(),
                format!("`{name}` cannot be negative: {}", expected()),
            ))
        }
        Some(Value::Expr(expr)) => {
            let span = expr.span();
            Ok((Setting::Runtime(Box::new(expr)), span))
        }
        Some(Value::Str(lit)) => Err(syn::Error::new(lit.span(), expected())),
        Some(Value::Strs(_)) | None => Err(syn::Error::new(name.span(), expected())),
    }
}

/// A humantime duration such as `500ms`, `10s` or `1m 30s`.
fn duration(lit: &LitStr, text: &str, forever: bool) -> syn::Result<Duration> {
    humantime::parse_duration(text).map_err(|err| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid duration `{text}`: {err}; expected e.g. \"500ms\", \"10s\", \"1m 30s\"{}",
                if forever { " or \"forever\"" } else { "" }
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<Args> {
        syn::parse::Parser::parse2(Args::parse, tokens)
    }

    fn error(tokens: proc_macro2::TokenStream) -> String {
        match parse(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(err) => err
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn unknown_options_suggest_the_one_meant() {
        let cases = [
            ("timeout", Some("`wait`")),
            ("waitTime", Some("`wait`")),
            ("wait_time", Some("`wait`")),
            ("acquireTimeout", Some("`wait`")),
            ("lease_time", Some("`lease`")),
            ("leaseTime", Some("`lease`")),
            ("ttl", Some("`lease`")),
            ("lockAtMostFor", Some("`lease`")),
            ("lockAtLeastFor", Some("`at_least`")),
            ("name", Some("`key`")),
            ("krate", Some("`crate`")),
            // Typos: the nearest option.
            ("leas", Some("`lease`")),
            ("wiat", Some("`wait`")),
            ("permit", Some("`permits`")),
            ("abort_on_loss", Some("`abort_on_lost`")),
            ("atLeast", Some("`at_least`")),
            // Nothing close: no guess.
            ("retries", None),
            ("x", None),
        ];
        for (name, expected) in cases {
            let message = unknown_option(name);
            assert!(
                message.starts_with(&format!("unknown option `{name}`;")),
                "{message}"
            );
            assert!(message.ends_with(&option_list()), "{message}");
            match expected {
                Some(option) => assert!(
                    message.contains(&format!("did you mean {option}")),
                    "{name}: {message}"
                ),
                None => assert!(!message.contains("did you mean"), "{name}: {message}"),
            }
        }
        // Every alias points at an option that exists.
        for (alias, option, _) in ALIASES {
            assert!(Opt::named(option).is_some(), "{alias} -> {option}");
            assert_eq!(alias, normalized(alias), "aliases are stored normalized");
        }
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "key"), 3);
        assert_eq!(edit_distance("wiat", "wait"), 1);
        assert_eq!(edit_distance("lease", "lease"), 0);
    }

    #[test]
    fn the_option_table_names_each_option_once() {
        for (name, opt) in OPTIONS {
            assert_eq!(Opt::named(name), Some(opt), "{name}");
            assert_eq!(OPTIONS.iter().filter(|(n, _)| *n == name).count(), 1);
        }
        assert_eq!(Opt::named("timeout"), None);
        let message = error(quote::quote!(key = "x", timeout = "1s"));
        assert!(message.contains(&option_list()), "{message}");
    }

    /// The option names in the first column of the Markdown table under
    /// `| option | meaning |` in `text` (`//`-comment markers stripped):
    /// `read` for "`read` / `write`", `permits` for "`permits = 5`".
    fn documented(text: &str) -> std::collections::BTreeSet<String> {
        let rows = text
            .lines()
            .map(|line| line.trim_start().trim_start_matches('/').trim())
            .skip_while(|line| *line != "| option | meaning |")
            .skip(2)
            .take_while(|line| line.starts_with('|'));
        let mut names = std::collections::BTreeSet::new();
        for row in rows {
            let first = row.split('|').nth(1).unwrap_or_default();
            for code in first.split('`').skip(1).step_by(2) {
                let name: String = code
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
        names
    }

    /// The facade's documentation of the attribute and the README list the
    /// options of [`OPTIONS`], no more, no fewer. They live outside this
    /// package: checked in the workspace, skipped where they are absent.
    #[test]
    fn the_docs_list_the_options_of_the_table() {
        let table: std::collections::BTreeSet<String> =
            OPTIONS.iter().map(|(name, _)| (*name).to_owned()).collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for doc in ["src/lib.rs", "README.md"] {
            let Ok(text) = std::fs::read_to_string(root.join(doc)) else {
                eprintln!("{doc} is not here (not built in the workspace): not checked");
                continue;
            };
            assert_eq!(documented(&text), table, "the option table of {doc}");
        }
    }

    #[test]
    fn family_kinds_and_counts() {
        let args = parse(quote::quote!(key = "x", permits = 5, take = 2)).unwrap();
        assert!(matches!(
            args.kind,
            Kind::Permits {
                total: Setting::Literal(5),
                take: Setting::Literal(2)
            }
        ));
        let args = parse(quote::quote!(key = "x", permits = cfg.limit)).unwrap();
        assert!(matches!(
            args.kind,
            Kind::Permits {
                total: Setting::Runtime(_),
                take: Setting::Literal(1)
            }
        ));
        assert!(matches!(
            parse(quote::quote!(key = "x", write)).unwrap().kind,
            Kind::Write
        ));
        // A runtime total is checked by the lock (`InvalidConfig`), not here.
        parse(quote::quote!(key = "x", permits = n, take = 9)).unwrap();
    }

    #[test]
    fn durations_are_literals_or_expressions() {
        let args = parse(quote::quote!(
            key = "x",
            wait = cfg.wait,
            lease = "1m",
            at_least = Duration::from_secs(5)
        ))
        .unwrap();
        assert!(matches!(args.wait, WaitArg::Runtime(_)));
        assert_eq!(args.lease, Some(Setting::Literal(Duration::from_secs(60))));
        assert!(matches!(args.at_least, Some(Setting::Runtime(_))));
        // A runtime lease leaves a literal minimum to the lock's own check.
        parse(quote::quote!(
            key = "x",
            lease = self.lease,
            at_least = "1h"
        ))
        .unwrap();
        parse(quote::quote!(key = "x", lease = "1m", at_least = "1m")).unwrap();
    }

    #[test]
    fn leader_names_a_role_in_place_of_a_key() {
        let args = parse(quote::quote!(
            leader = "relay:{shard}",
            wait = "5s",
            abort_on_lost
        ))
        .unwrap();
        assert!(matches!(args.kind, Kind::Leader));
        assert_eq!(args.keys.len(), 1);
        assert!(!args.multi);
        // Both refused, without the lease-vs-minimum message on top.
        let message = error(quote::quote!(leader = "r", lease = "1s", at_least = "1m"));
        assert!(!message.contains("is longer than"), "{message}");
    }

    #[test]
    fn a_bad_permits_is_one_error_not_two() {
        let message = error(quote::quote!(key = "x", permits = 0, take = 1));
        assert!(message.contains("`permits = 0`"), "{message}");
        assert!(!message.contains("`take` needs"), "{message}");
    }

    #[test]
    fn misuse_is_named() {
        let cases = [
            (
                quote::quote!(key = "x", read, write),
                "`write` conflicts with `read`",
            ),
            (
                quote::quote!(key = "x", permits = 2, fair),
                "`fair` conflicts with `permits`",
            ),
            (
                quote::quote!(key = "x", take = 2),
                "`take` needs `permits = N`",
            ),
            (
                quote::quote!(key = "x", permits = 2, take = 3),
                "`take = 3` is more than `permits = 2`",
            ),
            (quote::quote!(key = "x", permits = 0), "`permits = 0`"),
            (
                quote::quote!(key = "x", permits = 1, take = 0),
                "`take = 0`",
            ),
            (
                quote::quote!(key = "x", permits = 4294967296),
                "does not fit a u32",
            ),
            (
                quote::quote!(key = "x", permits = 2u64),
                "expected `permits = 5`",
            ),
            (
                quote::quote!(key = "x", permits = "2"),
                "expected `permits = 5`",
            ),
            (
                quote::quote!(key = "x", take = -1, permits = 1),
                "cannot be negative",
            ),
            (
                quote::quote!(keys = ["a", "b"], read),
                "`read` locks one key",
            ),
            (
                quote::quote!(keys = ["a", "b"], at_least = "1s"),
                "`at_least` needs one key",
            ),
            (
                quote::quote!(key = "x", at_least = "2m", lease = "1m"),
                "is longer than `lease = \"1m\"`",
            ),
            (
                quote::quote!(key = "x", at_least = "400days"),
                "at most 365days",
            ),
            (
                quote::quote!(key = "x", wait = 10),
                "expected `wait = \"10s\"`",
            ),
            (
                quote::quote!(key = "x", fair = true),
                "`fair` takes no value",
            ),
            (
                quote::quote!(key = "x", lease),
                "expected `lease = \"10s\"`",
            ),
            (
                quote::quote!(leader = "r", key = "x"),
                "`key` conflicts with `leader`",
            ),
            (
                quote::quote!(key = "x", leader = "r"),
                "`leader` conflicts with `key`",
            ),
            (
                quote::quote!(leader = "r", lease = "1m"),
                "`lease` does not apply to `leader`",
            ),
            (
                quote::quote!(leader = "r", at_least = "1m"),
                "`at_least` does not apply to `leader`",
            ),
            (
                quote::quote!(leader = "r", permits = 2),
                "`permits` conflicts with `leader`",
            ),
            (quote::quote!(leader), "expected `leader = \"...\"`"),
        ];
        for (tokens, expected) in cases {
            let message = error(tokens.clone());
            assert!(message.contains(expected), "{tokens}: {message}");
        }
    }
}
