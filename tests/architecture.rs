//! The workspace's library code depends on itself one way.
//!
//! Reads the sources of each library crate (lock-core, lock-tower, lock-fence,
//! lock-cli, lock-macros), resolves every `crate::`, `super::` and `self::` path used
//! outside `#[cfg(test)] mod tests` to the file that defines it (items
//! re-exported by a `pub use` are followed to their module), and checks:
//!
//! - **No import cycle between files**, in any of the crates. A file may use
//!   what its own folder's `mod.rs` (or the crate root) defines: that is the
//!   folder's face, not a dependency between rooms.
//! - **No import cycle between lock-core's top-level modules** (its rooms),
//!   and the low ones never reach up to the protocol or the public API.
//! - **A backend imports no protocol or API module**: `backend/` uses only the
//!   vocabulary below it (names, leases, errors, inspection types, the wire
//!   conventions, the waiters and their wake-ups, supervised tasks).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A crate's sources: file path relative to `src` -> text (tests removed).
struct Crate {
    name: &'static str,
    root: &'static str,
    files: BTreeMap<String, String>,
}

impl Crate {
    fn read(dir: &str, name: &'static str, root: &'static str) -> Crate {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("src");
        let mut files = BTreeMap::new();
        collect(&src, &src, &mut files);
        Crate { name, root, files }
    }

    /// The module path of `file` (`backend/redis/command.rs` ->
    /// `[backend, redis, command]`; `mod.rs` and the root are their folder).
    fn module_of(&self, file: &str) -> Vec<String> {
        let mut parts: Vec<String> = file
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        if parts.last().is_some_and(|p| p == "mod") || file == self.root {
            parts.pop();
        }
        parts
    }

    /// The file that defines module `path`, if any.
    fn file_of(&self, path: &[String]) -> Option<String> {
        if path.is_empty() {
            return Some(self.root.to_owned());
        }
        let joined = path.join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .find(|candidate| self.files.contains_key(candidate))
    }

    /// Item name -> module path, from the `pub use` lines of the file of `module`.
    fn reexports(&self, module: &[String]) -> BTreeMap<String, Vec<String>> {
        let mut map = BTreeMap::new();
        let Some(file) = self.file_of(module) else {
            return map;
        };
        for stmt in self.files[&file].split(';') {
            let stmt = stmt.trim();
            let Some(rest) = stmt
                .strip_prefix("pub use ")
                .or_else(|| stmt.strip_prefix("pub(crate) use "))
            else {
                continue;
            };
            for path in expand(rest) {
                let segments: Vec<&str> = path.split("::").map(str::trim).collect();
                let Some((item, module_path)) = segments.split_last() else {
                    continue;
                };
                let mut target: Vec<String> = Vec::new();
                let mut segments = module_path.iter().peekable();
                match segments.peek() {
                    Some(&&"crate") => {
                        segments.next();
                    }
                    Some(&&"self") => {
                        segments.next();
                        target.extend(module.iter().cloned());
                    }
                    Some(&&"super") => {
                        segments.next();
                        target.extend(module.iter().cloned());
                        target.pop();
                    }
                    _ => target.extend(module.iter().cloned()),
                }
                target.extend(segments.map(|s| (*s).to_owned()));
                let item = item.split(" as ").last().unwrap_or(item).trim();
                map.insert(item.to_owned(), target);
            }
        }
        map
    }

    /// The file a path used in `file` points at: `segments` after `crate`,
    /// `super` or `self` resolved to a module, then its longest prefix that
    /// is a file; an item re-exported there is followed to its module.
    fn resolve(&self, file: &str, path: &str) -> Option<String> {
        let module = self.module_of(file);
        let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
        let mut base: Vec<String> = match segments.first().copied() {
            Some("crate") => {
                segments.remove(0);
                Vec::new()
            }
            Some("self") => {
                segments.remove(0);
                module.clone()
            }
            Some("super") => {
                let mut base = module.clone();
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    base.pop();
                }
                base
            }
            _ => return None,
        };
        let mut deepest = base.clone();
        for segment in &segments {
            base.push((*segment).to_owned());
            if self.file_of(&base).is_some() {
                deepest = base.clone();
            } else {
                // An item of `deepest`: follow it when `deepest` re-exports it.
                if let Some(target) = self.reexports(&deepest).get(*segment) {
                    if self.file_of(target).is_some() && *target != deepest {
                        return self.file_of(target);
                    }
                }
                break;
            }
        }
        self.file_of(&deepest)
    }

    /// File -> the files it imports (not its own folder's face, see above).
    fn graph(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (file, text) in &self.files {
            let module = self.module_of(file);
            let faces: BTreeSet<String> = (0..=module.len())
                .filter_map(|n| self.file_of(&module[..n]))
                .collect();
            for path in paths(text) {
                let Some(target) = self.resolve(file, &path) else {
                    continue;
                };
                if target != *file && !faces.contains(&target) {
                    graph.entry(file.clone()).or_default().insert(target);
                }
            }
        }
        graph
    }
}

fn collect(src: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap().display().to_string();
            let text = fs::read_to_string(&path).unwrap();
            out.insert(rel, strip(&text));
        }
    }
}

