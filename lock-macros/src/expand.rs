//! Code generation: wraps the function body in acquire / run in the lock's
//! scope / release.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    Block, Expr, FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Stmt, Type,
    TypeParamBound,
};

use crate::attr::{Args, Kind, OnBusy, Setting, WaitArg};
use crate::template::{respan, Scope, Template};

/// Expands `#[distributed_lock(attr)] item`. On an error in the arguments the
/// original function is emitted next to the errors, so the rest of the crate
/// (and the IDE) still sees it.
pub(crate) fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    distributed_lock_with(attr, item, find_facade)
}

/// What the package's Cargo.toml says of the facade crate `distlock`, whose
/// `__private` module the generated code calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Facade {
    /// A dependency under this name: `distlock`, or the name it was renamed
    /// to (`dl = { package = "distlock", .. }`).
    Named(String),
    /// No dependency on it: the generated code could not name it.
    Missing,
    /// Not known (no Cargo.toml to read, as in a build without cargo): it is
    /// taken to be `distlock`.
    Unknown,
}

/// Reads the package's Cargo.toml (that of the crate being compiled) for
/// its dependency on `distlock`.
fn find_facade() -> Facade {
    use proc_macro_crate::{crate_name, Error, FoundCrate};
    match crate_name("distlock") {
        Ok(FoundCrate::Name(name)) => Facade::Named(name),
        // The facade package's own tests, examples and doctests: they name
        // it `distlock` (its library itself does not use the attribute).
        Ok(FoundCrate::Itself) => Facade::Named("distlock".to_owned()),
        Err(Error::CrateNotFound { .. }) => Facade::Missing,
        Err(_) => Facade::Unknown,
    }
}

/// The path of the facade in the generated code: `crate = "..."` when given,
/// else the name the package's Cargo.toml gives it (`find` is asked only
/// then).
fn facade_path(
    krate: Option<&syn::Path>,
    find: impl FnOnce() -> Facade,
) -> syn::Result<TokenStream> {
    if let Some(path) = krate {
        return Ok(path.to_token_stream());
    }
    match find() {
        Facade::Named(name) => match syn::parse_str::<Ident>(&name) {
            Ok(name) => Ok(quote!(::#name)),
            Err(_) => Ok(quote!(::distlock)),
        },
        Facade::Unknown => Ok(quote!(::distlock)),
        Facade::Missing => Err(syn::Error::new(
            Span::call_site(),
            "#[distributed_lock] calls the `distlock` crate, and this package's Cargo.toml has no dependency on it: add `distlock` to [dependencies], or, when it is reached through another crate, say where with `crate = \"other_crate::distlock\"`",
        )),
    }
}

/// As [`distributed_lock`], with `find` telling where the facade is.
pub(crate) fn distributed_lock_with(
    attr: TokenStream,
    item: TokenStream,
    find: impl FnOnce() -> Facade,
) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let err = syn::Error::new(
                Span::call_site(),
                "#[distributed_lock] goes on an `async fn` (a free function or a method)",
            );
            let err = err.to_compile_error();
            return quote! { #err #item };
        }
    };
    match expand(attr, &func, find) {
        Ok(tokens) => tokens,
        Err(err) => {
            let err = err.to_compile_error();
            quote! { #err #func }
        }
    }
}

/// The async body to wrap: the function's own (`async fn`), or the
/// `Box::pin(async move { .. })` that `#[async_trait]` turned it into.
enum Shape<'a> {
    AsyncFn,
    AsyncTrait {
        body: &'a syn::ExprAsync,
        output: Box<Type>,
    },
}

