//! Parsing of the attribute's arguments: `key`, `keys`, `wait`, `lease`,
//! `on_busy`, `client`, `crate`, `abort_on_lost`.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, LitStr, Path, Token};

/// The options, in the order the error message lists them.
pub(crate) const OPTIONS: &str =
    "`key`, `keys`, `wait`, `lease`, `on_busy`, `client`, `crate`, `abort_on_lost`";

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Once,
    For(Duration),
    Forever,
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
    pub(crate) wait: Wait,
    pub(crate) lease: Option<Duration>,
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
            wait: Wait::Once,
            lease: None,
            on_busy: OnBusy::Error,
            on_busy_span: None,
            client: None,
            krate: None,
            abort_on_lost: None,
        };
        let mut seen: Vec<String> = Vec::new();
        for item in items {
            let name = item.name.to_string();
            if seen.contains(&name) {
                push(syn::Error::new(
                    item.name.span(),
                    format!("duplicate option `{name}`"),
                ));
                continue;
            }
            seen.push(name.clone());
            if let Err(err) = args.apply(&name, item) {
                push(err);
            }
        }
        if args.keys.is_empty() && !seen.iter().any(|n| n == "key" || n == "keys") {
            push(syn::Error::new(
                Span::call_site(),
                "missing option `key`: say which lock to take, e.g. `key = \"order:{id}\"`",
            ));
        }
        match errors {
            Some(errors) => Err(errors),
            None => Ok(args),
        }
    }

    fn apply(&mut self, name: &str, item: Item) -> syn::Result<()> {
        let span = item.name.span();
        match name {
            "key" | "keys" if !self.keys.is_empty() => Err(syn::Error::new(
                span,
                "give either `key` or `keys`, not both",
            )),
            "key" => {
                self.keys.push(string_value(&item.name, item.value)?);
                Ok(())
            }
            "keys" => match item.value {
                Some(Value::Strs(strs)) if !strs.is_empty() => {
                    self.keys = strs;
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
            "wait" => {
                let lit = string_value(&item.name, item.value)?;
                self.wait = match lit.value().trim() {
                    "forever" => Wait::Forever,
                    text => {
                        let wait = duration(&lit, text, true)?;
                        if wait.is_zero() {
                            Wait::Once
                        } else {
                            Wait::For(wait)
                        }
                    }
                };
                Ok(())
            }
            "lease" => {
                let lit = string_value(&item.name, item.value)?;
                let lease = duration(&lit, lit.value().trim(), false)?;
                // The lock's own range (lock_core::MIN_LEASE..=MAX_LEASE),
                // checked here so that a bad literal fails the build.
                let (min, max) = (
                    Duration::from_millis(10),
                    Duration::from_secs(365 * 24 * 3600),
                );
                if !(min..=max).contains(&lease) {
                    return Err(syn::Error::new(
                        lit.span(),
                        "a lease must be between 10ms and 365days (leave `lease` out for a watchdog-renewed lock)",
                    ));
                }
                self.lease = Some(lease);
                Ok(())
            }
            "on_busy" => {
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
            "client" => match item.value {
                Some(Value::Expr(expr)) => {
                    self.client = Some(expr);
                    Ok(())
                }
                _ => Err(syn::Error::new(
                    span,
                    "expected `client = <expression giving a LockClient or &LockClient>`",
                )),
            },
            "crate" => {
                let lit = string_value(&item.name, item.value)?;
                self.krate = Some(lit.parse().map_err(|_| {
                    syn::Error::new(lit.span(), "expected a path, e.g. `crate = \"my_locks\"`")
                })?);
                Ok(())
            }
            "abort_on_lost" => match item.value {
                None => {
                    self.abort_on_lost = Some(span);
                    Ok(())
                }
                Some(_) => Err(syn::Error::new(span, "`abort_on_lost` takes no value")),
            },
            _ => Err(syn::Error::new(
                span,
                format!("unknown option `{name}`; expected one of {OPTIONS}"),
            )),
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