/// The code of a file without its test module and its comments.
fn strip(text: &str) -> String {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    code.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let path = path.trim();
    let Some(open) = path.find('{') else {
        return vec![path.to_owned()];
    };
    let prefix = &path[..open];
    let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

/// Every `crate::`, `super::` and `self::` path in `code`, groups expanded.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            // Not the tail of a longer identifier (`my_crate::`).
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            // `super::super::x` is read once, from its first `super`.
            if start == "super::" && code[..at].ends_with("super::") {
                continue;
            }
            let mut end = at;
            let mut depth = 0;
            for (i, c) in code[at..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                        end = at + i;
                        break;
                    }
                    _ => {}
                }
                end = at + i + c.len_utf8();
            }
            let path = code[at..end].trim_end_matches(':');
            out.extend(expand(path));
        }
    }
    out
}

/// A cycle in `graph`, if any.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(1) => {
                    let start = stack.iter().position(|m| m == next).unwrap();
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

fn crates() -> Vec<Crate> {
    vec![
        Crate::read("lock-core", "distlock-core", "lib.rs"),
        Crate::read("lock-tower", "distlock-tower", "lib.rs"),
        Crate::read("lock-fence", "distlock-fence", "lib.rs"),
        Crate::read("lock-cli", "distlock-cli", "main.rs"),
        Crate::read("lock-macros", "distlock-macros", "lib.rs"),
        Crate::read("lock-chaos", "lock-chaos", "main.rs"),
    ]
}

/// The top-level module (room) of a file of lock-core.
fn room(file: &str) -> String {
    file.split('/')
        .next()
        .unwrap_or(file)
        .trim_end_matches(".rs")
        .to_owned()
}

#[test]
fn no_library_crate_has_an_import_cycle_between_files() {
    let mut problems = Vec::new();
    for krate in crates() {
        let graph = krate.graph();
        assert!(
            !graph.is_empty(),
            "{}: no imports found (the reader is broken)",
            krate.name
        );
        if let Some(cycle) = cycle(&graph) {
            problems.push(format!("{}: {}", krate.name, cycle.join(" -> ")));
        }
    }
    assert!(
        problems.is_empty(),
        "import cycles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn lock_core_rooms_depend_on_each_other_one_way() {
    let core = Crate::read("lock-core", "distlock-core", "lib.rs");
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, targets) in core.graph() {
        for target in targets {
            let (from, to) = (room(&file), room(&target));
            if from != to && to != "lib" {
                rooms.entry(from).or_default().insert(to);
            }
        }
    }
    if let Some(cycle) = cycle(&rooms) {
        panic!(
            "import cycle between rooms: {}\n{rooms:#?}",
            cycle.join(" -> ")
        );
    }
    // The protocol never reaches up to the public API.
    let low = [
        "backend",
        "held",
        "watchdog",
        "janitor",
        "scope",
        "waiters",
        "wakeups",
        "supervised",
        "client_core",
        "hot",
        "wire",
    ];
    let high = [
        "client", "lock", "guard", "multi", "acquire", "release", "family", "leader",
    ];
    for low in low {
        for high in high {
            assert!(
                !rooms.get(low).is_some_and(|deps| deps.contains(high)),
                "{low} depends on {high}: {rooms:#?}"
            );
        }
    }
}

#[test]
fn a_backend_imports_no_protocol_or_api_module() {
    let core = Crate::read("lock-core", "distlock-core", "lib.rs");
    let allowed = [
        "backend",
        "layout",
        "name",
        "slot",
        "lease",
        "info",
        "error",
        "sync",
        "supervised",
        "waiters",
        "wakeups",
        "wire",
    ];
    let mut problems = Vec::new();
    for (file, targets) in core.graph() {
        if room(&file) != "backend" {
            continue;
        }
        for target in targets {
            let to = room(&target);
            if !allowed.contains(&to.as_str()) {
                problems.push(format!("{file} imports {target}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The reader itself: a path through a re-export lands on the defining
/// file, and groups expand.
#[test]
fn the_reader_resolves_paths_and_groups() {
    assert_eq!(
        expand("crate::{a::{B, c::D}, e}"),
        ["crate::a::B", "crate::a::c::D", "crate::e"]
    );
    let core = Crate::read("lock-core", "distlock-core", "lib.rs");
    assert_eq!(
        core.resolve("acquire.rs", "crate::LockError").as_deref(),
        Some("error.rs")
    );
    assert_eq!(
        core.resolve(
            "backend/standalone/mod.rs",
            "super::redis::command::Replies"
        )
        .as_deref(),
        Some("backend/redis/command.rs")
    );
    assert_eq!(
        core.resolve("client/mod.rs", "self::admin::LockAdmin")
            .as_deref(),
        Some("client/admin.rs")
    );
}

/// The resource side does not know the lock side: distlock-fence's library
/// depends on no other distlock crate (a fencing token is a `u64`), so a
/// service that only checks tokens does not pull in the lock client. Its
/// tests may use the locks (dev-dependencies).
#[test]
fn the_fence_crate_depends_on_no_lock_crate() {
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("lock-fence/Cargo.toml"))
            .expect("lock-fence/Cargo.toml");
    let mut section = String::new();
    let mut offending = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
        } else if section == "[dependencies]"
            && (line.starts_with("distlock") || line.starts_with("lock-"))
        {
            offending.push(line.to_owned());
        }
    }
    assert!(
        offending.is_empty(),
        "distlock-fence depends on lock crates: {offending:?}"
    );
}
