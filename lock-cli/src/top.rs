//! `lockctl top` (alias `watch`): a live view of the locks held, refreshed
//! every `--interval`; one snapshot (a table, or JSON) when stdout is not a
//! terminal.
//!
//! The locks come from [`LockAdmin::list`](distlock_core::LockAdmin::list)
//! (SCAN on every backend) and their waiters from
//! [`LockAdmin::waiters`](distlock_core::LockAdmin::waiters): the subscribers
//! of each lock's wake-up channel (`PUBSUB NUMSUB`, `PUBSUB SHARDNUMSUB` on
//! the channel's master in a cluster, the largest count of the masters on
//! Redlock): each subscribed client counts once, however many of its tasks
//! wait. The hold time is measured by the view from when it first saw the
//! current fencing token.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant, SystemTime};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, style, terminal};
use distlock_core::{LockClient, LockInfo};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::cli::{ConnectionArgs, SortBy, TopArgs};
use crate::connect::connect;
use crate::exit::{self, Failure};
use crate::output::{millis, print_out, to_json};

/// The lease the bar is drawn against when neither `--lease` nor a longer
/// TTL says otherwise (the client's default lease).
const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Width of the lease-left bar, brackets included.
const BAR: usize = 12;

/// How long the current holder has held a lock, as the view saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    held: Duration,
    /// The holder already held it when the view started: at least `held`.
    at_least: bool,
}

/// One held lock, as the view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Row {
    name: String,
    key: String,
    owner: String,
    fencing_token: u64,
    #[serde(rename = "ttl_ms", serialize_with = "ser_millis")]
    ttl: Option<Duration>,
    #[serde(skip)]
    hold: Option<Hold>,
    /// Clients subscribed to the lock's wake-up channel; `None` when they
    /// could not be counted.
    waiters: Option<u64>,
}

fn ser_millis<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&millis(*d)),
        None => s.serialize_none(),
    }
}

/// Sorts `rows` by `by` (ties by name), descending when `reverse`.
pub(crate) fn sort_rows(rows: &mut [Row], by: SortBy, reverse: bool) {
    rows.sort_by(|a, b| {
        let order = match by {
            SortBy::Name => a.name.cmp(&b.name),
            SortBy::Owner => a.owner.cmp(&b.owner),
            SortBy::Token => a.fencing_token.cmp(&b.fencing_token),
            // No expiry sorts after every TTL.
            SortBy::Ttl => (a.ttl.is_none(), a.ttl).cmp(&(b.ttl.is_none(), b.ttl)),
            SortBy::Hold => a.hold.map(|h| h.held).cmp(&b.hold.map(|h| h.held)),
            SortBy::Waiters => a.waiters.cmp(&b.waiters),
        };
        let order = if reverse { order.reverse() } else { order };
        order.then_with(|| a.name.cmp(&b.name))
    });
}

/// The lease-left bar: `[####......]`, full at `lease`.
fn bar(ttl: Option<Duration>, lease: Duration) -> String {
    let inner = BAR - 2;
    let Some(ttl) = ttl else {
        return format!("[{:^inner$}]", "no expiry");
    };
    let fraction = ttl.as_secs_f64() / lease.as_secs_f64().max(0.001);
    // Rounded up: a lock with any lease left shows at least one mark.
    let filled = ((fraction * inner as f64).ceil() as usize).min(inner);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(inner - filled))
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn hold_text(hold: Option<Hold>) -> String {
    match hold {
        None => "-".into(),
        Some(h) => {
            let secs = h.held.as_secs();
            let text = if secs >= 3600 {
                format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
            } else if secs >= 60 {
                format!("{}m{:02}s", secs / 60, secs % 60)
            } else {
                format!("{secs}s")
            };
            if h.at_least {
                format!(">={text}")
            } else {
                text
            }
        }
    }
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('~');
        cut
    }
}

