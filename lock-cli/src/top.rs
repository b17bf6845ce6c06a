//! `lockctl top` (alias `watch`): a live view of the locks of every kind in
//! use, refreshed every `--interval`, drawn with ratatui; one snapshot (a
//! table, or JSON) when stdout is not a terminal.
//!
//! The locks come from [`LockAdmin::list_all`](distlock_core::LockAdmin::list_all)
//! (plain locks, hot locks' keepers, fair locks, read-write locks,
//! semaphores: SCAN on every backend) and their waiting clients from
//! [`LockAdmin::waiters_of`](distlock_core::LockAdmin::waiters_of) (the
//! subscribers of each lock's wake-up channel): each subscribed client
//! counts once, however many of its tasks wait. The hold time is measured by
//! the view from when it first saw the current fencing token (for a hot lock,
//! how long it has been kept).

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant, SystemTime};

use distlock_core::{ListedLock, LockClient, LockHolder};
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{
    Block, Borders, Cell, Paragraph, Row as TableRow, Table, TableState, Widget,
};
use ratatui::{DefaultTerminal, Frame};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::cli::{ConnectionArgs, LockKind, SortBy, TopArgs};
use crate::connect::connect;
use crate::exit::{self, Failure};
use crate::leader::TopLeader;
use crate::output::{count, millis, print_out, to_json};

/// Width of the lease-left bar, brackets included.
const BAR: usize = 12;

/// The widest NAME and HOLDER columns.
const WIDEST: usize = 40;

/// How long the current holder has held a lock, as the view saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    held: Duration,
    /// The holder already held it when the view started: at least `held`.
    at_least: bool,
}

/// One lock in use, as the view shows it (and `--json` prints it: the
/// fields of a plain lock are those of earlier versions, plus `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Row {
    kind: LockKind,
    name: String,
    key: String,
    /// The one holder: of a plain or fair lock, a read-write lock's writer.
    owner: Option<String>,
    fencing_token: Option<u64>,
    /// The holder's lease left; of readers or permit holders, the longest.
    #[serde(rename = "ttl_ms", serialize_with = "ser_millis")]
    ttl: Option<Duration>,
    #[serde(skip)]
    hold: Option<Hold>,
    /// The lock's own lease, as the bar is drawn against it: the longest
    /// TTL the view has seen of the current holder (a watchdog renews the
    /// full lease every third of it, a fixed lease starts full).
    #[serde(skip)]
    lease: Option<Duration>,
    /// Clients waiting (see [`Row::count_waiters`]); `None` when they could not be
    /// counted.
    waiters: Option<u64>,
    #[serde(flatten)]
    detail: Detail,
}

/// What the detail pane (and the JSON) shows of each kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
enum Detail {
    Plain {},
    Hot {
        /// The keeper's client id.
        keeper: String,
    },
    Fair {
        queue: Vec<Waiter>,
    },
    ReadWrite {
        readers: Vec<Holding>,
        waiting_writers: Vec<Waiter>,
        /// Clients subscribed to its channel (waiting readers and writers).
        #[serde(skip)]
        subscribers: Option<u64>,
    },
    Semaphore {
        holders: Vec<Holding>,
        in_use: u32,
    },
    /// A role's lock of leader election.
    Leader(TopLeader),
}

/// A waiter holding a place (a fair lock's queue, a waiting writer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Waiter {
    owner: String,
    #[serde(rename = "place_ttl_ms", serialize_with = "ser_duration")]
    place_ttl: Duration,
}

/// A reader, or a holder of permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Holding {
    owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    #[serde(rename = "ttl_ms", serialize_with = "ser_duration")]
    ttl: Duration,
}

fn ser_millis<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&millis(*d)),
        None => s.serialize_none(),
    }
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(millis(*d))
}

impl Row {
    /// The row of `lock`, its waiters not counted yet.
    fn of(lock: ListedLock) -> Option<Self> {
        let holder = |h: Option<LockHolder>| match h {
            Some(h) => (Some(h.owner), Some(h.fencing_token), h.ttl),
            None => (None, None, None),
        };
        let (kind, name, key, (owner, fencing_token, ttl), detail) = match lock {
            ListedLock::Plain(info) => {
                let keeper = info
                    .holder
                    .as_ref()
                    .filter(|h| h.kept())
                    .map(|h| h.client_id().to_owned());
                let (kind, detail) = match keeper {
                    Some(keeper) => (LockKind::Hot, Detail::Hot { keeper }),
                    None => (LockKind::Lock, Detail::Plain {}),
                };
                (kind, info.name, info.key, holder(info.holder), detail)
            }
            ListedLock::Fair(info) => {
                let queue = info
                    .queue
                    .into_iter()
                    .map(|w| Waiter {
                        owner: w.owner,
                        place_ttl: w.place_ttl,
                    })
                    .collect();
                let holder = holder(info.holder);
                (
                    LockKind::Fair,
                    info.name,
                    info.key,
                    holder,
                    Detail::Fair { queue },
                )
            }
            ListedLock::ReadWrite(info) => {
                let longest = info.readers.iter().map(|r| r.ttl).max();
                let mut holder = holder(info.writer);
                holder.2 = holder.2.or(longest);
                let detail = Detail::ReadWrite {
                    readers: info
                        .readers
                        .into_iter()
                        .map(|r| Holding {
                            owner: r.owner,
                            permits: None,
                            ttl: r.ttl,
                        })
                        .collect(),
                    waiting_writers: info
                        .waiting_writers
                        .into_iter()
                        .map(|w| Waiter {
                            owner: w.owner,
                            place_ttl: w.place_ttl,
                        })
                        .collect(),
                    subscribers: None,
                };
                (LockKind::Rw, info.name, info.key, holder, detail)
            }
            ListedLock::Semaphore(info) => {
                let longest = info.holders.iter().map(|h| h.ttl).max();
                let detail = Detail::Semaphore {
                    holders: info
                        .holders
                        .into_iter()
                        .map(|h| Holding {
                            owner: h.owner,
                            permits: Some(h.permits),
                            ttl: h.ttl,
                        })
                        .collect(),
                    in_use: info.in_use,
                };
                let holder = (None, None, longest);
                (LockKind::Sem, info.name, info.key, holder, detail)
            }
            // A kind of a later lock-core: not shown.
            _ => return None,
        };
        Some(Row {
            kind,
            name,
            key,
            owner,
            fencing_token,
            ttl,
            hold: None,
            lease: None,
            waiters: None,
            detail,
        })
    }

