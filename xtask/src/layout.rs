//! `cargo xtask layout`: the house rules a reviewer would otherwise check by
//! hand. In daemon/src, imports run one way (no cycle among the top-level
//! modules, nor among the files of one folder); in every crate, no source file
//! is over 500 lines and no function over 100; and no `static` in daemon/src
//! holds process-wide state unless `layout/statics.rs` says why. A test runs
//! it, so CI does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod parse;
mod statics;
use parse::{parse, Parsed};

pub const MAX_FILE_LINES: usize = 500;
pub const MAX_FN_LINES: usize = 100;

/// The crates whose sizes are checked, and the one whose imports are.
const SOURCE_DIRS: [&str; 6] = [
    "daemon/src",
    "protocol/src",
    "client/src",
    "cli/src",
    "bench/src",
    "xtask/src",
];
const ONE_WAY_DIR: &str = "daemon/src";

/// A module path inside one crate: `["server", "listeners"]`; the root is `[]`.
type ModPath = Vec<String>;

/// Every breach of the rules under `root`, one line each (empty: all hold).
pub fn check(root: &Path) -> Result<Vec<String>, String> {
    check_dirs(root, &SOURCE_DIRS, ONE_WAY_DIR)
}

fn check_dirs(root: &Path, sized: &[&str], one_way: &str) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    for dir in sized {
        for file in rust_files(&root.join(dir))? {
            let parsed = parse(&file)?;
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            if parsed.lines > MAX_FILE_LINES {
                problems.push(format!(
                    "{shown}: {} lines (at most {MAX_FILE_LINES})",
                    parsed.lines
                ));
            }
            for (name, line, length) in parsed.functions {
                if length > MAX_FN_LINES {
                    problems.push(format!(
                        "{shown}:{line}: fn {name} is {length} lines (at most {MAX_FN_LINES})"
                    ));
                }
            }
        }
    }
    problems.extend(cycles(root, &root.join(one_way))?);
    problems.extend(unjustified_statics(&root.join(one_way))?);
    Ok(problems)
}

/// The `static` items of `src` not listed in `statics::JUSTIFIED`.
fn unjustified_statics(src: &Path) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    for file in rust_files(src)? {
        let relative = file
            .strip_prefix(src)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (name, line) in parse(&file)?.statics {
            problems.extend(statics::unjustified(&relative, &name, line));
        }
    }
    Ok(problems)
}

/// The import cycles of one crate: among its top-level modules, and among
/// the files of each folder (a module and the modules inside it are one node
/// there: a folder's `mod.rs` is the map of its files).
fn cycles(root: &Path, src: &Path) -> Result<Vec<String>, String> {
    let crate_ = Crate::load(src)?;
    let edges = crate_.edges();
    let mut problems = Vec::new();
    problems.extend(report(root, "modules", &edges, |m| m.first().cloned()));
    let folders: BTreeSet<ModPath> = crate_
        .modules
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    for folder in folders {
        if folder.is_empty() {
            continue; // the top-level modules, above
        }
        // The folder's mod.rs is a node too: a file that uses its mod.rs
        // while mod.rs uses it is a cycle like any other.
        let node = |m: &ModPath| match m.get(folder.len()) {
            _ if !m.starts_with(&folder) => None,
            Some(file) => Some(file.clone()),
            None => Some("mod.rs".to_owned()),
        };
        problems.extend(report(root, &folder.join("/"), &edges, node));
    }
    Ok(problems)
}

/// One line per strongly connected group of the graph `edges` seen through
/// `node` (which names a module's node, or leaves it out).
fn report(
    root: &Path,
    label: &str,
    edges: &BTreeMap<(ModPath, ModPath), Location>,
    node: impl Fn(&ModPath) -> Option<String>,
) -> Vec<String> {
    let mut graph: BTreeMap<String, BTreeMap<String, &Location>> = BTreeMap::new();
    for ((from, to), at) in edges {
        if let (Some(a), Some(b)) = (node(from), node(to)) {
            if a != b {
                graph.entry(a).or_default().entry(b).or_insert(at);
            }
        }
    }
    strongly_connected(&graph)
        .into_iter()
        .filter(|group| group.len() > 1)
        .map(|group| {
            let witnesses: Vec<String> = group
                .iter()
                .flat_map(|a| {
                    let group = &group;
                    graph
                        .get(a)
                        .into_iter()
                        .flatten()
                        .filter(move |(b, _)| group.contains(*b))
                        .map(move |(b, at)| format!("{a} -> {b} ({})", at.show(root)))
                })
                .collect();
            format!("import cycle in {label}: {}", witnesses.join(", "))
        })
        .collect()
}