/// The table: a header and a line per row, in the order of `rows`.
pub(crate) fn table(rows: &[Row], lease: Duration) -> Vec<String> {
    let name_w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0);
    let name_w = name_w.clamp(4, 40);
    let owner_w = rows
        .iter()
        .map(|r| r.owner.chars().count())
        .max()
        .unwrap_or(0);
    let owner_w = owner_w.clamp(5, 40);
    let mut lines = vec![format!(
        "{:<name_w$}  {:<owner_w$}  {:>8}  {:<BAR$}  {:>7}  {:>8}  {:>7}",
        "NAME", "OWNER", "TOKEN", "LEASE LEFT", "TTL", "HOLD", "WAITERS"
    )];
    for row in rows {
        lines.push(format!(
            "{:<name_w$}  {:<owner_w$}  {:>8}  {:<BAR$}  {:>7}  {:>8}  {:>7}",
            truncate(&row.name, name_w),
            truncate(&row.owner, owner_w),
            row.fencing_token,
            bar(row.ttl, lease),
            row.ttl.map_or_else(|| "-".into(), seconds),
            hold_text(row.hold),
            row.waiters.map_or_else(|| "?".into(), |w| w.to_string()),
        ));
    }
    lines
}

/// The lease the bars are drawn against: `--lease`, else the longer of 30 s
/// and the longest TTL seen.
fn lease_of(option: Option<Duration>, longest_seen: Duration) -> Duration {
    option.unwrap_or(DEFAULT_LEASE.max(longest_seen))
}

/// When the view first saw each lock's current token.
#[derive(Debug, Default)]
struct HoldClock {
    seen: HashMap<String, (u64, Instant, bool)>,
    refreshed: bool,
}

impl HoldClock {
    fn update(&mut self, rows: &mut [Row], now: Instant) {
        let first = !self.refreshed;
        self.refreshed = true;
        let mut seen = HashMap::with_capacity(rows.len());
        for row in rows.iter_mut() {
            let (since, at_least) = match self.seen.get(&row.name) {
                Some(&(token, since, at_least)) if token == row.fencing_token => (since, at_least),
                _ => (now, first),
            };
            row.hold = Some(Hold {
                held: now.saturating_duration_since(since),
                at_least,
            });
            seen.insert(row.name.clone(), (row.fencing_token, since, at_least));
        }
        self.seen = seen;
    }
}

/// Where the view reads from: the lock client (connected on first use, again
/// after a failed connect), whose operator's handle lists the locks and
/// counts their waiters.
struct Source<'a> {
    args: &'a ConnectionArgs,
    client: Option<LockClient>,
}

/// One refresh: the rows (sorted by name), and what could not be read.
struct Snapshot {
    rows: Vec<Row>,
    waiter_error: Option<String>,
}

impl Source<'_> {
    async fn fetch(&mut self, prefix: &str) -> Result<Snapshot, Failure> {
        let pattern = format!("{prefix}*");
        if self.client.is_none() {
            self.client = Some(connect(self.args, &pattern, None, false).await?);
        }
        let Some(client) = self.client.as_ref() else {
            return Err(Failure::new(exit::UNAVAILABLE, "not connected"));
        };
        let admin = client.admin();
        let locks: Vec<LockInfo> = admin
            .list(prefix)
            .await
            .map_err(|err| Failure::from_lock(&err, &pattern, client.server(), exit::USAGE))?;
        let mut rows: Vec<Row> = locks
            .into_iter()
            .filter_map(|info| {
                let holder = info.holder?;
                Some(Row {
                    name: info.name,
                    key: info.key,
                    owner: holder.owner,
                    fencing_token: holder.fencing_token,
                    ttl: holder.ttl,
                    hold: None,
                    waiters: None,
                })
            })
            .collect();
        let waiter_error = match admin.waiters(rows.iter().map(|row| &row.name)).await {
            Ok(counts) => {
                for (row, count) in rows.iter_mut().zip(counts) {
                    row.waiters = Some(count);
                }
                None
            }
            Err(err) => Some(err.to_string()),
        };
        Ok(Snapshot { rows, waiter_error })
    }

    fn server(&self) -> String {
        match &self.client {
            Some(client) => client.server().to_owned(),
            None => "(not connected)".into(),
        }
    }
}

