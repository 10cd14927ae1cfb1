//! The layering of `src/` (../shared/DESIGN.md, STYLE.md "Layers"), checked from the source:
//! every `crate::<module>` path written in a file under `src/<module>/` must name a module its
//! layer may import (`ALLOWED` below), the table itself must have no cycle (so the crate's
//! top-level modules have none), and the executor (glommio) appears only in the layers that
//! do I/O. A failure names the file, the line and the arrow.
//!
//! What it reads: `crate::a::...` paths, including the first segment of each entry of a
//! `crate::{a::x, b::y}` group, outside `//` comments. A `super::` chain longer than the
//! file's module path (one that leaves its top-level module even from an inline `mod tests`)
//! is refused too, so a cross-module arrow does not hide from the table that way.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and the modules it may import, lowest layers first:
/// leaves; the Kafka wire codecs; the sans-IO state machines (replication, group, txn) that know no
/// executor and no files; storage (file I/O on glommio); typed config; cluster metadata and
/// the controller (sans-IO, plus the raft thread); shards (executor, mesh, replica and group
/// glue); the Kafka server on them; the broker that composes it all. The client side (client,
/// cli, bench) stands apart and speaks only the protocol.
const ALLOWED: &[(&str, &[&str])] = &[
    ("limits", &[]),
    ("clock", &[]),
    ("alloc", &["limits"]),
    // Prometheus metrics: the per-shard registry, snapshots and the text format (sans-IO).
    ("metrics", &["limits"]),
    ("protocol", &["limits", "alloc"]),
    ("replication", &["limits", "clock", "protocol"]),
    ("group", &["limits", "clock", "protocol"]),
    // The transaction coordinator finds a group's `__consumer_offsets` partition (and hashes
    // transactional ids the same way) through group.
    ("txn", &["limits", "clock", "protocol", "group"]),
    // SASL mechanisms (PLAIN, SCRAM): sans-IO, the crypto from RustCrypto crates.
    ("security", &["limits"]),
    (
        "storage",
        &[
            "limits",
            "clock",
            "alloc",
            "protocol",
            "replication",
            "metrics",
        ],
    ),
    // Syslog/RELP/HTTP ingestion parsers and record mapping: sans-IO.
    ("ingest", &["limits", "protocol"]),
    // Listeners, sessions and principals: sans-IO.
    ("security", &["limits", "clock", "protocol"]),
    (
        "config",
        &[
            "limits", "protocol", "storage", "group", "ingest", "security",
        ],
    ),
    // The controller decides on the catalog alone: it knows no files (config's log settings
    // reach it as validated strings).
    (
        "cluster",
        &["limits", "clock", "protocol", "group", "config", "security"],
    ),
    (
        "shard",
        &[
            "limits",
            "clock",
            "alloc",
            "protocol",
            "replication",
            "group",
            "txn",
            "storage",
            "config",
            "cluster",
            "ingest",
            "metrics",
            "security",
        ],
    ),
    (
        "server",
        &[
            "limits",
            "clock",
            "alloc",
            "protocol",
            "replication",
            "group",
            "txn",
            "storage",
            "config",
            "cluster",
            "shard",
            "ingest",
            "metrics",
            "security",
        ],
    ),
    (
        "broker",
        &[
            "limits", "clock", "alloc", "protocol", "storage", "config", "cluster", "shard",
            "server", "ingest", "security",
        ],
    ),
    ("client", &["limits", "clock", "protocol", "security"]),
    (
        "cli",
        &[
            "limits", "clock", "protocol", "client", "config", "security",
        ],
    ),
    ("bench", &["limits", "clock", "protocol", "client", "cli"]),
];

/// Arrows that break the table today, each with the file that draws it. Listed so the test
/// can land before the code that removes them; an entry that no longer occurs fails the test
/// until it is deleted here, so the list only shrinks.
const KNOWN_VIOLATIONS: &[(&str, &str)] = &[];

