//! Key templates: `"order:{id}"`, `"order:<id>"`, `"{self.tenant}:{req.user_id}"`,
//! `"job:{name.to_lowercase()}"`, parsed into a format string and the
//! expressions that fill it.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Expr, LitStr};

/// A parsed template: a `format!` string with `{}` per placeholder, and the
/// placeholders' expressions (spanned at the template literal).
pub(crate) struct Template {
    pub(crate) format: String,
    pub(crate) exprs: Vec<TokenStream>,
}

/// The names a placeholder may start with.
pub(crate) struct Scope<'a> {
    pub(crate) args: &'a [String],
    pub(crate) has_self: bool,
    pub(crate) fn_name: &'a str,
}

impl Template {
    pub(crate) fn parse(lit: &LitStr, scope: &Scope<'_>) -> syn::Result<Self> {
        let text = lit.value();
        let span = lit.span();
        let err = |msg: String| syn::Error::new(span, msg);
        let mut format = String::new();
        let mut exprs = Vec::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' | '<' if chars.peek().map(|&(_, next)| next) == Some(c) => {
                    chars.next();
                    format.push_str(if c == '{' { "{{" } else { "<" });
                }
                '}' if chars.peek().map(|&(_, next)| next) == Some('}') => {
                    chars.next();
                    format.push_str("}}");
                }
                '}' => {
                    return Err(err(format!(
                        "unmatched `}}` at byte {at} of key template \"{text}\"; write `}}}}` for a literal `}}`"
                    )))
                }
                '{' | '<' => {
                    let close = if c == '{' { '}' } else { '>' };
                    let rest = &text[at + 1..];
                    let Some(end) = rest.find(close) else {
                        let shown: String = rest.chars().take(24).collect();
                        return Err(err(format!(
                            "unclosed placeholder `{c}{shown}` in key template \"{text}\": expected `{close}`; write `{c}{c}` for a literal `{c}`"
                        )));
                    };
                    let inner = &rest[..end];
                    for _ in 0..inner.chars().count() + 1 {
                        chars.next();
                    }
                    exprs.push(placeholder(inner, c, close, span, scope)?);
                    format.push_str("{}");
                }
                c => format.push(c),
            }
        }
        Ok(Template { format, exprs })
    }
}

/// Parses and checks one placeholder's expression.
fn placeholder(
    inner: &str,
    open: char,
    close: char,
    span: Span,
    scope: &Scope<'_>,
) -> syn::Result<TokenStream> {
    let shown = format!("{open}{inner}{close}");
    let err = |msg: String| syn::Error::new(span, msg);
    if inner.trim().is_empty() {
        return Err(err(format!(
            "empty placeholder `{shown}` in key template: name an argument, e.g. `{open}id{close}`"
        )));
    }
    let expr: Expr = syn::parse_str(inner).map_err(|e| {
        err(format!(
            "placeholder `{shown}` is not an expression ({e}); expected an argument, a field or a method call, e.g. `{{id}}`, `{{req.user_id}}`, `{{self.tenant}}`"
        ))
    })?;
    let known = || {
        let mut names: Vec<String> = scope.args.iter().map(|a| format!("`{a}`")).collect();
        if scope.has_self {
            names.insert(0, "`self`".to_owned());
        }
        if names.is_empty() {
            format!("`{}` takes no arguments", scope.fn_name)
        } else {
            format!(
                "the arguments of `{}` are {}",
                scope.fn_name,
                names.join(", ")
            )
        }
    };
    match root(&expr) {
        Some(name) if name == "self" && scope.has_self => {}
        Some(name) if scope.args.contains(&name) => {}
        Some(name) => {
            return Err(err(format!(
                "placeholder `{shown}` names `{name}`, which is not an argument; {}",
                known()
            )))
        }
        None => {
            return Err(err(format!(
                "placeholder `{shown}` must start with an argument name; {}",
                known()
            )))
        }
    }
    Ok(respan(expr.to_token_stream(), span))
}

/// The variable an expression such as `req.user.id` or `name.trim()` reads.
fn root(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident().map(ToString::to_string),
        Expr::Field(field) => root(&field.base),
        Expr::MethodCall(call) => root(&call.receiver),
        Expr::Index(index) => root(&index.expr),
        Expr::Paren(paren) => root(&paren.expr),
        Expr::Reference(reference) => root(&reference.expr),
        Expr::Unary(unary) if matches!(unary.op, syn::UnOp::Deref(_)) => root(&unary.expr),
        _ => None,
    }
}

/// Gives every token `span`, so that errors in a placeholder (a field that
/// does not exist, a type without `Display`) point at the key template, and
/// errors about an option's value at that value.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut new = Group::new(group.delimiter(), respan(group.stream(), span));
                new.set_span(span);
                tree = TokenTree::Group(new);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> syn::Result<Template> {
        let args = ["id".to_owned(), "req".to_owned()];
        let scope = Scope {
            args: &args,
            has_self: true,
            fn_name: "pay",
        };
        Template::parse(&LitStr::new(text, Span::call_site()), &scope)
    }

    fn rendered(text: &str) -> (String, Vec<String>) {
        let t = parse(text).unwrap();
        let exprs = t.exprs.iter().map(|e| e.to_string()).collect();
        (t.format, exprs)
    }

    #[test]
    fn both_placeholder_forms_and_escapes() {
        assert_eq!(
            rendered("order:{id}"),
            ("order:{}".into(), vec!["id".into()])
        );
        assert_eq!(
            rendered("order:<id>"),
            ("order:{}".into(), vec!["id".into()])
        );
        assert_eq!(
            rendered("{self.tenant}/{req.user.id}/{id.to_string()}"),
            (
                "{}/{}/{}".into(),
                vec![
                    "self . tenant".into(),
                    "req . user . id".into(),
                    "id . to_string ()".into()
                ]
            )
        );
        assert_eq!(rendered("a{{b}}<<c>"), ("a{{b}}<c>".into(), vec![]));
        assert_eq!(rendered("plain"), ("plain".into(), vec![]));
    }

    #[test]
    fn errors_name_the_placeholder() {
        let msg = |t: &str| parse(t).err().unwrap().to_string();
        assert!(msg("order:{id").contains("unclosed placeholder `{id`"));
        assert!(msg("order:<id").contains("unclosed placeholder `<id`"));
        assert!(msg("order:id}").contains("unmatched `}`"));
        assert!(msg("order:{}").contains("empty placeholder"));
        assert!(msg("order:{idd}").contains("`idd`, which is not an argument"));
        assert!(msg("order:{idd}").contains("`self`, `id`, `req`"));
        assert!(msg("order:{1 + 2}").contains("must start with an argument name"));
        assert!(msg("order:{id +}").contains("is not an expression"));
    }
}