/// `lockctl top`.
pub(crate) async fn top(connection: &ConnectionArgs, args: TopArgs) -> Result<u8, Failure> {
    let mut source = Source {
        args: connection,
        client: None,
    };
    if args.json || !std::io::stdout().is_terminal() {
        return snapshot(&mut source, &args).await;
    }
    live(&mut source, &args).await
}

/// One snapshot, for a pipe or a file.
async fn snapshot(source: &mut Source<'_>, args: &TopArgs) -> Result<u8, Failure> {
    let Snapshot {
        mut rows,
        waiter_error,
    } = source.fetch(&args.prefix).await?;
    if let Some(err) = &waiter_error {
        eprintln!("lockctl: cannot count the waiters: {}", exit::one_line(err));
    }
    sort_rows(&mut rows, args.sort, false);
    if args.json {
        print_out(&format!("{}\n", to_json(&rows)?))?;
        return Ok(exit::SUCCESS);
    }
    let longest = rows.iter().filter_map(|r| r.ttl).max().unwrap_or_default();
    let lease = lease_of(args.lease, longest);
    let mut out = format!(
        "lockctl top: {} lock(s) held at {}, prefix `{}`\n",
        rows.len(),
        source.server(),
        args.prefix
    );
    for line in table(&rows, lease) {
        let _ = writeln!(out, "{}", line.trim_end());
    }
    print_out(&out)?;
    Ok(exit::SUCCESS)
}

/// The view's state between refreshes.
struct View {
    sort: SortBy,
    reverse: bool,
    filter: String,
    /// The filter being typed after `/`.
    editing: Option<String>,
    rows: Vec<Row>,
    error: Option<String>,
    server: String,
    longest_ttl: Duration,
}

/// What a key asks for.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Nothing,
    Redraw,
    Refresh,
    Quit,
}

impl View {
    fn key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('d'))
        {
            return Action::Quit;
        }
        if let Some(text) = &mut self.editing {
            match key.code {
                KeyCode::Enter => {
                    self.filter = self.editing.take().unwrap_or_default();
                    return Action::Refresh;
                }
                KeyCode::Esc => self.editing = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => return Action::Nothing,
            }
            return Action::Redraw;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('/') => {
                self.editing = Some(self.filter.clone());
                Action::Redraw
            }
            KeyCode::Char('s') => {
                self.sort = self.sort.next();
                self.reverse = false;
                self.resort();
                Action::Redraw
            }
            KeyCode::Char(c) => match SortBy::of_key(c) {
                Some(by) => {
                    self.reverse = by == self.sort && !self.reverse;
                    self.sort = by;
                    self.resort();
                    Action::Redraw
                }
                None => Action::Nothing,
            },
            _ => Action::Nothing,
        }
    }

    fn resort(&mut self) {
        sort_rows(&mut self.rows, self.sort, self.reverse);
    }

    /// The screen's lines, at most `width` characters and `height` lines.
    fn lines(
        &self,
        interval: Duration,
        lease: Option<Duration>,
        width: usize,
        height: usize,
    ) -> Vec<String> {
        let lease = lease_of(lease, self.longest_ttl);
        let now = humantime::format_rfc3339_seconds(SystemTime::now());
        let mut lines = vec![format!(
            "lockctl top  {}  {} held  prefix `{}`  sort {}{}  every {}  {now}",
            self.server,
            self.rows.len(),
            self.filter,
            self.sort.label(),
            if self.reverse { " (reversed)" } else { "" },
            humantime::format_duration(interval),
        )];
        lines.push(match (&self.editing, &self.error) {
            (Some(text), _) => format!("filter (name prefix): {text}_   Enter applies, Esc cancels"),
            (None, Some(err)) => format!("error: {err} (retrying every {})", humantime::format_duration(interval)),
            (None, None) => "q quit  n/o/k/t/h/w sort by name/owner/token/ttl/hold/waiters (again: reverse)  s next column  / filter".into(),
        });
        lines.push(String::new());
        lines.extend(table(&self.rows, lease));
        if self.rows.is_empty() {
            lines.push("(no locks held)".into());
        }
        lines.truncate(height);
        lines.iter().map(|l| truncate(l, width)).collect()
    }
}