/// Modules that may name the executor: the I/O layers. Protocol, the state machines, the
/// controller and config must stay executor-free so the executor could be swapped.
const EXECUTOR_ALLOWED: &[&str] = &["storage", "shard", "server", "broker"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b/c.rs` -> ["a", "b", "c"]; `mod.rs` names its directory; `lib.rs`/`main.rs` -> [].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if !matches!(stem.as_str(), "mod" | "lib" | "main") {
            parts.push(stem);
        }
    }
    parts
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn ident_at(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules named by the `crate::` paths of one line (the line is complete for
/// groups written on one line; a multi-line group continues on the lines after it, which the
/// caller feeds through `open_group`).
fn crate_targets(line: &str, open_group: &mut bool, out: &mut Vec<String>) {
    if *open_group {
        // Inside `crate::{ ... }` spanning lines: each entry's first segment.
        let (body, closed) = match line.find('}') {
            Some(i) => (&line[..i], true),
            None => (line, false),
        };
        group_entries(body, out);
        if closed {
            *open_group = false;
        }
        return;
    }
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(is_ident_char) {
            continue; // e.g. `mycrate::`
        }
        if let Some(group) = rest.trim_start().strip_prefix('{') {
            match group.find('}') {
                Some(end) => group_entries(&group[..end], out),
                None => {
                    group_entries(group, out);
                    *open_group = true;
                    return;
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                out.push(name.to_string());
            }
        }
    }
}

/// First segments of the entries of a use group (nested groups only add deeper segments).
fn group_entries(body: &str, out: &mut Vec<String>) {
    let mut depth = 0usize;
    let mut start = true;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => start = true,
            _ if start && depth == 0 && is_ident_char(c) => {
                let name = ident_at(&body[i..]);
                if name != "self" {
                    out.push(name.to_string());
                }
                start = false;
            }
            _ => {}
        }
    }
}

/// Longest run of `super::` in the line.
fn super_chain(line: &str) -> usize {
    let mut longest = 0;
    let mut rest = line;
    while let Some(i) = rest.find("super::") {
        let mut n = 0;
        let mut tail = &rest[i..];
        while let Some(t) = tail.strip_prefix("super::") {
            n += 1;
            tail = t;
        }
        longest = longest.max(n);
        rest = tail;
    }
    longest
}

struct Arrow {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// Every cross-module arrow in `src/`, plus the lines that break the other rules.
fn scan() -> (Vec<Arrow>, Vec<String>) {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut arrows = Vec::new();
    let mut problems = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src");
        let module = module_path(rel);
        let Some(top) = module.first().cloned() else {
            continue; // lib.rs and main.rs sit above every layer
        };
        let shown = format!("src/{}", rel.display());
        let text = std::fs::read_to_string(&path).expect("readable source");
        let mut open_group = false;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split("//").next().unwrap_or("");
            let mut targets = Vec::new();
            crate_targets(line, &mut open_group, &mut targets);
            for to in targets {
                if to != top {
                    arrows.push(Arrow {
                        file: shown.clone(),
                        line: n + 1,
                        from: top.clone(),
                        to,
                    });
                }
            }
            if super_chain(line) > module.len() {
                problems.push(format!(
                    "{shown}:{}: a `super::` chain leaves module `{top}`; write `crate::` paths \
                     across modules",
                    n + 1
                ));
            }
            if line.contains("glommio") && !EXECUTOR_ALLOWED.contains(&top.as_str()) {
                problems.push(format!(
                    "{shown}:{}: `{top}` names the executor (glommio); only {EXECUTOR_ALLOWED:?} may",
                    n + 1
                ));
            }
        }
    }
    (arrows, problems)
}

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    ALLOWED
        .iter()
        .map(|(m, to)| (*m, to.iter().copied().collect()))
        .collect()
}

/// Every `crate::` arrow in `src/` points down the table (or is a listed known violation,
/// which must still occur), and every top-level module is in the table.
#[test]
fn imports_point_down_the_layers() {
    let table = allowed();
    let (arrows, mut problems) = scan();
    let mut seen_known = BTreeSet::new();
    for a in &arrows {
        let Some(may) = table.get(a.from.as_str()) else {
            problems.push(format!(
                "{}:{}: module `{}` is not in tests/layers.rs ALLOWED; add it at its layer",
                a.file, a.line, a.from
            ));
            continue;
        };
        if !table.contains_key(a.to.as_str()) {
            // `crate::SomeItem` at the root (lib.rs items) or a typo the compiler catches.
            continue;
        }
        if may.contains(a.to.as_str()) {
            continue;
        }
        if KNOWN_VIOLATIONS.contains(&(a.file.as_str(), a.to.as_str())) {
            seen_known.insert((a.file.clone(), a.to.clone()));
            continue;
        }
        problems.push(format!(
            "{}:{}: `{}` imports `{}`, which its layer may not (allowed: {:?}); move the shared \
             piece down a layer, or pass it in",
            a.file, a.line, a.from, a.to, may
        ));
    }
    for (file, to) in KNOWN_VIOLATIONS {
        if !seen_known.contains(&(file.to_string(), to.to_string())) {
            problems.push(format!(
                "{file} no longer imports `{to}`: delete it from KNOWN_VIOLATIONS in tests/layers.rs"
            ));
        }
    }
    assert!(problems.is_empty(), "layering:\n{}", problems.join("\n"));
}

/// The table of allowed arrows has no cycle, so the top-level modules that follow it have
/// none either: a depth-first walk finds no module on its own path.
#[test]
fn allowed_arrows_have_no_cycle() {
    fn visit<'a>(
        m: &'a str,
        table: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(m) {
            return;
        }
        assert!(!path.contains(&m), "cycle in ALLOWED: {path:?} -> {m}");
        path.push(m);
        for to in table.get(m).into_iter().flatten() {
            assert!(
                table.contains_key(to),
                "ALLOWED names unknown module `{to}`"
            );
            visit(to, table, path, done);
        }
        path.pop();
        done.insert(m);
    }
    let table = allowed();
    let mut done = BTreeSet::new();
    for m in table.keys() {
        visit(m, &table, &mut Vec::new(), &mut done);
    }
}

/// The scanner reads what the checks rely on: plain paths, one-line and multi-line use
/// groups, comments ignored, and `super::` chains counted.
#[test]
fn scanner_reads_paths_groups_and_comments() {
    let mut open = false;
    let mut out = Vec::new();
    crate_targets(
        "use crate::{shard::ShardCtx, server::{a, b}, self}; let x = crate::storage::X;",
        &mut open,
        &mut out,
    );
    assert_eq!(out, ["shard", "server", "storage"]);
    assert!(!open);
    out.clear();
    crate_targets("use crate::{", &mut open, &mut out);
    assert!(open);
    crate_targets("    cluster::x,", &mut open, &mut out);
    crate_targets("    group::{y, z},", &mut open, &mut out);
    crate_targets("};", &mut open, &mut out);
    assert!(!open);
    assert_eq!(out, ["cluster", "group"]);
    out.clear();
    crate_targets("mycrate::shard::X", &mut open, &mut out);
    assert!(out.is_empty());
    assert_eq!(super_chain("use super::super::x;"), 2);
    assert_eq!(
        module_path(Path::new("cluster/controller/mod.rs")),
        ["cluster", "controller"]
    );
}
