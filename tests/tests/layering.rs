//! The layering of the `weir` crate, kept: every `crate::` path in a top-level module of
//! `framework/core/src` names a module of its own layer or of a layer below, and the top-level
//! modules import each other without a cycle. The layers are the ones the crate's top doc
//! states (`framework/core/src/lib.rs`); a new top-level module must be placed in one here.
//!
//! Paths are read from the source text with comments and string literals removed, so a doc
//! link or a message that names a module is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may import modules of its own layer or of any layer below.
const LAYERS: &[(&str, &[&str])] = &[
    ("api", &["env", "stream", "windowed", "job", "rest"]),
    ("controller", &["controller"]),
    ("protocols", &["sampler", "savepoint", "detector"]),
    ("physical plan", &["plan"]),
    ("logical graph", &["graph"]),
    ("subtask actors", &["task", "backup", "gate"]),
    ("operators", &["operator", "source", "sink", "partition"]),
    (
        "core",
        &[
            "config",
            "restart",
            "failure",
            "checkpoint",
            "channel",
            "metrics",
            "event",
            "state",
            "key_group",
            "rescale",
            "replace",
            "settings",
            "time",
            "error",
            "hooks",
            "rate",
            "fault",
            "erased",
            "api_types",
        ],
    ),
    ("sync", &["sync"]),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../framework/core/src")
}