/// Raw mode and the alternate screen, left on drop (also on errors and
/// panics).
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Self> {
        // A panic's message must land on the restored terminal, not on the
        // alternate screen that leaving it erases.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            Screen::restore();
            hook(info);
        }));
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }

    fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        for (row, line) in lines.iter().enumerate() {
            queue!(
                out,
                cursor::MoveTo(0, u16::try_from(row).unwrap_or(u16::MAX)),
                style::Print(line),
                terminal::Clear(terminal::ClearType::UntilNewLine)
            )?;
        }
        queue!(
            out,
            cursor::MoveTo(0, u16::try_from(lines.len()).unwrap_or(u16::MAX)),
            terminal::Clear(terminal::ClearType::FromCursorDown)
        )?;
        out.flush()
    }
}

impl Screen {
    fn restore() {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        Screen::restore();
    }
}

/// Reads terminal events on a thread of its own (crossterm's reads block);
/// it ends when the receiver is dropped.
fn events() -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !tx.is_closed() {
            match crossterm::event::poll(Duration::from_millis(100)) {
                Ok(true) => match crossterm::event::read() {
                    Ok(event) => {
                        if tx.send(event).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                },
                Ok(false) => {}
                Err(_) => break,
            }
        }
    });
    rx
}

fn io_failure(err: std::io::Error) -> Failure {
    Failure::new(
        exit::SOFTWARE,
        format!("cannot draw on the terminal: {err}"),
    )
}

/// What an input event asks of the live view's loop.
enum Step {
    Stay,
    Refresh,
    Quit,
}

/// Applies one input event (`None`: the input ended) to `view`, redrawing
/// it with `draw` when it changed.
fn on_event(
    view: &mut View,
    event: Option<Event>,
    draw: &impl Fn(&View) -> std::io::Result<()>,
) -> Result<Step, Failure> {
    let redraw = match event {
        Some(Event::Key(key)) => match view.key(key) {
            Action::Quit => return Ok(Step::Quit),
            Action::Refresh => return Ok(Step::Refresh),
            Action::Redraw => true,
            Action::Nothing => false,
        },
        Some(Event::Resize(..)) => true,
        Some(_) => false,
        None => return Ok(Step::Quit),
    };
    if redraw {
        draw(view).map_err(io_failure)?;
    }
    Ok(Step::Stay)
}

