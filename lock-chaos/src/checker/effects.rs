//! Effective injections: which faults hit a lock somebody wanted, decided from the history.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::holds::{task_of_hold, Hold};
use super::report::Row;
use super::windows::Window;
use crate::event::Event;

/// Counts, per row, the injections the trigger called effective and those the history
/// shows effective ([`crate::trigger::effect`] on the target lock, or on any lock when the
/// injection named none; aimed at a worker, the hold must be that worker's).
pub(super) fn decide_effects(
    rows: &mut [Row],
    row_of_fault: &HashMap<String, usize>,
    windows: &[Window],
    holds: &[Hold],
    events: &[Event],
    lease: Duration,
) {
    use crate::trigger::{effect, Interval};
    let min_hold = (lease / 3).as_nanos() as u64;
    let mut held: BTreeMap<&str, Vec<Interval>> = BTreeMap::new();
    for h in holds {
        held.entry(h.name.as_str()).or_default().push(Interval {
            who: (h.worker, task_of_hold(&h.id)),
            start: h.start,
            end: Some(h.end),
        });
    }
    let mut attempts: BTreeMap<&str, Vec<Interval>> = BTreeMap::new();
    for event in events {
        let (t_start, t, worker, task, name) = match event {
            Event::Acquired {
                t_start,
                t,
                worker,
                task,
                name,
                ..
            }
            | Event::AcquireFailed {
                t_start,
                t,
                worker,
                task,
                name,
                ..
            } => (*t_start, *t, *worker, *task, name.as_str()),
            _ => continue,
        };
        attempts.entry(name).or_default().push(Interval {
            who: (worker, task),
            start: t_start,
            end: Some(t),
        });
    }
    for w in windows.iter().filter(|w| !w.failed) {
        let row = &mut rows[row_of_fault[&w.fault]];
        if w.triggered == Some(true) {
            row.triggered += 1;
        }
        let names: Vec<&str> = match &w.lock {
            Some(lock) => vec![lock.as_str()],
            None => held.keys().copied().collect(),
        };
        // Just before the start: a killed holder's hold ends at the kill itself.
        let at = w.start.saturating_sub(1);
        let hit = names.iter().any(|name| {
            effect(
                at,
                min_hold,
                w.worker(),
                held.get(name).map_or(&[][..], Vec::as_slice),
                attempts.get(name).map_or(&[][..], Vec::as_slice),
            )
            .is_effective()
        });
        if hit {
            row.effective += 1;
        }
    }
}
