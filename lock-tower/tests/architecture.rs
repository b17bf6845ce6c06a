//! The crate's files depend on each other one way, as tower-http's `limit/`
//! does: layer -> service -> future -> {the flavour's answer, body, status}.
//!
//! Reads the sources, collects each file's `crate::` paths (outside its
//! tests and comments), maps items re-exported by `lib.rs` to the file that
//! defines them, and looks for a cycle and for arrows that run back up.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Every `crate::...` path used in `src` (outside `#[cfg(test)]` modules and
/// comments), as the first segment after `crate::`, with `{a, b}` groups
/// expanded.
fn crate_paths(src: &str) -> Vec<String> {
    let code = src.split("#[cfg(test)]\nmod tests").next().unwrap_or(src);
    // Doc links are not dependencies.
    let code: String = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    out.push(first.to_owned());
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// Item name -> defining file, from `pub use file::{A, B}` in lib.rs.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some((_, path)) = stmt.rsplit_once("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            if !item.is_empty() {
                map.insert(item.to_owned(), module.trim().to_owned());
            }
        }
    }
    map
}

/// File (without `.rs`) -> the files it imports.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let items = reexports(&lib);
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        assert!(
            path.extension().is_some_and(|e| e == "rs"),
            "a folder appeared in src/; extend this test to it: {}",
            path.display()
        );
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        files.insert(name, fs::read_to_string(&path).unwrap());
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, text) in &files {
        let deps = graph.entry(from.clone()).or_default();
        if from == "lib" {
            continue;
        }
        for path in crate_paths(text) {
            let to = items.get(&path).cloned().unwrap_or(path);
            assert!(to != "lib", "{from} imports through the crate root: {to}");
            if &to != from && files.contains_key(&to) {
                deps.insert(to);
            }
        }
    }
    graph
}

/// Everything `node` imports, directly or not.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, node: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![node.to_owned()];
    while let Some(next) = todo.pop() {
        for dep in graph.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn files_depend_on_each_other_one_way() {
    let graph = graph();
    for file in graph.keys().filter(|file| *file != "lib") {
        assert!(
            !reach(&graph, file).contains(file),
            "import cycle through {file}: {graph:#?}"
        );
    }
}

#[test]
fn arrows_run_from_the_layer_down() {
    let graph = graph();
    let below = |high: &str, low: &str| {
        assert!(
            !reach(&graph, low).contains(high),
            "{low} reaches up to {high}: {graph:#?}"
        );
    };
    // The layer builds the service, the service starts the future; neither
    // is known below.
    for low in [
        "service", "config", "future", "flavour", "http", "grpc", "plain", "body", "status",
        "release",
    ] {
        below("layer", low);
    }
    for low in [
        "future", "flavour", "http", "grpc", "plain", "body", "status",
    ] {
        below("service", low);
    }
    // The flavours build their answers without the future that asks for
    // them.
    for low in [
        "flavour", "http", "grpc", "plain", "body", "status", "release",
    ] {
        below("future", low);
    }
    // The leader-only layer stands beside the lock's: nothing imports it.
    for file in graph
        .keys()
        .filter(|file| *file != "lib" && *file != "leader")
    {
        below("leader", file);
    }
    // The leaves import nothing of the crate.
    for leaf in ["status", "release", "token", "extract", "mode"] {
        assert!(
            graph.get(leaf).is_none_or(BTreeSet::is_empty),
            "{leaf} is not a leaf: {graph:#?}"
        );
    }
}