/// Rust source with comments, string and char literals blanked out.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && matches!(b.get(i + 1), Some(b'"') | Some(b'#'))
            && !ident_before(b, i)
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < b.len() {
                if b[j] == b'"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&b'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former ends
            // with a quote soon after.
            let close = (i + 2..(i + 12).min(b.len())).find(|&j| b[j] == b'\'');
            match close {
                Some(j) if b[i + 1] == b'\\' || j == i + 2 => {
                    out.push_str("' '");
                    i = j + 1;
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segments of every `crate::` path in `code` (grouped `crate::{a, b::c}` too).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = rest[at + "crate::".len()..].trim_start();
        rest = &rest[at + "crate::".len()..];
        if matches!(before, Some(c) if c.is_ascii_alphanumeric() || c == '_') {
            continue; // e.g. `mycrate::`
        }
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (k, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        let id = ident_at(&group[k..]);
                        if !id.is_empty() {
                            found.insert(id.to_owned());
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let id = ident_at(after);
            if !id.is_empty() {
                found.insert(id.to_owned());
            }
        }
    }
    found
}

/// Every `.rs` file of the top-level module `name` (a file `name.rs` or a folder `name/`).
fn module_files(name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src_dir().join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let dir = src_dir().join(name);
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files
}

/// The top-level modules, from the files and folders of `framework/core/src`.
fn top_level_modules() -> BTreeSet<String> {
    let mut mods = BTreeSet::new();
    for e in std::fs::read_dir(src_dir()).expect("framework/core/src is readable") {
        let p = e.expect("a directory entry").path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // The crate root, and `src/bin/` (binaries built on the library, not modules of it).
        if stem == "lib" || (stem == "bin" && p.is_dir()) {
            continue;
        }
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            mods.insert(stem.to_owned());
        }
    }
    mods
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Module → the other top-level modules it names.
fn imports() -> Imports {
    let mods = top_level_modules();
    mods.iter()
        .map(|m| {
            let mut deps = BTreeSet::new();
            for f in module_files(m) {
                let src = std::fs::read_to_string(&f).expect("a source file is readable");
                for d in crate_paths(&strip(&src)) {
                    if d != *m && mods.contains(&d) {
                        deps.insert(d);
                    }
                }
            }
            (m.clone(), deps)
        })
        .collect()
}

#[test]
fn every_top_level_module_has_a_layer() {
    let unplaced: Vec<String> = top_level_modules()
        .into_iter()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "top-level modules of weir with no layer in tests/tests/layering.rs: {unplaced:?}"
    );
}

type Imports = BTreeMap<String, BTreeSet<String>>;

/// Every import of `graph` that points to a layer above its module.
fn upward_imports(graph: &Imports) -> Vec<String> {
    let mut upward = Vec::new();
    for (m, deps) in graph {
        let Some(lm) = layer_of(m) else { continue };
        for d in deps {
            let Some(ld) = layer_of(d) else { continue };
            if ld < lm {
                upward.push(format!(
                    "`{m}` ({}) imports `{d}` ({}), a layer above it",
                    LAYERS[lm].0, LAYERS[ld].0
                ));
            }
        }
    }
    upward
}

/// The cycles of `graph` that a depth-first search meets, each as its path.
fn cycles(graph: &Imports) -> Vec<String> {
    fn visit(
        m: &str,
        graph: &Imports,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(m.to_owned(), 1);
        path.push(m.to_owned());
        for d in graph.get(m).into_iter().flatten() {
            match state.get(d.as_str()).copied().unwrap_or(0) {
                0 => visit(d, graph, state, path, cycles),
                1 => {
                    let from = path.iter().position(|p| p == d).unwrap_or(0);
                    let mut cycle = path[from..].to_vec();
                    cycle.push(d.clone());
                    cycles.push(cycle.join(" -> "));
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(m.to_owned(), 2);
    }
    let mut state = BTreeMap::new();
    let mut found = Vec::new();
    for m in graph.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0 {
            visit(m, graph, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

#[test]
fn no_module_imports_a_layer_above_it() {
    let upward = upward_imports(&imports());
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let found = cycles(&imports());
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checks_report_an_upward_import_and_a_cycle() {
    let graph: Imports = [
        ("channel", &["plan", "sync"][..]),
        ("sync", &["channel"][..]),
        ("plan", &["graph"][..]),
    ]
    .into_iter()
    .map(|(m, ds)| (m.to_owned(), ds.iter().map(|d| d.to_string()).collect()))
    .collect();
    assert_eq!(
        upward_imports(&graph),
        [
            "`channel` (core) imports `plan` (physical plan), a layer above it",
            "`sync` (sync) imports `channel` (core), a layer above it",
        ]
    );
    assert_eq!(cycles(&graph), ["channel -> sync -> channel"]);
    // The crate's own graph is read at all: the API imports the graph.
    assert!(imports()["stream"].contains("graph"));
}

#[test]
fn the_path_reader_sees_imports_and_skips_comments_and_strings() {
    let code = strip(
        "use crate::a::B;\nuse crate::{c, d::{E, F}, g};\n// crate::h\n/// [`crate::i`]\n\
         let s = \"crate::j\"; let r = r#\"crate::k\"#; let x = crate::l::m(); mycrate::n;\n\
         fn f<'a>(c: char) { let _ = '\"'; crate::o::p() }",
    );
    let found: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(found, ["a", "c", "d", "g", "l", "o"]);
}

/// The layer table in the crate's documentation (`lib.rs`) places every module where this
/// test does: the documentation cannot drift from what is checked.
#[test]
fn the_crate_doc_s_layer_table_is_the_one_checked() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs is readable");
    let documented: Vec<(String, BTreeSet<String>)> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter(|row| !row.starts_with("layer |") && !row.starts_with("---"))
        .filter_map(|row| {
            let mut cells = row.split(" | ");
            let layer = cells.next()?.to_lowercase();
            let modules = cells
                .next()?
                .split(", ")
                .map(|m| {
                    m.trim_matches(|c| c == '`' || c == '[' || c == ']')
                        .to_owned()
                })
                .collect();
            Some((layer, modules))
        })
        .collect();
    let checked: Vec<(String, BTreeSet<String>)> = LAYERS
        .iter()
        .map(|(l, ms)| (l.to_string(), ms.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(
        documented, checked,
        "lib.rs's layer table and LAYERS differ"
    );
}