fn expand(
    attr: TokenStream,
    func: &ItemFn,
    find: impl FnOnce() -> Facade,
) -> syn::Result<TokenStream> {
    let parsed = syn::parse::Parser::parse2(Args::parse, attr);
    let shape = shape(func);
    // Report argument and shape errors together.
    let (args, shape) = match (parsed, shape) {
        (Ok(args), Ok(shape)) => (args, shape),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            return Err(a);
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };

    let krate = facade_path(args.krate.as_ref(), find)?;
    let (output, output_span): (Type, Span) = match &shape {
        Shape::AsyncFn => match &func.sig.output {
            ReturnType::Default => (syn::parse_quote!(()), func.sig.ident.span()),
            ReturnType::Type(_, ty) => ((**ty).clone(), ty.span()),
        },
        Shape::AsyncTrait { output, .. } => ((**output).clone(), output.span()),
    };
    let returns_result = is_result(&output);

    // Templates: placeholders must name arguments.
    let mut names = Vec::new();
    let mut has_self = false;
    for input in &func.sig.inputs {
        match input {
            FnArg::Receiver(_) => has_self = true,
            FnArg::Typed(typed) => bindings(&typed.pat, &mut names),
        }
    }
    let fn_name = func.sig.ident.to_string();
    let scope = Scope {
        args: &names,
        has_self,
        fn_name: &fn_name,
    };
    let mut keys = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for lit in &args.keys {
        match Template::parse(lit, &scope) {
            Ok(template) => {
                let format = &template.format;
                let exprs = &template.exprs;
                keys.push(quote_spanned! {lit.span()=>
                    ::std::format!(#format #(, #exprs)*)
                });
            }
            Err(err) => match &mut errors {
                Some(errors) => errors.combine(err),
                None => errors = Some(err),
            },
        }
    }
    let mut check = |ok: bool, span: Span, msg: &str| {
        if !ok {
            let err = syn::Error::new(span, msg);
            match &mut errors {
                Some(errors) => errors.combine(err),
                None => errors = Some(err),
            }
        }
    };
    if args.on_busy == OnBusy::Error {
        check(
            returns_result,
            args.on_busy_span.unwrap_or(output_span),
            "`on_busy = error` (the default) needs a function that returns `Result<T, E>` with `E: From<LockError>`; use `on_busy = skip` to return `Default::default()` instead when the lock is busy",
        );
    }
    if let Some(span) = args.abort_on_lost {
        check(
            returns_result,
            span,
            "`abort_on_lost` needs a function that returns `Result<T, E>` with `E: From<LockError>`: the lost lease is returned as `LockError::LeaseLost`",
        );
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    // Generated locals are invisible to the user's tokens (the body, the
    // option expressions) and never shadow an argument.
    let acquired = local("__lock_acquired");
    let guard = local("__lock_guard");
    // The error is bound only where no user token is in scope, and with
    // call-site hygiene: its conversion is spanned at the return type, so a
    // missing `From<LockError>` is reported there.
    let error = Ident::new("__lock_error", Span::call_site());
    let body_fut = local("__lock_body");
    let ret = local("__lock_return");
    let output_var = local("__lock_output");

    // Through a trait of the facade, so that a value of another type is
    // told which types `client` takes, at the expression.
    let client = match &args.client {
        Some(expr) => {
            let span = expr.span();
            let krate = respan(krate.clone(), span);
            quote_spanned! {span=>
                ::core::option::Option::Some(#krate::__private::lock_client(&(#expr)))
            }
        }
        None => quote!(::core::option::Option::None),
    };
    let (lets, Settings { kind, options }) = settings(&args, &krate);
    // Conversions into the user's error type are spanned at the return
    // type, so a missing `From<LockError>` is reported there. Where the
    // error type is `LockError` itself the conversion is the identity, which
    // clippy must not blame on the user.
    let error_at_output = Ident::new("__lock_error", output_span);
    let return_err = quote_spanned! {output_span=>
        {
            #[allow(clippy::useless_conversion)]
            let #error_at_output = ::core::result::Result::Err(::core::convert::From::from(#error_at_output));
            return #error_at_output;
        }
    };
    let on_error = match (args.on_busy, returns_result) {
        (OnBusy::Error, _) => return_err.clone(),
        (OnBusy::Skip, true) => quote! {
            match #krate::__private::skip(#error, #fn_name) {
                ::core::option::Option::None => {
                    return ::core::result::Result::Ok(::core::default::Default::default());
                }
                ::core::option::Option::Some(#error) => #return_err,
            }
        },
        (OnBusy::Skip, false) => {
            let default = quote_spanned! {output_span=> ::core::default::Default::default() };
            quote! {
                #krate::__private::skip(#error, #fn_name);
                return #default;
            }
        }
    };
    // One key: a `LockGuard` (any kind of lock); `keys`: a `MultiLockGuard`;
    // `leader`: a `LeaderCall` (the role's leadership, won or re-entered).
    let (acquire, guard_type) = if matches!(args.kind, Kind::Leader) {
        (
            quote! {
                #krate::__private::campaign(#client, #(#keys)*, #options)
            },
            quote!(#krate::__private::LeaderCall),
        )
    } else if args.multi {
        (
            quote! {
                #krate::__private::acquire_all(#client, ::std::vec![#(#keys),*], #options)
            },
            quote!(#krate::MultiLockGuard),
        )
    } else {
        (
            quote! {
                #krate::__private::acquire(#client, #(#keys)*, #kind, #options)
            },
            quote!(#krate::LockGuard),
        )
    };
    let run = if args.abort_on_lost.is_some() {
        quote! {
            match #guard_type::scope_or_lost(&#guard, #body_fut).await {
                ::core::result::Result::Ok(#output_var) => #output_var,
                ::core::result::Result::Err(#error) => #return_err,
            }
        }
    } else {
        quote!(#guard_type::scope(&#guard, #body_fut).await)
    };

    let body = match &shape {
        Shape::AsyncFn => {
            let block = &func.block;
            quote! { #block }
        }
        Shape::AsyncTrait { body, .. } => {
            let block = &body.block;
            quote! { #block }
        }
    };
    // The "fake return": the body's value is checked against the declared
    // return type, so type errors point at the user's code.
    let output_ty = if contains_impl_trait(&output) {
        quote!()
    } else {
        quote!(: #output)
    };
    let wrapped = quote! {
        {
            #lets
            let #acquired = #acquire.await;
            let #guard = match #acquired {
                ::core::result::Result::Ok(#guard) => #guard,
                ::core::result::Result::Err(#error) => { #on_error }
            };
            let #body_fut = async move {
                let #ret #output_ty = #body;
                #[allow(unreachable_code)]
                #ret
            };
            let #output_var = #run;
            #krate::__private::release(#guard_type::release(#guard), #fn_name).await;
            #output_var
        }
    };

    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    Ok(match &shape {
        Shape::AsyncFn => quote! {
            #(#attrs)* #vis #sig #wrapped
        },
        Shape::AsyncTrait { body, .. } => {
            // Replace the `async move { .. }` inside `Box::pin(..)`.
            let mut block: Block = (*func.block).clone();
            let replaced: syn::ExprAsync = syn::parse_quote! { async move #wrapped };
            replace_async(&mut block, body, replaced);
            quote! { #(#attrs)* #vis #sig #block }
        }
    })
}

/// A generated local variable, with mixed-site hygiene.
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// The lock's kind and its `LockOptions` for the call, and the `let`s
/// before them that evaluate the options given as expressions. Those run at
/// each call, before the lock is taken, in the function's scope (the
/// arguments and `self` are visible, as to the key templates). Each goes
/// through a conversion spanned at the expression, so a value of a wrong
/// type is reported there, with what to write instead.
fn settings(args: &Args, krate: &TokenStream) -> (TokenStream, Settings) {
    let mut lets = TokenStream::new();
    let mut runtime = |name: &str, expr: &Expr, duration: bool| {
        let var = local(name);
        let span = expr.span();
        // All of the call at the expression, so that rustc's labels stay there.
        let krate = respan(krate.clone(), span);
        let convert = if duration {
            quote_spanned!(span=> #krate::__private::duration)
        } else {
            quote_spanned!(span=> #krate::__private::count)
        };
        lets.extend(quote_spanned! {span=> let #var = #convert(#expr); });
        var.into_token_stream()
    };
    let literal = |d: std::time::Duration| {
        let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
        quote!(::core::time::Duration::new(#secs, #nanos))
    };
    // Only what the attribute gave: the rest is `LockOptions::new()`'s
    // default (try once, watchdog mode, no minimum hold).
    let mut options = quote!(#krate::LockOptions::new());
    match &args.wait {
        WaitArg::Once => {}
        WaitArg::Forever => options.extend(quote!(.wait(#krate::Wait::Forever))),
        WaitArg::For(d) => {
            let d = literal(*d);
            options.extend(quote!(.wait(#krate::Wait::For(#d))));
        }
        WaitArg::Runtime(expr) => {
            // `Wait::from`: a zero `Duration` tries once.
            let d = runtime("__lock_wait", expr, true);
            options.extend(quote!(.wait(#krate::Wait::from(#d))));
        }
    }
    let mut duration = |setting: &Setting<std::time::Duration>, name: &str| match setting {
        Setting::Literal(d) => literal(*d),
        Setting::Runtime(expr) => runtime(name, expr, true),
    };
    if let Some(lease) = &args.lease {
        let d = duration(lease, "__lock_lease");
        options.extend(quote!(.lease(#d)));
    }
    if let Some(at_least) = &args.at_least {
        let d = duration(at_least, "__lock_at_least");
        options.extend(quote!(.hold_at_least(#d)));
    }
    let kind = match &args.kind {
        Kind::Plain => quote!(#krate::__private::Kind::Plain),
        Kind::Fair => quote!(#krate::__private::Kind::Fair),
        Kind::Read => quote!(#krate::__private::Kind::Read),
        Kind::Write => quote!(#krate::__private::Kind::Write),
        // Not a member of the family: the expansion campaigns instead.
        Kind::Leader => TokenStream::new(),
        Kind::Permits { total, take } => {
            let mut count = |setting: &Setting<u32>, name: &str| match setting {
                Setting::Literal(n) => quote!(#n),
                Setting::Runtime(expr) => runtime(name, expr, false),
            };
            let total = count(total, "__lock_permits");
            let take = count(take, "__lock_take");
            quote!(#krate::__private::Kind::Permits { total: #total, take: #take })
        }
    };
    (lets, Settings { kind, options })
}

/// The lock of the call: which member of the family (`__private::Kind`,
/// unused with several keys, which are plain locks) and its `LockOptions`.
struct Settings {
    kind: TokenStream,
    options: TokenStream,
}

/// Which body to wrap; an error at `fn` when there is no async body.
fn shape(func: &ItemFn) -> syn::Result<Shape<'_>> {
    if func.sig.asyncness.is_some() {
        return Ok(Shape::AsyncFn);
    }
    if let (Some(body), ReturnType::Type(_, ty)) = (async_trait_body(&func.block), &func.sig.output)
    {
        if let Some(output) = future_output(ty) {
            return Ok(Shape::AsyncTrait {
                body,
                output: Box::new(output),
            });
        }
    }
    // `#[tokio::main]` / `#[tokio::test]` above this attribute expand first:
    // they take `async` off the function and block on its body. The user's
    // line still says `async fn`, so say what happened.
    if blocks_on_its_body(func) {
        // `#[tokio::test]` leaves `#[::core::prelude::v1::test]` spanned at
        // itself: point there when it is present.
        let span = func
            .attrs
            .iter()
            .find(|attr| {
                attr.path()
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "test")
            })
            .map_or_else(|| func.sig.fn_token.span(), |attr| attr.span());
        return Err(syn::Error::new(
            span,
            "#[distributed_lock] must be above `#[tokio::main]` / `#[tokio::test]`, not below: that attribute expanded first and turned this `async fn` into a plain `fn` that blocks on its body, so there is no async body left to lock; swap the two attributes",
        ));
    }
    Err(syn::Error::new(
        func.sig.fn_token.span(),
        "#[distributed_lock] needs an `async fn`: the lock is held across the awaits of its body (if `#[tokio::main]`, `#[tokio::test]` or another attribute that makes the function synchronous is above this one, put #[distributed_lock] above it)",
    ))
}

/// Whether `func` is what a runtime's attribute (`#[tokio::main]`,
/// `#[tokio::test]`) makes of an `async fn`: a plain function whose body is
/// bound as an `async` block and handed to a runtime's `block_on`.
fn blocks_on_its_body(func: &ItemFn) -> bool {
    let binds_async_body = func.block.stmts.iter().any(|stmt| {
        matches!(stmt, Stmt::Local(local)
            if local.init.as_ref().is_some_and(|init| matches!(&*init.expr, Expr::Async(_))))
    });
    binds_async_body && mentions(func.block.to_token_stream(), "block_on")
}

/// Whether `tokens` contain the identifier `name`, at any depth.
fn mentions(tokens: TokenStream, name: &str) -> bool {
    tokens.into_iter().any(|tree| match tree {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions(group.stream(), name),
        _ => false,
    })
}

/// The `async move { .. }` of a body ending in `Box::pin(async move { .. })`,
/// the shape `#[async_trait]` gives a method.
fn async_trait_body(block: &Block) -> Option<&syn::ExprAsync> {
    let Some(Stmt::Expr(Expr::Call(call), None)) = block.stmts.last() else {
        return None;
    };
    let Expr::Path(path) = &*call.func else {
        return None;
    };
    let segments: Vec<String> = path
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    if !segments.ends_with(&["Box".to_owned(), "pin".to_owned()]) || call.args.len() != 1 {
        return None;
    }
    match call.args.first() {
        Some(Expr::Async(body)) => Some(body),
        _ => None,
    }
}

fn replace_async(block: &mut Block, old: &syn::ExprAsync, new: syn::ExprAsync) {
    if let Some(Stmt::Expr(Expr::Call(call), None)) = block.stmts.last_mut() {
        if let Some(arg @ Expr::Async(_)) = call.args.first_mut() {
            if matches!(arg, Expr::Async(body) if body == old) {
                *arg = Expr::Async(new);
            }
        }
    }
}

/// `R` from `Pin<Box<dyn Future<Output = R> + ..>>`.
fn future_output(ty: &Type) -> Option<Type> {
    let Type::Path(pin) = ty else { return None };
    let pin = pin.path.segments.last()?;
    let boxed = single_type_arg(&pin.arguments)?;
    let Type::Path(boxed) = boxed else {
        return None;
    };
    let dyn_future = single_type_arg(&boxed.path.segments.last()?.arguments)?;
    let Type::TraitObject(object) = dyn_future else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(assoc.ty.clone()),
            _ => None,
        })
    })
}

fn single_type_arg(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// Whether the return type is a `Result` (or an alias named `...Result`,
/// such as `io::Result` or `anyhow::Result`).
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident.to_string().ends_with("Result")),
        Type::Group(group) => is_result(&group.elem),
        Type::Paren(paren) => is_result(&paren.elem),
        _ => false,
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|tree| matches!(&tree, proc_macro2::TokenTree::Ident(i) if i == "impl"))
        || matches!(ty, Type::ImplTrait(_))
}

/// The variables a parameter pattern binds.
fn bindings(pat: &Pat, out: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            out.push(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, out);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Struct(st) => st.fields.iter().for_each(|f| bindings(&f.pat, out)),
        Pat::Reference(reference) => bindings(&reference.pat, out),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Type(typed) => bindings(&typed.pat, out),
        Pat::Paren(paren) => bindings(&paren.pat, out),
        Pat::Or(or) => or.cases.iter().for_each(|p| bindings(p, out)),
        _ => {}
    }
}

#[cfg(test)]
mod facade {
    use proc_macro2::TokenStream;
    use quote::quote;

    use super::{distributed_lock_with, Facade};

    fn expand(attr: TokenStream, facade: Facade) -> String {
        let item = quote!(
            async fn pay(id: u64) -> Result<(), E> {
                Ok(())
            }
        );
        distributed_lock_with(attr, item, || facade).to_string()
    }

    #[test]
    fn a_renamed_dependency_is_named_as_renamed() {
        let code = expand(quote!(key = "order:{id}"), Facade::Named("dl".to_owned()));
        assert!(code.contains(":: dl :: __private :: acquire"), "{code}");
        assert!(!code.contains("distlock"), "{code}");
    }

    #[test]
    fn crate_wins_and_cargo_toml_is_not_read() {
        let item = quote!(
            async fn pay(id: u64) -> Result<(), E> {
                Ok(())
            }
        );
        let code = distributed_lock_with(
            quote!(key = "order:{id}", crate = "infra::locks"),
            item,
            || panic!("Cargo.toml read although `crate` was given"),
        )
        .to_string();
        assert!(
            code.contains("infra :: locks :: __private :: acquire"),
            "{code}"
        );
    }

    #[test]
    fn unknown_is_distlock_and_missing_is_an_error_with_the_fix() {
        let code = expand(quote!(key = "order:{id}"), Facade::Unknown);
        assert!(
            code.contains(":: distlock :: __private :: acquire"),
            "{code}"
        );
        let code = expand(quote!(key = "order:{id}"), Facade::Missing);
        assert!(code.contains("compile_error"), "{code}");
        assert!(code.contains("has no dependency on it"), "{code}");
        assert!(
            code.contains(r#"crate = \"other_crate::distlock\""#),
            "{code}"
        );
    }

    /// The real look-up, on manifests written for it: a renamed dependency
    /// is found under its new name, a missing one is `Missing`. (The one
    /// test here that sets `CARGO_MANIFEST_DIR`; nothing else in this test
    /// binary reads it at run time.)
    #[test]
    fn cargo_toml_is_read_for_the_dependency_name() {
        let root =
            std::env::temp_dir().join(format!("distlock-macros-facade-{}", std::process::id()));
        let manifest = |dir: &str, deps: &str| {
            let dir = root.join(dir);
            std::fs::create_dir_all(dir.join("src")).unwrap();
            std::fs::write(dir.join("src/lib.rs"), "").unwrap();
            std::fs::write(
                dir.join("Cargo.toml"),
                format!("[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\n{deps}\n"),
            )
            .unwrap();
            dir
        };
        let renamed = manifest(
            "renamed",
            r#"dl = { package = "distlock", version = "0.1" }"#,
        );
        let plain = manifest("plain", r#"distlock = "0.1""#);
        let missing = manifest("missing", r#"tokio = "1""#);
        let saved = std::env::var_os("CARGO_MANIFEST_DIR");
        let mut found = Vec::new();
        for dir in [&renamed, &plain, &missing] {
            std::env::set_var("CARGO_MANIFEST_DIR", dir);
            found.push(super::find_facade());
        }
        match saved {
            Some(saved) => std::env::set_var("CARGO_MANIFEST_DIR", saved),
            None => std::env::remove_var("CARGO_MANIFEST_DIR"),
        }
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            found,
            [
                Facade::Named("dl".to_owned()),
                Facade::Named("distlock".to_owned()),
                Facade::Missing
            ]
        );
    }

    #[test]
    fn a_body_a_runtime_attribute_blocks_on_is_named() {
        // What `#[tokio::test]` above the attribute leaves of an `async fn`.
        let item = quote!(
            #[::core::prelude::v1::test]
            fn pays() -> Result<(), E> {
                let body = async { Ok(()) };
                {
                    use tokio::runtime::Builder;
                    return Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("rt")
                        .block_on(body);
                }
            }
        );
        let code = distributed_lock_with(quote!(key = "x"), item, || Facade::Unknown).to_string();
        assert!(
            code.contains("must be above `#[tokio::main]` / `#[tokio::test]`"),
            "{code}"
        );
        // A plain synchronous function gets the general message, with the hint.
        let item = quote!(
            fn pays() -> Result<(), E> {
                Ok(())
            }
        );
        let code = distributed_lock_with(quote!(key = "x"), item, || Facade::Unknown).to_string();
        assert!(code.contains("needs an `async fn`"), "{code}");
        assert!(code.contains("put #[distributed_lock] above it"), "{code}");
    }
}

#[cfg(test)]
mod snapshots {
    //! Expansion snapshots: what users get, for reviewers to read. Set
    //! `UPDATE_SNAPSHOTS=1` to rewrite them after an intended change.

    use std::path::PathBuf;

    use proc_macro2::TokenStream;
    use quote::quote;

    fn check(name: &str, attr: TokenStream, item: TokenStream) {
        let facade = || super::Facade::Named("distlock".to_owned());
        let expanded = super::distributed_lock_with(attr.clone(), item.clone(), facade);
        let file: syn::File = syn::parse2(expanded).expect("the expansion parses as Rust");
        let text = format!(
            "// #[distributed_lock({attr})]\n// {item}\n\n{}",
            prettyplease::unparse(&file)
        );
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("snapshots")
            .join(format!("{name}.rs"));
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == text,
            "expansion of {name} changed; rerun with UPDATE_SNAPSHOTS=1 and review the diff of {}:\n{text}",
            path.display()
        );
    }

    #[test]
    fn pay_with_wait() {
        check(
            "pay",
            quote!(key = "order:{id}", wait = "10s"),
            quote! {
                async fn pay(id: u64) -> Result<Receipt, AppError> {
                    charge(id).await?;
                    Ok(Receipt::new(id))
                }
            },
        );
    }

    #[test]
    fn transfer_with_two_keys_and_abort_on_lost() {
        check(
            "transfer",
            quote!(
                keys = ["account:{from.id}", "account:<to>"],
                lease = "5s",
                abort_on_lost,
                client = self.locks
            ),
            quote! {
                pub async fn transfer(&self, from: &Account, to: u64) -> anyhow::Result<()> {
                    self.ledger.move_funds(from.id, to).await
                }
            },
        );
    }

    #[test]
    fn scheduled_job_with_a_minimum_hold() {
        check(
            "scheduled",
            quote!(
                key = "job:cleanup",
                lease = "10m",
                at_least = "5m",
                on_busy = skip
            ),
            quote! {
                async fn cleanup() {
                    purge_expired().await;
                }
            },
        );
    }

    #[test]
    fn export_with_runtime_permits_and_wait() {
        check(
            "export",
            quote!(
                key = "export:{tenant}",
                permits = self.limits.exports,
                take = 2,
                wait = self.config.lock_wait,
                client = self.locks
            ),
            quote! {
                async fn export(&self, tenant: u32) -> Result<(), AppError> {
                    self.exporter.run(tenant).await
                }
            },
        );
    }

    #[test]
    fn nightly_job_skips() {
        check(
            "nightly_job",
            quote!(key = "job:nightly", on_busy = skip, crate = "locks"),
            quote! {
                async fn nightly() {
                    build_report().await;
                }
            },
        );
    }
}
