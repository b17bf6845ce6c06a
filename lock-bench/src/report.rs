//! Figures, percentiles, the table and the JSON lines.

use std::borrow::Cow;
use std::time::Duration;

/// Which direction is better for a figure (for the reader; ratios are plain
/// value / reference either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
    /// A count or check, not a speed.
    Info,
}

/// One figure of one workload for one contender.
#[derive(Debug, Clone)]
pub(crate) struct Metric {
    /// The figure's name; names built at run time (the lock family's
    /// figures and their references) are owned.
    pub(crate) name: Cow<'static, str>,
    pub(crate) unit: &'static str,
    pub(crate) value: f64,
    pub(crate) better: Better,
}

impl Metric {
    pub(crate) fn higher(
        name: impl Into<Cow<'static, str>>,
        unit: &'static str,
        value: f64,
    ) -> Self {
        Metric {
            name: name.into(),
            unit,
            value,
            better: Better::Higher,
        }
    }

    pub(crate) fn lower(
        name: impl Into<Cow<'static, str>>,
        unit: &'static str,
        value: f64,
    ) -> Self {
        Metric {
            name: name.into(),
            unit,
            value,
            better: Better::Lower,
        }
    }

    pub(crate) fn info(name: impl Into<Cow<'static, str>>, unit: &'static str, value: f64) -> Self {
        Metric {
            name: name.into(),
            unit,
            value,
            better: Better::Info,
        }
    }
}

/// The contenders, in table order.
pub(crate) const CONTENDERS: [&str; 5] =
    ["distlock", "rslock", "floor", "redisson", "redisson-fast"];

/// Index of Redisson at its defaults in [`CONTENDERS`] (and in [`Figures`]).
pub(crate) const REDISSON: usize = 3;
/// Index of Redisson with its documented speed settings.
pub(crate) const REDISSON_FAST: usize = 4;

/// One list of figures per contender, in [`CONTENDERS`] order.
pub(crate) type Figures = [Vec<Metric>; 5];

/// Figures of distlock alone (the other columns empty).
pub(crate) fn ours_only(figures: Vec<Metric>) -> Figures {
    [figures, Vec::new(), Vec::new(), Vec::new(), Vec::new()]
}

/// The figures of one workload: one list per contender (in [`CONTENDERS`] order).
#[derive(Debug, Clone)]
pub(crate) struct WorkloadResult {
    pub(crate) id: &'static str,
    pub(crate) title: String,
    pub(crate) figures: Figures,
    /// Notes printed under the workload (settings, references).
    pub(crate) notes: Vec<String>,
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn find<'a>(figures: &'a [Metric], name: &str) -> Option<&'a Metric> {
    figures.iter().find(|m| m.name == name)
}

fn ratio(value: f64, reference: Option<&Metric>) -> Option<f64> {
    let reference = reference?.value;
    (reference != 0.0 && value.is_finite()).then(|| value / reference)
}

fn fmt_value(value: f64) -> String {
    if !value.is_finite() {
        "-".into()
    } else if value.abs() >= 1000.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn fmt_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
}

