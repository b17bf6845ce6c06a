//! `lockctl completions SHELL` and `lockctl man`: shell completions and man
//! pages, generated from the command line itself by clap's own generators
//! (`clap_complete`, `clap_mangen`), so they never drift from `--help`.
//! Neither touches Redis.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::exit::{self, Failure};

/// Prints the completion script of `args.shell` on stdout.
pub(crate) fn completions(args: &CompletionsArgs) -> Result<u8, Failure> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "lockctl", &mut out);
    write_out(&out)
}

/// Prints the man page `lockctl(1)` on stdout, or, with `--dir`, writes it
/// and one page per command (`lockctl-run.1`, ...) into that directory.
pub(crate) fn man(args: &ManArgs) -> Result<u8, Failure> {
    let command = Cli::command();
    let Some(dir) = &args.dir else {
        let mut out = Vec::new();
        render(clap_mangen::Man::new(command), &mut out)?;
        return write_out(&out);
    };
    let mut pages = vec![("lockctl".to_owned(), command.clone())];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        // clap names a command with a `&'static str`; leaking a few names
        // in a process that prints and exits costs nothing.
        let name: &'static str = format!("lockctl-{}", sub.get_name()).leak();
        let page = sub
            .clone()
            .name(name)
            .version(env!("CARGO_PKG_VERSION"))
            .bin_name(format!("lockctl {}", sub.get_name()));
        pages.push((format!("lockctl-{}", sub.get_name()), page));
    }
    for (title, page) in pages {
        let mut out = Vec::new();
        render(clap_mangen::Man::new(page).title(title.clone()), &mut out)?;
        write_file(&dir.join(format!("{title}.1")), &out)?;
    }
    Ok(exit::SUCCESS)
}

fn render(page: clap_mangen::Man, out: &mut Vec<u8>) -> Result<(), Failure> {
    page.render(out)
        .map_err(|err| Failure::new(exit::SOFTWARE, format!("cannot render the man page: {err}")))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes).map_err(|err| {
        Failure::new(
            exit::CANT_CREATE,
            format!("cannot write {}: {err}", path.display()),
        )
    })
}

fn write_out(bytes: &[u8]) -> Result<u8, Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(exit::SUCCESS),
        // A closed pipe (`lockctl man | head`) is not an error of lockctl.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::SUCCESS),
        Err(err) => Err(Failure::new(exit::SOFTWARE, format!("cannot write: {err}"))),
    }
}