    /// Sets the waiters from `subscribers`, the clients subscribed to the
    /// lock's channel: a fair lock's queue length; of a read-write lock the
    /// subscribers (waiting readers and writers: a waiting writer's client
    /// follows the channel too, so adding the two would count it twice), at
    /// least its waiting writers (a writer keeps its place a while after its
    /// process is gone); else the subscribers.
    fn count_waiters(&mut self, subscribers: Option<u64>) {
        self.waiters = match &mut self.detail {
            Detail::Fair { queue } => Some(queue.len() as u64),
            Detail::ReadWrite {
                waiting_writers,
                subscribers: counted,
                ..
            } => {
                *counted = subscribers;
                subscribers.map(|s| s.max(waiting_writers.len() as u64))
            }
            _ => subscribers,
        };
    }

    /// The HOLDER column: the owner, `N readers`, `N permits`, a keeper.
    fn holder_text(&self) -> String {
        match (&self.detail, &self.owner) {
            (Detail::Hot { keeper }, _) => format!("{keeper} (kept)"),
            (_, Some(owner)) => owner.clone(),
            (Detail::ReadWrite { readers, .. }, None) => count(readers.len(), "reader"),
            (Detail::Semaphore { in_use, .. }, None) => {
                count(usize::try_from(*in_use).unwrap_or(usize::MAX), "permit")
            }
            (_, None) => "-".into(),
        }
    }
}