/// The table: per workload, one row per figure of distlock, with the
/// other contenders' figure of the same name and distlock's ratio to each
/// (x floor, x rslock; x redisson and x redisson-fast when either Redisson
/// contender has figures in the run).
pub(crate) fn table(results: &[WorkloadResult]) -> String {
    // The figure column fits the longest label (52 characters at least).
    let width = results
        .iter()
        .flat_map(|result| &result.figures[0])
        .map(|metric| label(metric).chars().count())
        .max()
        .unwrap_or(0)
        .max(52);
    let redisson = results
        .iter()
        .any(|r| !r.figures[REDISSON].is_empty() || !r.figures[REDISSON_FAST].is_empty());
    let mut columns: Vec<(String, usize)> = vec![
        (CONTENDERS[0].into(), 16),
        (CONTENDERS[1].into(), 10),
        (CONTENDERS[2].into(), 10),
    ];
    if redisson {
        columns.push((CONTENDERS[REDISSON].into(), 10));
        columns.push((CONTENDERS[REDISSON_FAST].into(), 13));
    }
    columns.push(("x floor".into(), 8));
    columns.push(("x rslock".into(), 9));
    if redisson {
        columns.push(("x redisson".into(), 10));
        columns.push(("x redisson-fast".into(), 15));
    }
    let mut out = format!("| {:<4} | {:<width$} |", "", "figure");
    for (name, w) in &columns {
        out.push_str(&format!(" {name:>w$} |"));
    }
    out.push_str(&format!("\n|{}|{}|", "-".repeat(6), "-".repeat(width + 2)));
    for (_, w) in &columns {
        out.push_str(&format!("{}|", "-".repeat(w + 2)));
    }
    out.push('\n');
    for result in results {
        for metric in &result.figures[0] {
            let other = |i: usize| find(&result.figures[i], &metric.name);
            let value = |m: Option<&Metric>| m.map_or_else(|| "-".into(), |m| fmt_value(m.value));
            let mut cells = vec![fmt_value(metric.value), value(other(1)), value(other(2))];
            if redisson {
                cells.push(value(other(REDISSON)));
                cells.push(value(other(REDISSON_FAST)));
            }
            cells.push(fmt_ratio(ratio(metric.value, other(2))));
            cells.push(fmt_ratio(ratio(metric.value, other(1))));
            if redisson {
                cells.push(fmt_ratio(ratio(metric.value, other(REDISSON))));
                cells.push(fmt_ratio(ratio(metric.value, other(REDISSON_FAST))));
            }
            out.push_str(&format!("| {:<4} | {:<width$} |", result.id, label(metric)));
            for (cell, (_, w)) in cells.iter().zip(&columns) {
                out.push_str(&format!(" {cell:>w$} |"));
            }
            out.push('\n');
        }
    }
    out
}

/// A figure's label in the table: name, unit and which way is better.
fn label(metric: &Metric) -> String {
    let arrow = match metric.better {
        Better::Higher => " (higher better)",
        Better::Lower => " (lower better)",
        Better::Info => "",
    };
    format!("{} [{}]{}", metric.name, metric.unit, arrow)
}

/// The notes of every workload, one bullet each.
pub(crate) fn notes(results: &[WorkloadResult]) -> String {
    let mut out = String::new();
    for result in results {
        out.push_str(&format!("- {} {}\n", result.id, result.title));
        for note in &result.notes {
            out.push_str(&format!("  - {note}\n"));
        }
    }
    out
}

/// One JSON object per workload, figure and contender, with the ratios of
/// that figure to the floor, to rslock and to the two Redisson contenders
/// measured in the same run (null where that contender has no such figure).
pub(crate) fn json_lines(results: &[WorkloadResult]) -> Vec<String> {
    let mut lines = Vec::new();
    for result in results {
        for (i, contender) in CONTENDERS.iter().enumerate() {
            for metric in &result.figures[i] {
                let rs = find(&result.figures[1], &metric.name);
                let fl = find(&result.figures[2], &metric.name);
                let rd = find(&result.figures[REDISSON], &metric.name);
                let rf = find(&result.figures[REDISSON_FAST], &metric.name);
                let line = serde_json::json!({
                    "workload": result.id,
                    "contender": contender,
                    "figure": metric.name,
                    "unit": metric.unit,
                    "value": finite(metric.value),
                    "better": match metric.better {
                        Better::Higher => "higher",
                        Better::Lower => "lower",
                        Better::Info => "info",
                    },
                    "x_floor": ratio(metric.value, fl).and_then(finite),
                    "x_rslock": ratio(metric.value, rs).and_then(finite),
                    "x_redisson": ratio(metric.value, rd).and_then(finite),
                    "x_redisson_fast": ratio(metric.value, rf).and_then(finite),
                });
                lines.push(line.to_string());
            }
        }
    }
    lines
}

fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// The figures of one workload with contenders of its own (the PostgreSQL
/// workloads): one list per name of the run's `names`, in that order.
#[derive(Debug, Clone)]
pub(crate) struct NamedResult {
    pub(crate) id: &'static str,
    pub(crate) title: String,
    pub(crate) figures: Vec<Vec<Metric>>,
    pub(crate) notes: Vec<String>,
}

/// The table of [`NamedResult`]s: per workload, one row per figure of the
/// first contender (distlock), with every other contender's figure of the
/// same name and the first contender's ratio to each (`x <name>`).
pub(crate) fn named_table(results: &[NamedResult], names: &[&str]) -> String {
    let width = results
        .iter()
        .filter_map(|result| result.figures.first())
        .flatten()
        .map(|metric| label(metric).chars().count())
        .max()
        .unwrap_or(0)
        .max(52);
    let mut columns: Vec<(String, usize)> = names
        .iter()
        .map(|name| ((*name).to_owned(), name.len().max(10)))
        .collect();
    for name in names.iter().skip(1) {
        let header = format!("x {name}");
        let w = header.len().max(8);
        columns.push((header, w));
    }
    let mut out = format!("| {:<4} | {:<width$} |", "", "figure");
    for (name, w) in &columns {
        out.push_str(&format!(" {name:>w$} |"));
    }
    out.push_str(&format!("\n|{}|{}|", "-".repeat(6), "-".repeat(width + 2)));
    for (_, w) in &columns {
        out.push_str(&format!("{}|", "-".repeat(w + 2)));
    }
    out.push('\n');
    for result in results {
        let Some(first) = result.figures.first() else {
            continue;
        };
        for metric in first {
            let other = |i: usize| {
                result
                    .figures
                    .get(i)
                    .and_then(|figures| find(figures, &metric.name))
            };
            let mut cells = vec![fmt_value(metric.value)];
            for i in 1..names.len() {
                cells.push(other(i).map_or_else(|| "-".into(), |m| fmt_value(m.value)));
            }
            for i in 1..names.len() {
                cells.push(fmt_ratio(ratio(metric.value, other(i))));
            }
            out.push_str(&format!("| {:<4} | {:<width$} |", result.id, label(metric)));
            for (cell, (_, w)) in cells.iter().zip(&columns) {
                out.push_str(&format!(" {cell:>w$} |"));
            }
            out.push('\n');
        }
    }
    out
}

/// The notes of [`NamedResult`]s, one bullet each.
pub(crate) fn named_notes(results: &[NamedResult]) -> String {
    let mut out = String::new();
    for result in results {
        out.push_str(&format!("- {} {}\n", result.id, result.title));
        for note in &result.notes {
            out.push_str(&format!("  - {note}\n"));
        }
    }
    out
}

/// One JSON object per workload, figure and contender of [`NamedResult`]s,
/// with that figure's ratio to each other contender's of the same name
/// (`x_<name>`, `-` as `_`; null where that contender has no such figure).
pub(crate) fn named_json_lines(results: &[NamedResult], names: &[&str]) -> Vec<String> {
    let mut lines = Vec::new();
    for result in results {
        for (i, contender) in names.iter().enumerate() {
            let Some(figures) = result.figures.get(i) else {
                continue;
            };
            for metric in figures {
                let mut line = serde_json::json!({
                    "workload": result.id,
                    "contender": contender,
                    "figure": metric.name,
                    "unit": metric.unit,
                    "value": finite(metric.value),
                    "better": match metric.better {
                        Better::Higher => "higher",
                        Better::Lower => "lower",
                        Better::Info => "info",
                    },
                });
                for (j, other) in names.iter().enumerate() {
                    if j == i {
                        continue;
                    }
                    let reference = result
                        .figures
                        .get(j)
                        .and_then(|figures| find(figures, &metric.name));
                    line[format!("x_{}", other.replace('-', "_"))] =
                        serde_json::json!(ratio(metric.value, reference).and_then(finite));
                }
                lines.push(line.to_string());
            }
        }
    }
    lines
}
