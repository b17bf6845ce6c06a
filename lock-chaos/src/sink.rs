//! Where events go: one JSON line each, appended to a file with one `write` per line, so a
//! worker killed with `SIGKILL` loses nothing it recorded.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::event::Event;

/// A shared, append-only event log.
#[derive(Clone)]
pub struct EventSink {
    file: Arc<Mutex<File>>,
}

impl EventSink {
    /// Opens (creating or appending to) the log at `path`.
    pub fn open(path: &Path) -> anyhow::Result<EventSink> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(EventSink {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends one event. A failed write is reported on stderr, not fatal: the checker
    /// then sees a gap, which it treats as unknown.
    pub fn emit(&self, event: &Event) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&line) {
            eprintln!("lock-chaos: cannot record an event: {e}");
        }
    }
}

/// Reads every event of a log; lines that do not parse (a torn last line) are skipped.
pub fn read_events(path: &Path) -> anyhow::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}