/// Sorts `rows` by `by` (ties by name, then kind), descending when `reverse`.
pub(crate) fn sort_rows(rows: &mut [Row], by: SortBy, reverse: bool) {
    rows.sort_by(|a, b| {
        let order = match by {
            SortBy::Name => a.name.cmp(&b.name),
            SortBy::Owner => a.holder_text().cmp(&b.holder_text()),
            SortBy::Token => a.fencing_token.cmp(&b.fencing_token),
            // No expiry sorts after every TTL.
            SortBy::Ttl => (a.ttl.is_none(), a.ttl).cmp(&(b.ttl.is_none(), b.ttl)),
            SortBy::Hold => a.hold.map(|h| h.held).cmp(&b.hold.map(|h| h.held)),
            // The most waiters first (the busiest lock on top); uncounted last.
            SortBy::Waiters => b.waiters.cmp(&a.waiters),
        };
        let order = if reverse { order.reverse() } else { order };
        order
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.kind.cmp(&b.kind))
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

/// The lease `row`'s bar is drawn against: `--lease` when given, else the
/// lock's own (see [`Row::lease`]).
fn lease_of(row: &Row, option: Option<Duration>) -> Duration {
    option
        .or(row.lease)
        .or(row.ttl)
        .unwrap_or(Duration::from_secs(1))
}

/// The TTL column: the bar and the seconds; `-` for a fair lock nobody
/// holds (only queued).
fn ttl_text(row: &Row, option: Option<Duration>) -> String {
    let lease = lease_of(row, option);
    match (row.ttl, &row.detail) {
        (None, Detail::Plain {} | Detail::Hot { .. }) => format!("{} {:>6}", bar(None, lease), "-"),
        (None, _) => "-".into(),
        (Some(ttl), _) => format!("{} {:>6}", bar(Some(ttl), lease), seconds(ttl)),
    }
}

/// The column widths of `rows`' table.
fn widths(rows: &[&Row]) -> [u16; 7] {
    let widest = |text: &dyn Fn(&Row) -> usize, least: usize| {
        let most = rows.iter().map(|r| text(r)).max().unwrap_or(0);
        u16::try_from(most.clamp(least, WIDEST)).unwrap_or(u16::MAX)
    };
    let name = widest(&|r| r.name.chars().count(), 4);
    let holder = widest(&|r| r.holder_text().chars().count(), 6);
    // Tokens are the server's clock in microseconds (16 digits): a narrower column
    // would cut them.
    let token = widest(&|r| r.fencing_token.map_or(1, |t| t.to_string().len()), 5);
    let kind = widest(&|r| r.kind.label().len(), 4);
    [kind, name, holder, token, (BAR + 7) as u16, 8, 7]
}

/// The table of `rows` (a header, a line per row, in their order), its
/// columns `widths` wide.
fn table<'a>(rows: &[&Row], widths: [u16; 7], lease: Option<Duration>) -> Table<'a> {
    let right = |text: String| Cell::from(Line::from(text).right_aligned());
    let [_, name_w, holder_w, ..] = widths;
    let lines = rows.iter().map(|row| {
        TableRow::new(vec![
            Cell::from(row.kind.label()),
            Cell::from(truncate(&row.name, name_w.into())),
            Cell::from(truncate(&row.holder_text(), holder_w.into())),
            right(
                row.fencing_token
                    .map_or_else(|| "-".into(), |t| t.to_string()),
            ),
            Cell::from(ttl_text(row, lease)),
            right(hold_text(row.hold)),
            right(row.waiters.map_or_else(|| "?".into(), |w| w.to_string())),
        ])
    });
    let header = TableRow::new(vec![
        Cell::from("KIND"),
        Cell::from("NAME"),
        Cell::from("HOLDER"),
        right("TOKEN".into()),
        Cell::from("TTL"),
        right("HOLD".into()),
        right("WAITERS".into()),
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    Table::new(lines, widths.map(Constraint::Length))
        .header(header)
        .column_spacing(2)
        .highlight_symbol("> ")
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
}

/// The lines of the detail pane for `row`.
fn detail(row: &Row, option: Option<Duration>) -> Vec<Line<'static>> {
    let lease = lease_of(row, option);
    let left = |ttl: Option<Duration>| ttl.map_or_else(|| "no expiry".into(), seconds);
    let token = row
        .fencing_token
        .map_or_else(|| "-".into(), |t| t.to_string());
    let waiting = row.waiters.map_or_else(|| "?".into(), |w| w.to_string());
    let holder = |role: &str| match &row.owner {
        Some(owner) => format!(
            "{role:<9}{owner}  token {token}  lease left {}  held {}",
            left(row.ttl),
            hold_text(row.hold)
        ),
        None => format!("{role:<9}none"),
    };
    let mut lines: Vec<String> = Vec::new();
    match &row.detail {
        Detail::Plain {} => {
            lines.push(holder("holder"));
            lines.push(format!(
                "waiting  {waiting} client(s) subscribed to its wake-up channel"
            ));
        }
        Detail::Hot { keeper } => {
            lines.push(format!(
                "keeper   client {keeper} keeps it between its uses (hot lock)"
            ));
            lines.push(format!(
                "token    {token}, the same for every use while kept; kept for {}",
                hold_text(row.hold)
            ));
            lines.push(format!(
                "field    {}  lease left {}",
                row.owner.as_deref().unwrap_or("-"),
                left(row.ttl)
            ));
            lines.push("uses     counted in the keeper's process only".into());
            lines.push(format!(
                "waiting  {waiting} client(s) subscribed, the keeper included"
            ));
        }
        Detail::Fair { queue } => {
            lines.push(holder("holder"));
            lines.push(format!(
                "queue    {}, the next holder first",
                count(queue.len(), "waiter")
            ));
            for (at, waiter) in queue.iter().enumerate() {
                lines.push(format!(
                    "  {}. {}  keeps its place {}",
                    at + 1,
                    waiter.owner,
                    seconds(waiter.place_ttl)
                ));
            }
        }
        Detail::ReadWrite {
            readers,
            waiting_writers,
            subscribers,
        } => {
            lines.push(holder("writer"));
            lines.push(format!("readers  {}", readers.len()));
            for reader in readers {
                lines.push(format!(
                    "  {}  lease left {}",
                    reader.owner,
                    seconds(reader.ttl)
                ));
            }
            lines.push(format!(
                "waiting  {} (new readers wait behind them), {} subscribed",
                count(waiting_writers.len(), "writer"),
                subscribers.map_or_else(|| "?".into(), |s| count(s as usize, "client"))
            ));
            for writer in waiting_writers {
                lines.push(format!(
                    "  {}  keeps its place {}",
                    writer.owner,
                    seconds(writer.place_ttl)
                ));
            }
        }
        Detail::Semaphore { holders, in_use } => {
            lines.push(format!(
                "permits  {in_use} in use by {} (the total is not stored: each acquirer passes it)",
                count(holders.len(), "holder")
            ));
            for holding in holders {
                lines.push(format!(
                    "  {}  {}  lease left {}",
                    holding.owner,
                    count(holding.permits.unwrap_or(0) as usize, "permit"),
                    seconds(holding.ttl)
                ));
            }
            lines.push(format!("waiting  {waiting} client(s) subscribed"));
        }
        Detail::Leader(leader) => {
            lines.push(holder("leader"));
            lines.extend(leader.lines());
            lines.push(format!("waiting  {waiting} campaign(s) subscribed"));
        }
    }
    lines.push(format!(
        "key      {}  lease bar against {}",
        row.key,
        seconds(lease)
    ));
    lines.into_iter().map(Line::from).collect()
}

/// When the view first saw each lock's current token (a lock without one,
/// read by readers or held in permits: since it was first seen in use), and
/// the longest TTL it has seen of that holder: the lock's own lease.
#[derive(Debug, Default)]
struct HoldClock {
    seen: HashMap<(LockKind, String), Seen>,
    refreshed: bool,
}

/// What [`HoldClock`] remembers of a lock's current holder.
#[derive(Debug, Clone, Copy)]
struct Seen {
    token: Option<u64>,
    since: Instant,
    at_least: bool,
    longest_ttl: Option<Duration>,
}

impl HoldClock {
    fn update(&mut self, rows: &mut [Row], now: Instant) {
        let first = !self.refreshed;
        self.refreshed = true;
        let mut seen = HashMap::with_capacity(rows.len());
        for row in rows.iter_mut() {
            let id = (row.kind, row.name.clone());
            let mut this = match self.seen.get(&id) {
                Some(seen) if seen.token == row.fencing_token => *seen,
                _ => Seen {
                    token: row.fencing_token,
                    since: now,
                    at_least: first,
                    longest_ttl: None,
                },
            };
            this.longest_ttl = this.longest_ttl.max(row.ttl);
            row.hold = Some(Hold {
                held: now.saturating_duration_since(this.since),
                at_least: this.at_least,
            });
            row.lease = this.longest_ttl;
            seen.insert(id, this);
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
        let locks = admin
            .list_all(prefix)
            .await
            .map_err(|err| Failure::from_lock(&err, &pattern, client.server(), exit::USAGE))?;
        let (counts, waiter_error) = match admin.waiters_of(&locks).await {
            Ok(counts) => (counts.into_iter().map(Some).collect(), None),
            Err(err) => (vec![None; locks.len()], Some(err.to_string())),
        };
        let mut rows: Vec<Row> = locks
            .into_iter()
            .zip(counts)
            .filter_map(|(lock, subscribers)| {
                let mut row = Row::of(lock)?;
                row.count_waiters(subscribers);
                Some(row)
            })
            .collect();
        // A role's lock shows its leader's record (one read per role).
        for row in rows.iter_mut().filter(|row| row.kind == LockKind::Lock) {
            if let Some(leader) = TopLeader::read(client, &row.name).await {
                row.kind = LockKind::Leader;
                row.detail = Detail::Leader(leader);
            }
        }
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

/// `buffer`'s lines as text, trailing blanks cut.
fn buffer_lines(buffer: &Buffer) -> Vec<String> {
    let area = buffer.area;
    (area.top()..area.bottom())
        .map(|y| {
            let line: String = (area.left()..area.right())
                .filter_map(|x| buffer.cell((x, y)).map(|cell| cell.symbol()))
                .collect();
            line.trim_end().to_owned()
        })
        .collect()
}

/// The table of `rows` as text: the header, then a line per row.
fn table_lines(rows: &[&Row], lease: Option<Duration>) -> Vec<String> {
    let columns = widths(rows);
    let width: u16 = columns.iter().map(|w| w + 2).sum();
    // A buffer's height is a u16: the rows go through it a thousand at a
    // time, the header kept once.
    let mut lines = Vec::with_capacity(rows.len() + 1);
    for (at, chunk) in rows.chunks(1000).enumerate() {
        let height = u16::try_from(chunk.len() + 1).unwrap_or(u16::MAX);
        let mut buffer = Buffer::empty(Rect::new(0, 0, width, height));
        Widget::render(table(chunk, columns, lease), buffer.area, &mut buffer);
        lines.extend(buffer_lines(&buffer).into_iter().skip(usize::from(at > 0)));
    }
    if rows.is_empty() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, width, 1));
        Widget::render(table(&[], columns, lease), buffer.area, &mut buffer);
        lines.extend(buffer_lines(&buffer));
    }
    lines
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
    rows.retain(|row| args.kind.is_none_or(|kind| row.kind == kind));
    sort_rows(&mut rows, args.sort, false);
    if args.json {
        print_out(&format!("{}\n", to_json(&rows)?))?;
        return Ok(exit::SUCCESS);
    }
    // One look: each lock's own lease is what it has left now.
    for row in &mut rows {
        row.lease = row.ttl;
    }
    let lease = args.lease;
    let shown: Vec<&Row> = rows.iter().collect();
    let mut out = format!(
        "lockctl top: {} lock(s) in use at {}, prefix `{}`\n",
        rows.len(),
        source.server(),
        args.prefix
    );
    for line in table_lines(&shown, lease) {
        out.push_str(&line);
        out.push('\n');
    }
    print_out(&out)?;
    Ok(exit::SUCCESS)
}

/// The view's state between refreshes.
struct View {
    sort: SortBy,
    reverse: bool,
    filter: String,
    kind: Option<LockKind>,
    /// The filter being typed after `/`.
    editing: Option<String>,
    rows: Vec<Row>,
    /// The selected lock, kept across refreshes.
    selected: Option<(LockKind, String)>,
    /// The table's scrolling.
    table: TableState,
    error: Option<String>,
    server: String,
    interval: Duration,
    lease: Option<Duration>,
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
    fn new(args: &TopArgs) -> Self {
        View {
            sort: args.sort,
            reverse: false,
            filter: args.prefix.clone(),
            kind: args.kind,
            editing: None,
            rows: Vec::new(),
            selected: None,
            table: TableState::default(),
            error: None,
            server: "(connecting)".into(),
            interval: args.interval,
            lease: args.lease,
        }
    }

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
            KeyCode::Char('f') => {
                self.kind = LockKind::next_filter(self.kind);
                Action::Redraw
            }
            KeyCode::Down => self.select(1),
            KeyCode::Up => self.select(-1),
            KeyCode::PageDown => self.select(10),
            KeyCode::PageUp => self.select(-10),
            KeyCode::Home => self.select(isize::MIN),
            KeyCode::End => self.select(isize::MAX),
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

    /// Moves the selection `by` rows (clamped to the rows shown).
    fn select(&mut self, by: isize) -> Action {
        let shown = self.shown();
        let Some(last) = shown.len().checked_sub(1) else {
            return Action::Nothing;
        };
        let at = self.selected_index(&shown).unwrap_or(0);
        let to = at.saturating_add_signed(by).min(last);
        self.selected = shown.get(to).map(|row| (row.kind, row.name.clone()));
        Action::Redraw
    }

    /// The rows the kind filter lets through, in their order.
    fn shown(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|row| self.kind.is_none_or(|kind| row.kind == kind))
            .collect()
    }

    /// The index of the selected lock among `shown`.
    fn selected_index(&self, shown: &[&Row]) -> Option<usize> {
        let (kind, name) = self.selected.as_ref()?;
        shown
            .iter()
            .position(|row| row.kind == *kind && row.name == *name)
    }

    fn resort(&mut self) {
        sort_rows(&mut self.rows, self.sort, self.reverse);
    }

    /// Draws the view on `frame`: a title, a status line, the table, the
    /// detail pane of the selected lock, the keys.
    fn render(&mut self, frame: &mut Frame) {
        let lease = self.lease;
        let shown = self.shown();
        let index = self
            .selected_index(&shown)
            .or((!shown.is_empty()).then_some(0));
        let detail_lines = index
            .and_then(|at| shown.get(at))
            .map(|row| (row.kind, row.name.clone(), detail(row, lease)));
        let pane = detail_lines
            .as_ref()
            .map_or(0, |(_, _, lines)| lines.len() + 1);
        let area = frame.area();
        let pane = u16::try_from(pane).unwrap_or(u16::MAX).min(area.height / 2);
        let [title, status, body, bottom, keys] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Min(2),
            Constraint::Length(pane),
            Constraint::Length(1),
        ])
        .areas(area);

        let now = humantime::format_rfc3339_seconds(SystemTime::now());
        let title_text = format!(
            "lockctl top  {}  {} in use  prefix `{}`  kind {}  sort {}{}  every {}  {now}",
            self.server,
            shown.len(),
            self.filter,
            self.kind.map_or_else(|| "all".into(), LockKind::label),
            self.sort.label(),
            if self.reverse { " (reversed)" } else { "" },
            humantime::format_duration(self.interval),
        );
        let status_text = match (&self.editing, &self.error) {
            (Some(text), _) => {
                format!("filter (name prefix): {text}_   Enter applies, Esc cancels")
            }
            (None, Some(err)) => format!(
                "error: {err} (retrying every {})",
                humantime::format_duration(self.interval)
            ),
            (None, None) => String::new(),
        };
        frame.render_widget(Paragraph::new(title_text), title);
        frame.render_widget(Paragraph::new(status_text), status);

        let mut state = self.table.clone().with_selected(index);
        frame.render_stateful_widget(table(&shown, widths(&shown), lease), body, &mut state);
        if shown.is_empty() {
            let below = Rect {
                y: body.y.saturating_add(1),
                height: body.height.saturating_sub(1),
                ..body
            };
            frame.render_widget(Paragraph::new("(no locks in use)"), below);
        }
        if let Some((kind, name, lines)) = detail_lines {
            let title = format!(" {} {name} ", kind.label());
            let block = Block::new().borders(Borders::TOP).title(title);
            frame.render_widget(Paragraph::new(lines).block(block), bottom);
        }
        frame.render_widget(
            Paragraph::new(
                "q quit  Up/Down select  n/o/k/t/h/w sort by name/holder/token/ttl/hold/waiters \
                 (again: reverse)  s next  f kind  / filter",
            ),
            keys,
        );
        self.table = state;
    }
}