/// Tarjan's algorithm, iterative enough for a crate's few dozen nodes.
fn strongly_connected(
    graph: &BTreeMap<String, BTreeMap<String, &Location>>,
) -> Vec<BTreeSet<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, &'g Location>>,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        groups: Vec<BTreeSet<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) -> usize {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            let mut low = n;
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                match self.index.get(w.as_str()) {
                    None => low = low.min(self.visit(w)),
                    Some(&(i, _)) if self.stack.contains(&w.as_str()) => low = low.min(i),
                    Some(_) => {}
                }
            }
            self.index.insert(v, (n, low));
            if low == n {
                let mut group = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    group.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                self.groups.push(group);
            }
            low
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        groups: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.groups
}

#[derive(Clone, Debug)]
struct Location {
    file: PathBuf,
    line: usize,
}

impl Location {
    fn show(&self, root: &Path) -> String {
        let file = self.file.strip_prefix(root).unwrap_or(&self.file);
        format!("{}:{}", file.display(), self.line)
    }
}

/// A library crate's modules, each parsed.
struct Crate {
    modules: BTreeMap<ModPath, (PathBuf, Parsed)>,
}

impl Crate {
    fn load(src: &Path) -> Result<Self, String> {
        let mut modules = BTreeMap::new();
        for file in rust_files(src)? {
            let relative = file.strip_prefix(src).map_err(|e| e.to_string())?;
            let Some(path) = module_path(relative) else {
                continue;
            };
            modules.insert(path, (file.clone(), parse(&file)?));
        }
        Ok(Crate { modules })
    }

    /// Module to module, with where the first such use is.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), Location> {
        let mut edges = BTreeMap::new();
        for (here, (file, parsed)) in &self.modules {
            for (path, line) in &parsed.paths {
                if let Some(target) = self.resolve(here, path, 0) {
                    if &target != here {
                        edges
                            .entry((here.clone(), target))
                            .or_insert_with(|| Location {
                                file: file.clone(),
                                line: *line,
                            });
                    }
                }
            }
        }
        edges
    }

    /// The module a path named in `here` points into, following `pub use`
    /// re-exports so that `super::Thing` counts against Thing's own file.
    fn resolve(&self, here: &ModPath, path: &[String], depth: usize) -> Option<ModPath> {
        let mut base: ModPath = here.clone();
        let mut rest = path;
        match rest.first().map(String::as_str)? {
            "crate" => {
                base.clear();
                rest = &rest[1..];
            }
            "self" => rest = &rest[1..],
            "super" => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let children = &self.modules.get(here)?.1.children;
                if !children.contains(first) {
                    return None;
                }
            }
        }
        // Down the module tree as far as the path names modules.
        while let Some(next) = rest.first() {
            let mut deeper = base.clone();
            deeper.push(next.clone());
            if !self.modules.contains_key(&deeper) {
                break;
            }
            base = deeper;
            rest = &rest[1..];
        }
        if let (Some(name), true) = (rest.first(), depth < 8) {
            if let Some(target) = self
                .modules
                .get(&base)
                .and_then(|(_, p)| p.reexports.get(name))
            {
                return self.resolve(&base, target, depth + 1).or(Some(base));
            }
        }
        Some(base)
    }
}

/// `server/listeners.rs` -> `server::listeners`; `server/mod.rs` -> `server`;
/// `lib.rs` -> the root. Binaries and test-only files are not modules of the library.
fn module_path(relative: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    if parts.first().map(String::as_str) == Some("bin") || stem == "main" || stem == "tests" {
        return None;
    }
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            out.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests;
