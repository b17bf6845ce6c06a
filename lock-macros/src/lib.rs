//! The `#[distributed_lock]` attribute of `distlock`.
//!
//! Use it through the facade crate (`distlock::distributed_lock`);
//! the generated code names only paths under it. Parsing lives in `attr`
//! and `template`, code generation in `expand`.
#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs)]
// No panics in library code, on any input or runtime state (tests may).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unchecked_time_subtraction,
        clippy::todo,
        clippy::unimplemented,
        clippy::unreachable
    )
)]

use proc_macro::TokenStream;

mod attr;
mod expand;
mod template;

/// # What it expands to
///
/// The key is built from the (borrowed) arguments before the body runs; the
/// lock is acquired with the attribute's options as one
/// `distlock::LockOptions`, the body runs with the guard alive (the watchdog
/// renewing its lease), and the lock is released when the body returns,
/// returns early with `?`, panics, or its future is dropped. The generated
/// code names the runtime only through paths under `distlock` (or the path
/// given with `crate = "..."`).
///
/// The options are listed once, in the documentation of the re-export
/// `distlock::distributed_lock` (this text follows it there); this crate's
/// tests check that table against the parser's.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(attr.into(), item.into()).into()
}
