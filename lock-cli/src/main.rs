//! `lockctl`: run a command under a distributed lock (a distributed `flock`),
//! and inspect or force-release locks, on any backend of `distlock-core`.
//!
//! See `lockctl --help` and the README's "lockctl" section.
//!
//! Modules import each other one way: the commands (`run`, `admin`, `top`,
//! `leader`) use `connect`, which uses the arguments (`cli`); `output`,
//! `child` and `exit` are leaves below them. `leader` borrows `run`'s
//! command display, and `top` shows role locks with `leader`'s reader.
#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs)]

mod admin;
mod child;
mod cli;
mod connect;
mod exit;
mod generate;
mod leader;
mod output;
mod run;
mod top;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    // A bug must still end in one line, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!(
            "lockctl: internal error: {}",
            exit::one_line(&info.to_string())
        );
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return ExitCode::from(usage_error(err)),
    };
    // Generated from the command line alone: no runtime, no Redis.
    match &cli.command {
        Command::Completions(args) => return finish(generate::completions(args)),
        Command::Man(args) => return finish(generate::man(args)),
        _ => {}
    }
    // One thread: lockctl waits on a child, a socket and signals, and the
    // child's parent-death signal is tied to the thread that spawned it.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lockctl: cannot start the runtime: {err}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(async {
        let connection = &cli.connection;
        match cli.command {
            Command::Run(args) => run::run(connection, args).await,
            Command::Status(args) => admin::status(connection, args).await,
            Command::List(args) => admin::list(connection, args).await,
            Command::Release(args) => admin::release(connection, args).await,
            Command::Layouts(args) => admin::layouts(connection, args).await,
            Command::Top(args) => top::top(connection, args).await,
            Command::Completions(args) => generate::completions(&args),
            Command::Man(args) => generate::man(&args),
            Command::Leader(args) => leader::leader(connection, args).await,
        }
    });
    finish(result)
}

/// lockctl's exit code for `result`, with the failure's line on stderr.
fn finish(result: Result<u8, Failure>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("lockctl: {failure}");
            ExitCode::from(failure.code)
        }
    }
}

/// Prints a command-line error (or the help it asked for) and returns the
/// exit code: 0 for `--help`/`--version`, 64 otherwise.
fn usage_error(err: clap::Error) -> u8 {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            exit::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            exit::USAGE
        }
        _ => {
            // clap's message, without its usage block, on one line.
            let text = err.render().to_string();
            let first = text.split("\n\n").next().unwrap_or(&text);
            let message = first.trim().trim_start_matches("error:").trim();
            let failure = Failure::new(exit::USAGE, format!("{message} (see --help)"));
            eprintln!("lockctl: {failure}");
            exit::USAGE
        }
    }
}