/// The terminal in raw mode on the alternate screen, given back on drop
/// (also on errors; ratatui's panic hook gives it back on a panic).
struct Screen {
    terminal: DefaultTerminal,
}

impl Screen {
    fn enter() -> std::io::Result<Self> {
        // A failure after raw mode was entered leaves it too.
        let terminal = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        Ok(Screen { terminal })
    }

    fn draw(&mut self, view: &mut View) -> std::io::Result<()> {
        self.terminal.draw(|frame| view.render(frame)).map(|_| ())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        ratatui::restore();
    }
}

/// Reads terminal events on a thread of its own (crossterm's reads block);
/// it ends when the receiver is dropped.
fn events() -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !tx.is_closed() {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => match event::read() {
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
/// it on `screen` when it changed.
fn on_event(view: &mut View, event: Option<Event>, screen: &mut Screen) -> Result<Step, Failure> {
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
        screen.draw(view).map_err(io_failure)?;
    }
    Ok(Step::Stay)
}

/// The live view, until `q`, Ctrl-C, SIGTERM or SIGHUP.
async fn live(source: &mut Source<'_>, args: &TopArgs) -> Result<u8, Failure> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(io_failure)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(io_failure)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(io_failure)?;
    let mut screen = Screen::enter().map_err(io_failure)?;
    let mut keys = events();
    let mut view = View::new(args);
    let mut clock = HoldClock::default();
    screen.draw(&mut view).map_err(io_failure)?;
    loop {
        let filter = view.filter.clone();
        let fetched = {
            let fetch = source.fetch(&filter);
            tokio::pin!(fetch);
            loop {
                tokio::select! {
                    fetched = &mut fetch => break Some(fetched),
                    event = keys.recv() => match on_event(&mut view, event, &mut screen)? {
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
            screen.draw(&mut view).map_err(io_failure)?;
            let next = tokio::time::sleep(args.interval);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    () = &mut next => break,
                    event = keys.recv() => match on_event(&mut view, event, &mut screen)? {
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
            screen.draw(&mut view).map_err(io_failure)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::*;

    fn row(name: &str, token: u64, ttl_ms: Option<u64>, hold_s: u64, waiters: u64) -> Row {
        Row {
            kind: LockKind::Lock,
            name: name.into(),
            key: format!("lock:{{{name}}}"),
            owner: Some(format!("owner-of-{name}")),
            fencing_token: Some(token),
            ttl: ttl_ms.map(Duration::from_millis),
            hold: Some(Hold {
                held: Duration::from_secs(hold_s),
                at_least: false,
            }),
            lease: None,
            waiters: Some(waiters),
            detail: Detail::Plain {},
        }
    }

    /// One row of each kind: `job:a` plain, `job:hot` kept, `job:fair`
    /// held with one waiter queued, `job:rw` read by two, `job:sem` with 3
    /// permits in use.
    fn family() -> Vec<Row> {
        let secs = Duration::from_secs;
        let mut hot = row("job:hot", 7, Some(20_000), 90, 1);
        hot.kind = LockKind::Hot;
        hot.owner = Some("c-hot:h0~k".into());
        hot.detail = Detail::Hot {
            keeper: "c-hot".into(),
        };
        let mut fair = row("job:fair", 9, Some(25_000), 4, 0);
        fair.kind = LockKind::Fair;
        fair.detail = Detail::Fair {
            queue: vec![Waiter {
                owner: "c-next:3".into(),
                place_ttl: Duration::from_millis(4_200),
            }],
        };
        fair.count_waiters(Some(5));
        let reader = |owner: &str| Holding {
            owner: owner.into(),
            permits: None,
            ttl: secs(29),
        };
        let mut rw = row("job:rw", 0, Some(29_000), 2, 0);
        rw.kind = LockKind::Rw;
        rw.owner = None;
        rw.fencing_token = None;
        rw.detail = Detail::ReadWrite {
            readers: vec![reader("c-r1:1"), reader("c-r2:1")],
            waiting_writers: vec![Waiter {
                owner: "c-w:4".into(),
                place_ttl: secs(3),
            }],
            subscribers: None,
        };
        rw.count_waiters(Some(2));
        let mut sem = row("job:sem", 0, Some(10_000), 1, 0);
        sem.kind = LockKind::Sem;
        sem.owner = None;
        sem.fencing_token = None;
        sem.detail = Detail::Semaphore {
            holders: vec![
                Holding {
                    owner: "c-p1:1".into(),
                    permits: Some(2),
                    ttl: secs(10),
                },
                Holding {
                    owner: "c-p2:1".into(),
                    permits: Some(1),
                    ttl: secs(8),
                },
            ],
            in_use: 3,
        };
        sem.count_waiters(Some(0));
        vec![row("job:a", 42, Some(15_000), 75, 1), hot, fair, rw, sem]
    }

    fn names(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.name.as_str()).collect()
    }

    fn view(rows: Vec<Row>) -> View {
        let mut view = View::new(&TopArgs {
            prefix: String::new(),
            interval: Duration::from_secs(1),
            lease: None,
            sort: SortBy::Name,
            kind: None,
            json: false,
        });
        view.rows = rows;
        view.server = "s".into();
        view.resort();
        view
    }

    /// The screen of `view` drawn on a `width` x `height` test terminal.
    fn screen(view: &mut View, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| view.render(frame)).unwrap();
        buffer_lines(terminal.backend().buffer())
    }

    fn line_with<'a>(lines: &'a [String], text: &str) -> &'a str {
        lines
            .iter()
            .find(|line| line.contains(text))
            .unwrap_or_else(|| panic!("no line with {text:?}:\n{}", lines.join("\n")))
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
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
        // `w`: the most waiters first (the busiest lock on top); again: fewest first.
        sort_rows(&mut rows, SortBy::Waiters, false);
        assert_eq!(names(&rows), ["a", "c", "b"]);
        sort_rows(&mut rows, SortBy::Waiters, true);
        assert_eq!(names(&rows), ["b", "c", "a"]);
        let mut uncounted = row("d", 1, None, 0, 0);
        uncounted.waiters = None;
        rows.push(uncounted);
        sort_rows(&mut rows, SortBy::Waiters, false);
        assert_eq!(names(&rows), ["a", "c", "b", "d"], "uncounted last");
        rows.pop();
        // A name's kinds in their order.
        let mut fair = row("a", 1, None, 0, 0);
        fair.kind = LockKind::Fair;
        rows.push(fair);
        sort_rows(&mut rows, SortBy::Name, false);
        let kinds: Vec<LockKind> = rows.iter().map(|r| r.kind).collect();
        assert_eq!(kinds[..2], [LockKind::Lock, LockKind::Fair]);
    }

    #[test]
    fn the_table_shows_each_column_and_kind() {
        let mut rows = family();
        rows[0].hold = Some(Hold {
            held: Duration::from_secs(75),
            at_least: true,
        });
        let mut plain = row("job:bb", 7, None, 3, 0);
        plain.hold = None;
        rows.push(plain);
        let shown: Vec<&Row> = rows.iter().collect();
        let lines = table_lines(&shown, Some(Duration::from_secs(30)));

        assert_eq!(
            lines,
            [
                "KIND  NAME      HOLDER             TOKEN  TTL                      HOLD  WAITERS",
                "lock  job:a     owner-of-job:a        42  [#####.....]  15.0s   >=1m15s        1",
                "hot   job:hot   c-hot (kept)           7  [#######...]  20.0s     1m30s        1",
                "fair  job:fair  owner-of-job:fair      9  [#########.]  25.0s        4s        1",
                "rw    job:rw    2 readers              -  [##########]  29.0s        2s        2",
                "sem   job:sem   3 permits              -  [####......]  10.0s        1s        0",
                "lock  job:bb    owner-of-job:bb        7  [no expiry ]      -         -        0",
            ]
        );

        // A token of today (the server's clock in microseconds) is shown whole.
        let today = row("job:now", 1_795_908_654_457_602, Some(1_000), 0, 0);
        let lines = table_lines(&[&today], Some(Duration::from_secs(30)));
        assert!(lines[1].contains(" 1795908654457602  "), "{lines:?}");
    }

    #[test]
    fn a_snapshot_of_many_locks_has_one_header_and_every_row() {
        let rows: Vec<Row> = (0..2500)
            .map(|n| row(&format!("job:{n:04}"), n, Some(1_000), 0, 0))
            .collect();
        let shown: Vec<&Row> = rows.iter().collect();
        let lines = table_lines(&shown, None);
        assert_eq!(lines.len(), 2501);
        assert_eq!(lines.iter().filter(|l| l.starts_with("KIND")).count(), 1);
        assert!(lines[2500].starts_with("lock  job:2499"), "{}", lines[2500]);
        let none = table_lines(&[], None);
        assert_eq!(none.len(), 1);
        assert!(none[0].starts_with("KIND  NAME"), "{none:?}");
    }

    #[test]
    fn the_view_shows_each_kind_and_the_selected_lock_in_the_detail_pane() {
        let mut view = view(family());
        // Sorted by name: job:a first, selected.
        let lines = screen(&mut view, 120, 30);
        for (kind, name) in [
            ("lock", "job:a"),
            ("hot", "job:hot"),
            ("fair", "job:fair"),
            ("rw", "job:rw"),
            ("sem", "job:sem"),
        ] {
            let line = line_with(&lines, &format!(" {name} "));
            assert!(line.contains(&format!("{kind} ")), "{line}");
        }
        assert!(line_with(&lines, "job:a ").starts_with("> lock"));
        assert!(line_with(&lines, " lock job:a ─").starts_with(" lock job:a ─"));
        line_with(
            &lines,
            "holder   owner-of-job:a  token 42  lease left 15.0s",
        );
        line_with(&lines, "q quit  Up/Down select");
        assert!(lines[0].starts_with("lockctl top  s  5 in use  prefix ``  kind all  sort name"));

        // Down: job:fair, its queue in order.
        assert_eq!(view.key(key(KeyCode::Down)), Action::Redraw);
        let lines = screen(&mut view, 120, 30);
        assert!(line_with(&lines, "job:fair ").starts_with("> fair"));
        line_with(&lines, " fair job:fair ─");
        line_with(&lines, "queue    1 waiter, the next holder first");
        line_with(&lines, "  1. c-next:3  keeps its place 4.2s");

        view.key(key(KeyCode::Down));
        let lines = screen(&mut view, 120, 30);
        line_with(
            &lines,
            "keeper   client c-hot keeps it between its uses (hot lock)",
        );
        line_with(
            &lines,
            "token    7, the same for every use while kept; kept for 1m30s",
        );

        view.key(key(KeyCode::Down));
        let lines = screen(&mut view, 120, 30);
        line_with(&lines, "writer   none");
        line_with(&lines, "readers  2");
        line_with(&lines, "  c-r1:1  lease left 29.0s");
        line_with(
            &lines,
            "waiting  1 writer (new readers wait behind them), 2 clients subscribed",
        );
        line_with(&lines, "  c-w:4  keeps its place 3.0s");

        view.key(key(KeyCode::End));
        let lines = screen(&mut view, 120, 30);
        line_with(&lines, "permits  3 in use by 2 holders");
        line_with(&lines, "  c-p1:1  2 permits  lease left 10.0s");

        // The kind filter: only the semaphore, still selected.
        for _ in 0..5 {
            view.key(key(KeyCode::Char('f')));
        }
        assert_eq!(view.kind, Some(LockKind::Sem));
        let lines = screen(&mut view, 120, 30);
        assert!(lines[0].contains("1 in use") && lines[0].contains("kind sem"));
        assert!(!lines.iter().any(|l| l.contains("job:a ")));
        view.key(key(KeyCode::Char('f')));
        assert_eq!(view.kind, Some(LockKind::Leader));
        view.key(key(KeyCode::Char('f')));
        assert_eq!(view.kind, None);

        // Nothing in use.
        let mut empty = super::tests::view(Vec::new());
        let lines = screen(&mut empty, 80, 12);
        line_with(&lines, "KIND  NAME");
        line_with(&lines, "(no locks in use)");
    }

    #[test]
    fn the_view_scrolls_to_the_selection_on_a_small_screen() {
        let rows = (0..40)
            .map(|n| row(&format!("job:{n:02}"), n, Some(1_000), 0, 0))
            .collect();
        let mut view = view(rows);
        view.key(key(KeyCode::End));
        let lines = screen(&mut view, 100, 20);
        assert!(line_with(&lines, "job:39 ").starts_with("> lock"));
        assert!(!lines.iter().any(|l| l.contains("job:00 ")));
        view.key(key(KeyCode::Home));
        let lines = screen(&mut view, 100, 20);
        assert!(line_with(&lines, "job:00 ").starts_with("> lock"));
    }

    #[test]
    fn the_json_of_a_plain_lock_keeps_its_fields() {
        let rows = family();
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({
                "kind": "lock", "name": "job:a", "key": "lock:{job:a}",
                "owner": "owner-of-job:a", "fencing_token": 42, "ttl_ms": 15000, "waiters": 1,
            })
        );
        assert_eq!(json[1]["kind"], "hot");
        assert_eq!(json[1]["keeper"], "c-hot");
        assert_eq!(
            json[2]["queue"],
            serde_json::json!([{"owner": "c-next:3", "place_ttl_ms": 4200}])
        );
        assert_eq!(json[3]["readers"][1]["owner"], "c-r2:1");
        assert_eq!(json[3]["owner"], serde_json::Value::Null);
        assert_eq!(json[3]["waiting_writers"][0]["place_ttl_ms"], 3000);
        assert_eq!(json[4]["in_use"], 3);
        assert_eq!(json[4]["holders"][0]["permits"], 2);
    }

    /// The rows of what lock-core lists: each kind, a hot lock's keeper.
    #[tokio::test(flavor = "current_thread")]
    async fn rows_of_each_listed_kind() {
        let store = distlock_core::MemoryStore::new();
        let client = LockClient::builder().memory(store.clone()).unwrap();
        let hot = LockClient::builder()
            .keep_hot(Duration::from_secs(60))
            .memory(store)
            .unwrap();
        hot.lock("k:hot")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let _plain = client.lock("k:plain").acquire().await.unwrap();
        let _fair = client.fair_lock("k:fair").acquire().await.unwrap();
        let _read = client
            .read_write_lock("k:rw")
            .read()
            .acquire()
            .await
            .unwrap();
        let _permits = client
            .semaphore("k:sem", 4)
            .permits(3)
            .acquire()
            .await
            .unwrap();
        let listed = client.admin().list_all("k:").await.unwrap();
        let rows: Vec<Row> = listed.into_iter().filter_map(Row::of).collect();
        let kinds: Vec<(LockKind, String)> =
            rows.iter().map(|r| (r.kind, r.holder_text())).collect();
        assert_eq!(
            kinds,
            [
                (LockKind::Fair, _fair.owner().to_owned()),
                (LockKind::Hot, format!("{} (kept)", hot.id())),
                (LockKind::Lock, _plain.owner().to_owned()),
                (LockKind::Rw, "1 reader".to_owned()),
                (LockKind::Sem, "3 permits".to_owned()),
            ]
        );
    }

    #[test]
    fn the_bar_is_full_at_the_lease_and_never_empty_while_held() {
        let lease = Duration::from_secs(30);
        assert_eq!(bar(Some(lease), lease), "[##########]");
        assert_eq!(bar(Some(Duration::from_secs(60)), lease), "[##########]");
        assert_eq!(bar(Some(Duration::from_millis(10)), lease), "[#.........]");
        assert_eq!(bar(Some(Duration::ZERO), lease), "[..........]");
        // Each lock's bar is drawn against its own lease: the longest TTL seen
        // of its holder; `--lease` draws every bar against one.
        let mut clock = HoldClock::default();
        let now = Instant::now();
        let mut rows = vec![
            row("short", 1, Some(1_000), 0, 0),
            row("long", 2, Some(60_000), 0, 0),
        ];
        clock.update(&mut rows, now);
        // A second later: a second of the short lease is gone, the long one renewed.
        let mut later = vec![
            row("short", 1, Some(500), 0, 0),
            row("long", 2, Some(60_000), 0, 0),
        ];
        clock.update(&mut later, now + Duration::from_secs(1));
        assert_eq!(later[0].lease, Some(Duration::from_secs(1)));
        assert_eq!(ttl_text(&later[0], None), "[#####.....]   0.5s");
        // Before: against a fixed 30 s, a full one-second lease was one mark.
        assert_eq!(ttl_text(&rows[0], None), "[##########]   1.0s");
        assert_eq!(ttl_text(&later[1], None), "[##########]  60.0s");
        assert_eq!(
            ttl_text(&later[1], Some(Duration::from_secs(120))),
            "[#####.....]  60.0s"
        );
        // A new holder (a new token) starts its own lease.
        let mut next = vec![row("short", 3, Some(300), 0, 0)];
        clock.update(&mut next, now + Duration::from_secs(2));
        assert_eq!(next[0].lease, Some(Duration::from_millis(300)));
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
        // A lock of another kind with the same name is another lock.
        let mut fair = row("a", 2, Some(1000), 0, 0);
        fair.kind = LockKind::Fair;
        let mut rows = vec![rows.remove(0), fair];
        clock.update(&mut rows, start + Duration::from_secs(10));
        assert_eq!(rows[0].hold.unwrap().held, Duration::from_secs(3));
        assert_eq!(rows[1].hold.unwrap().held, Duration::ZERO);
    }

    #[test]
    fn keys_sort_filter_and_quit() {
        let char_key = |c| key(KeyCode::Char(c));
        let mut view = view(vec![
            row("a", 2, Some(9_000), 1, 0),
            row("b", 1, Some(1_000), 2, 3),
        ]);
        assert_eq!(view.key(char_key('t')), Action::Redraw);
        assert_eq!(names(&view.rows), ["b", "a"]);
        assert_eq!(view.key(char_key('t')), Action::Redraw);
        assert_eq!(names(&view.rows), ["a", "b"]);
        assert_eq!(view.key(char_key('s')), Action::Redraw);
        assert_eq!(view.sort, SortBy::Hold);
        assert_eq!(view.key(char_key('/')), Action::Redraw);
        assert_eq!(view.key(char_key('j')), Action::Redraw);
        assert_eq!(
            view.key(char_key('q')),
            Action::Redraw,
            "typed into the filter"
        );
        assert_eq!(view.key(key(KeyCode::Enter)), Action::Refresh);
        assert_eq!(view.filter, "jq");
        assert_eq!(view.key(char_key('q')), Action::Quit);
        assert_eq!(
            view.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        let lines = screen(&mut view, 60, 10);
        assert!(lines.iter().all(|l| l.chars().count() <= 60));
        assert!(lines[0].contains("prefix `jq`"), "{}", lines[0]);
    }
}