/// The live view, until `q`, Ctrl-C, SIGTERM or SIGHUP.
async fn live(source: &mut Source<'_>, args: &TopArgs) -> Result<u8, Failure> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(io_failure)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(io_failure)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(io_failure)?;
    let screen = Screen::enter().map_err(io_failure)?;
    let mut keys = events();
    let mut view = View {
        sort: args.sort,
        reverse: false,
        filter: args.prefix.clone(),
        editing: None,
        rows: Vec::new(),
        error: None,
        server: "(connecting)".into(),
        longest_ttl: Duration::ZERO,
    };
    let mut clock = HoldClock::default();
    let draw = |view: &View| {
        let (width, height) = terminal::size().unwrap_or((80, 24));
        screen.draw(&view.lines(args.interval, args.lease, width.into(), height.into()))
    };
    draw(&view).map_err(io_failure)?;
    loop {
        let filter = view.filter.clone();
        let fetched = {
            let fetch = source.fetch(&filter);
            tokio::pin!(fetch);
            loop {
                tokio::select! {
                    fetched = &mut fetch => break Some(fetched),
                    event = keys.recv() => match on_event(&mut view, event, &draw)? {
                        Step::Quit => return Ok(exit::SUCCESS),
                        // The filter changed: this refresh is for the old one.
                        Step::Refresh => break None,
                        Step::Stay => {}
                    },
                    _ = term.recv() => return Ok(exit::SUCCESS),
                    _ = hangup.recv() => return Ok(exit::SUCCESS),
                    _ = interrupt.recv() => return Ok(exit::SUCCESS),
                }
            }
        };
        if let Some(fetched) = fetched {
            view.server = source.server();
            match fetched {
                Ok(Snapshot {
                    mut rows,
                    waiter_error,
                }) => {
                    clock.update(&mut rows, Instant::now());
                    if let Some(longest) = rows.iter().filter_map(|r| r.ttl).max() {
                        view.longest_ttl = view.longest_ttl.max(longest);
                    }
                    view.rows = rows;
                    view.resort();
                    view.error = waiter_error
                        .map(|err| format!("cannot count the waiters: {}", exit::one_line(&err)));
                }
                Err(failure) => {
                    // Keep the last rows: they are marked stale by the error line.
                    view.error = Some(exit::one_line(&failure.to_string()));
                }
            }
            draw(&view).map_err(io_failure)?;
            let next = tokio::time::sleep(args.interval);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    () = &mut next => break,
                    event = keys.recv() => match on_event(&mut view, event, &draw)? {
                        Step::Quit => return Ok(exit::SUCCESS),
                        Step::Refresh => break,
                        Step::Stay => {}
                    },
                    _ = term.recv() => return Ok(exit::SUCCESS),
                    _ = hangup.recv() => return Ok(exit::SUCCESS),
                    _ = interrupt.recv() => return Ok(exit::SUCCESS),
                }
            }
        } else {
            draw(&view).map_err(io_failure)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, token: u64, ttl_ms: Option<u64>, hold_s: u64, waiters: u64) -> Row {
        Row {
            name: name.into(),
            key: format!("lock:{{{name}}}"),
            owner: format!("owner-of-{name}"),
            fencing_token: token,
            ttl: ttl_ms.map(Duration::from_millis),
            hold: Some(Hold {
                held: Duration::from_secs(hold_s),
                at_least: false,
            }),
            waiters: Some(waiters),
        }
    }

    fn names(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn rows_sort_by_each_column_and_reverse() {
        let mut rows = vec![
            row("b", 7, Some(20_000), 5, 0),
            row("a", 9, None, 90, 2),
            row("c", 3, Some(5_000), 30, 1),
        ];
        sort_rows(&mut rows, SortBy::Name, false);
        assert_eq!(names(&rows), ["a", "b", "c"]);
        sort_rows(&mut rows, SortBy::Name, true);
        assert_eq!(names(&rows), ["c", "b", "a"]);
        sort_rows(&mut rows, SortBy::Token, false);
        assert_eq!(names(&rows), ["c", "b", "a"]);
        // No expiry after every TTL.
        sort_rows(&mut rows, SortBy::Ttl, false);
        assert_eq!(names(&rows), ["c", "b", "a"]);
        sort_rows(&mut rows, SortBy::Hold, true);
        assert_eq!(names(&rows), ["a", "c", "b"]);
        sort_rows(&mut rows, SortBy::Waiters, true);
        assert_eq!(names(&rows), ["a", "c", "b"]);
        sort_rows(&mut rows, SortBy::Waiters, false);
        assert_eq!(names(&rows), ["b", "c", "a"]);
    }

    #[test]
    fn the_table_shows_each_column() {
        let mut first = row("job:a", 42, Some(15_000), 75, 1);
        first.hold = Some(Hold {
            held: Duration::from_secs(75),
            at_least: true,
        });
        let rows = vec![first, row("job:bb", 7, None, 3, 0)];
        let lines = table(&rows, Duration::from_secs(30));
        assert_eq!(lines.len(), 3);
        for column in [
            "NAME",
            "OWNER",
            "TOKEN",
            "LEASE LEFT",
            "TTL",
            "HOLD",
            "WAITERS",
        ] {
            assert!(lines[0].contains(column), "{column}: {}", lines[0]);
        }
        assert_eq!(
            lines[1],
            "job:a   owner-of-job:a         42  [#####.....]    15.0s   >=1m15s        1"
        );
        assert_eq!(
            lines[2],
            "job:bb  owner-of-job:bb         7  [no expiry ]        -        3s        0"
        );
    }

    #[test]
    fn the_bar_is_full_at_the_lease_and_never_empty_while_held() {
        let lease = Duration::from_secs(30);
        assert_eq!(bar(Some(lease), lease), "[##########]");
        assert_eq!(bar(Some(Duration::from_secs(60)), lease), "[##########]");
        assert_eq!(bar(Some(Duration::from_millis(10)), lease), "[#.........]");
        assert_eq!(bar(Some(Duration::ZERO), lease), "[..........]");
        assert_eq!(lease_of(None, Duration::from_secs(10)), lease);
        assert_eq!(
            lease_of(None, Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(
            lease_of(Some(Duration::from_secs(5)), Duration::from_secs(60)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn hold_time_counts_from_the_first_sight_of_a_token() {
        let mut clock = HoldClock::default();
        let start = Instant::now();
        let mut rows = vec![row("a", 1, Some(1000), 0, 0)];
        clock.update(&mut rows, start);
        assert_eq!(
            rows[0].hold,
            Some(Hold {
                held: Duration::ZERO,
                at_least: true
            })
        );
        clock.update(&mut rows, start + Duration::from_secs(5));
        assert_eq!(rows[0].hold.unwrap().held, Duration::from_secs(5));
        // A new holder (a new token): counted from now, exactly.
        let mut rows = vec![row("a", 2, Some(1000), 0, 0)];
        clock.update(&mut rows, start + Duration::from_secs(7));
        assert_eq!(
            rows[0].hold,
            Some(Hold {
                held: Duration::ZERO,
                at_least: false
            })
        );
        clock.update(&mut rows, start + Duration::from_secs(9));
        assert_eq!(rows[0].hold.unwrap().held, Duration::from_secs(2));
        assert_eq!(hold_text(rows[0].hold), "2s");
    }

    #[test]
    fn keys_sort_filter_and_quit() {
        let key = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
        let mut view = View {
            sort: SortBy::Name,
            reverse: false,
            filter: String::new(),
            editing: None,
            rows: vec![
                row("a", 2, Some(9_000), 1, 0),
                row("b", 1, Some(1_000), 2, 3),
            ],
            error: None,
            server: "s".into(),
            longest_ttl: Duration::ZERO,
        };
        assert_eq!(view.key(key('t')), Action::Redraw);
        assert_eq!(names(&view.rows), ["b", "a"]);
        assert_eq!(view.key(key('t')), Action::Redraw);
        assert_eq!(names(&view.rows), ["a", "b"]);
        assert_eq!(view.key(key('s')), Action::Redraw);
        assert_eq!(view.sort, SortBy::Hold);
        assert_eq!(view.key(key('/')), Action::Redraw);
        assert_eq!(view.key(key('j')), Action::Redraw);
        assert_eq!(view.key(key('q')), Action::Redraw, "typed into the filter");
        assert_eq!(
            view.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
            Action::Refresh
        );
        assert_eq!(view.filter, "jq");
        assert_eq!(view.key(key('q')), Action::Quit);
        assert_eq!(
            view.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        let lines = view.lines(Duration::from_secs(1), None, 60, 10);
        assert!(lines.iter().all(|l| l.chars().count() <= 60));
        assert!(lines[0].contains("prefix `jq`"), "{}", lines[0]);
    }
}
