//! The crate's modules depend on each other one way: no import cycle.
//!
//! Reads the sources, collects each top-level module's `crate::` imports
//! (outside its tests), maps re-exported items to the module that defines
//! them (from `lib.rs`'s `pub use` lines), and looks for a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Every `crate::...` path used in `src` (outside `#[cfg(test)]` modules),
/// as the first segment after `crate::`, with `{a, b}` groups expanded.
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

/// Item name -> defining module, from `pub use module::{A, B}` in lib.rs.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
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

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn modules_depend_on_each_other_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let items = reexports(&lib);
    let mut files = Vec::new();
    sources(&src, &mut files);
    let module_of = |file: &str| -> String {
        let rel = Path::new(file).strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        first.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|(f, _)| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in &files {
        let from = module_of(file);
        if from == "lib" {
            continue;
        }
        for path in crate_paths(text) {
            let to = items.get(&path).cloned().unwrap_or(path);
            if to != from && modules.contains(&to) && to != "lib" {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a back edge.
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
    for module in graph.keys() {
        if !state.contains_key(module) {
            let cycle = visit(module, &graph, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle: {}\ngraph: {graph:#?}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
    // The protocol never reaches up to the public API.
    for low in [
        "backend", "held", "watchdog", "janitor", "scope", "wake", "task", "core",
    ] {
        for high in ["client", "lock", "guard", "multi", "acquire", "release"] {
            assert!(
                !graph.get(low).is_some_and(|deps| deps.contains(high)),
                "{low} depends on {high}: {graph:#?}"
            );
        }
    }
}
