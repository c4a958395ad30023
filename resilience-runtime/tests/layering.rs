//! The layering drawn at the top of `src/lib.rs`, enforced: no module of
//! the runtime imports from a layer above its own, and no two top-level
//! modules import each other, directly or through others.
//!
//! The map is read from `lib.rs` itself (its `| layer | modules |` table),
//! so the picture and the rule cannot drift apart. Every `crate::…`,
//! `$crate::…` and `super::…` path that reaches another top-level module
//! counts, in `use` lines and in code alike; doc comments, comments and
//! string literals do not, nor does test-only code (`#[cfg(test)]` items
//! and the files they declare): a test may build what sits above its
//! module to watch it from there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// What `lib.rs` declares: its top-level modules (from files), and the
/// names it re-exports at the root (`crate::Error`), by module.
struct Crate {
    modules: BTreeSet<String>,
    reexports: BTreeMap<String, String>,
}

impl Crate {
    fn read() -> Crate {
        let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
        let mut modules = BTreeSet::new();
        let mut reexports = BTreeMap::new();
        for line in lib.lines().map(str::trim) {
            if let Some(rest) = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("mod "))
                && let Some(module) = rest.strip_suffix(';')
            {
                modules.insert(module.trim().to_owned());
            }
            if let Some(rest) = line.strip_prefix("pub use ")
                && let Some((module, names)) = rest.trim_end_matches(';').split_once("::")
            {
                for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
                    let name = name.trim().rsplit("::").next().unwrap();
                    reexports.insert(name.to_owned(), module.to_owned());
                }
            }
        }
        Crate { modules, reexports }
    }

    /// The top-level module the root name `name` stands for, if any (an
    /// item of `lib.rs` itself, such as `duration_nanos`, is ground).
    fn module_of(&self, name: &str) -> Option<&str> {
        self.modules
            .get(name)
            .or_else(|| self.reexports.get(name))
            .map(String::as_str)
    }
}

/// One reference from a file to a top-level module.
#[derive(Debug, Clone)]
struct Import {
    file: String,
    line: usize,
    to: String,
    text: String,
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let layers = layers();
    let krate = Crate::read();
    let unmapped: Vec<_> = krate
        .modules
        .iter()
        .filter(|module| !layers.contains_key(*module))
        .collect();
    assert!(
        unmapped.is_empty(),
        "top-level module(s) {unmapped:?} have no layer: add them to the layer table of src/lib.rs"
    );
    let mut broken = String::new();
    for import in imports(&krate) {
        let from = top_of(&import.file);
        let (Some(&above), Some(&below)) = (layers.get(&import.to), layers.get(&from)) else {
            continue;
        };
        if above > below {
            writeln!(
                broken,
                "{}:{}: `{from}` (layer {below}) imports `{}` (layer {above}): a module imports only from its own layer or below\n    {}",
                import.file, import.line, import.to, import.text
            )
            .unwrap();
        }
    }
    assert!(broken.is_empty(), "imports against the layering:\n{broken}");
}

#[test]
fn no_cycle_between_top_level_modules() {
    let krate = Crate::read();
    let mut edges: BTreeMap<String, BTreeMap<String, Import>> = BTreeMap::new();
    for import in imports(&krate) {
        let from = top_of(&import.file);
        edges
            .entry(from)
            .or_default()
            .entry(import.to.clone())
            .or_insert(import);
    }
    let mut cycles = String::new();
    for start in &krate.modules {
        if let Some(path) = cycle_through(start, &edges) {
            // Each cycle once: from its smallest module.
            if path.iter().min() != Some(start) {
                continue;
            }
            describe_cycle(&mut cycles, "", &path, &edges);
        }
    }
    assert!(
        cycles.is_empty(),
        "top-level modules that import each other:\n{cycles}"
    );
}

/// The check can fail: an upward import, a cycle, and test-only code are
/// read as they should be.
#[test]
fn the_reader_sees_what_it_must_and_nothing_else() {
    let modules = Crate {
        modules: ["breaker", "registry", "retry", "telemetry"]
            .map(String::from)
            .into(),
        reexports: [("Registry".to_owned(), "registry".to_owned())].into(),
    };
    let source = r##"
//! [`Registry`](crate::registry::Registry) in a doc comment
use crate::{retry::Policy, telemetry::Labels};
fn f() -> &'static str { let _c = '"'; "crate::registry in a string" }
const G: &str = r#"crate::registry"#;
fn g() { super::registry::global(); }
/* crate::registry in a block comment */
#[cfg(test)]
mod tests {
    use crate::registry::Registry;
}
#[cfg(not(test))]
use crate::Registry;
"##;
    let found = scan("breaker/mod.rs", source, &modules);
    let found: Vec<_> = found.iter().map(|i| (i.to.as_str(), i.line)).collect();
    assert_eq!(
        found,
        [
            ("retry", 3),
            ("telemetry", 3),
            ("registry", 6),
            ("registry", 13)
        ]
    );
    let mut edges: BTreeMap<String, BTreeMap<String, Import>> = BTreeMap::new();
    let import = |to: &str| Import {
        file: String::new(),
        line: 0,
        to: to.to_owned(),
        text: String::new(),
    };
    edges
        .entry("a".into())
        .or_default()
        .insert("b".into(), import("b"));
    edges
        .entry("b".into())
        .or_default()
        .insert("c".into(), import("c"));
    assert_eq!(cycle_through("a", &edges), None);
    edges
        .entry("c".into())
        .or_default()
        .insert("a".into(), import("a"));
    assert_eq!(
        cycle_through("a", &edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// The layer of each top-level module, from the table at the top of
/// `lib.rs`: `//! | 3 name | `a`, `b` |`, layer 0 the ground.
fn layers() -> BTreeMap<String, u32> {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut layers = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let mut cells = row.split('|');
        let (Some(layer), Some(modules)) = (cells.next(), cells.next()) else {
            continue;
        };
        let Some(Ok(layer)) = layer.split_whitespace().next().map(str::parse::<u32>) else {
            continue;
        };
        for module in modules.split(',') {
            let module = module.trim().trim_matches('`');
            if !module.is_empty() {
                layers.insert(module.to_owned(), layer);
            }
        }
    }
    assert!(
        layers.len() > 5,
        "no layer table found at the top of src/lib.rs: {layers:?}"
    );
    layers
}

/// The top-level module a file (relative to `src/`) belongs to.
fn top_of(file: &str) -> String {
    let first = file.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// Every reference to a top-level module from a file of `src/` outside
/// `lib.rs`, test-only files left out.
fn imports(krate: &Crate) -> Vec<Import> {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    let mut sources = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for path in files {
        let file = path
            .strip_prefix(SRC)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if file == "lib.rs" {
            continue;
        }
        let source = fs::read_to_string(&path).unwrap();
        let (_, declared) = strip(&source);
        let dir = match file.strip_suffix("mod.rs") {
            Some(dir) => dir.to_owned(),
            None => format!("{}/", file.strip_suffix(".rs").unwrap()),
        };
        for module in declared {
            test_only.insert(format!("{dir}{module}.rs"));
            test_only.insert(format!("{dir}{module}/"));
        }
        sources.insert(file, source);
    }
    sources
        .iter()
        .filter(|(file, _)| {
            !test_only
                .iter()
                .any(|t| *file == t || (t.ends_with('/') && file.starts_with(t.as_str())))
        })
        .flat_map(|(file, source)| scan(file, source, krate))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The references of `source` (the file `file`, relative to `src/`) to
/// other top-level modules.
fn scan(file: &str, source: &str, krate: &Crate) -> Vec<Import> {
    let (code, _) = strip(source);
    let own = top_of(file);
    // How deep the file's own module is below the crate root.
    let depth = file.split('/').count() - usize::from(file.ends_with("mod.rs"));
    let inline = inline_modules(&code);
    let original: Vec<&str> = source.lines().collect();
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let word_start = at == 0 || !is_ident(bytes[at - 1]);
        let rest = &code[at..];
        let mut targets = Vec::new();
        let mut advance = 1;
        if word_start && rest.starts_with("crate::") {
            let (names, used) = heads(&rest["crate::".len()..]);
            targets = names;
            advance = "crate::".len() + used;
        } else if word_start && rest.starts_with("super::") {
            let mut supers = 0;
            let mut tail = rest;
            while let Some(next) = tail.strip_prefix("super::") {
                supers += 1;
                tail = next;
            }
            let nesting = depth + inline.iter().filter(|(s, e)| *s < at && at < *e).count();
            if supers == nesting {
                let (names, used) = heads(tail);
                targets = names;
                advance = rest.len() - tail.len() + used;
            } else {
                advance = rest.len() - tail.len();
            }
        }
        for target in targets.iter().filter_map(|name| krate.module_of(name)) {
            if target != own {
                let line = code[..at].matches('\n').count() + 1;
                found.push(Import {
                    file: file.to_owned(),
                    line,
                    to: target.to_owned(),
                    text: original[line - 1].trim().to_owned(),
                });
            }
        }
        at += advance.max(1);
    }
    found
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The first segment of a path (`a::…`) or of each path of a group
/// (`{a::…, b}`), and how many bytes were read.
fn heads(path: &str) -> (Vec<String>, usize) {
    let ident = |s: &str| -> String {
        s.bytes()
            .take_while(|&b| is_ident(b))
            .map(char::from)
            .collect()
    };
    let Some(group) = path.strip_prefix('{') else {
        let name = ident(path);
        let used = name.len();
        return (vec![name], used);
    };
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return (names, i + 2),
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if c.is_whitespace() => {}
            _ if start && depth == 0 => {
                names.push(ident(&group[i..]));
                start = false;
            }
            _ => {}
        }
    }
    (names, path.len())
}

/// The spans (`{` to `}`) of the modules written inline in `code`.
fn inline_modules(code: &str) -> Vec<(usize, usize)> {
    let bytes = code.as_bytes();
    let mut spans = Vec::new();
    let mut search = 0;
    while let Some(found) = code[search..].find("mod ") {
        let at = search + found;
        search = at + 4;
        if at > 0 && is_ident(bytes[at - 1]) {
            continue;
        }
        let after = code[search..].trim_start();
        let name_len = after.bytes().take_while(|&b| is_ident(b)).count();
        if after[name_len..].trim_start().starts_with('{') {
            let open = search + (code[search..].len() - after.len()) + name_len;
            let open = open + code[open..].find('{').unwrap();
            spans.push((open, matching_brace(code, open)));
        }
    }
    spans
}

fn matching_brace(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `source` with its comments, string and character literals, and
/// test-only items blanked out (newlines kept, so lines still count), and
/// the modules it declares as test-only files (`#[cfg(test)] mod x;`).
fn strip(source: &str) -> (String, Vec<String>) {
    let code = blank_comments_and_literals(source);
    let mut out = code.clone().into_bytes();
    let mut declared = Vec::new();
    let mut search = 0;
    while let Some(found) = code[search..].find("#[cfg(") {
        let at = search + found;
        let predicate_start = at + "#[cfg(".len();
        let Some(close) = code[predicate_start..].find(")]") else {
            break;
        };
        search = predicate_start;
        if !needs_test(&code[predicate_start..predicate_start + close]) {
            continue;
        }
        // The item: through its `;`, or through the block it opens.
        let item = predicate_start + close + 2;
        let semi = code[item..].find(';').map(|i| item + i);
        let brace = code[item..].find('{').map(|i| item + i);
        let end = match (semi, brace) {
            (Some(semi), Some(brace)) if semi < brace => semi,
            (Some(semi), None) => semi,
            (_, Some(brace)) => matching_brace(&code, brace),
            (None, None) => code.len() - 1,
        };
        let text = &code[item..=end];
        if let Some(module) = text
            .split_whitespace()
            .skip_while(|word| *word != "mod")
            .nth(1)
            .and_then(|name| name.strip_suffix(';'))
        {
            declared.push(module.to_owned());
        }
        for byte in &mut out[at..=end] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
        search = end + 1;
    }
    (String::from_utf8(out).unwrap(), declared)
}

/// Whether a `cfg` predicate holds only under `test`: `test`, or `all(…)`
/// with `test` among its terms.
fn needs_test(predicate: &str) -> bool {
    let predicate = predicate.trim();
    predicate == "test"
        || predicate.strip_prefix("all(").is_some_and(|terms| {
            terms
                .trim_end_matches(')')
                .split(',')
                .any(|term| term.trim() == "test")
        })
}

fn blank_comments_and_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_')
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let closing: Vec<char> = closing.chars().collect();
            while j < chars.len() && !chars[j..].starts_with(&closing) {
                j += 1;
            }
            let end = (j + closing.len()).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), or a lifetime.
            let end = if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                j + 1
            } else if chars.get(i + 2) == Some(&'\'') {
                i + 3
            } else {
                i + 1
            };
            let end = end.min(chars.len());
            out.extend(
                chars[i..end]
                    .iter()
                    .map(|&c| if end > i + 1 { blank(c) } else { c }),
            );
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// One cycle for the failure message: its modules, then the line of each
/// import that makes it.
fn describe_cycle(
    out: &mut String,
    heading: &str,
    path: &[String],
    edges: &BTreeMap<String, BTreeMap<String, Import>>,
) {
    writeln!(out, "{heading}{}:", path.join(" -> ")).unwrap();
    for pair in path.windows(2) {
        let import = &edges[&pair[0]][&pair[1]];
        writeln!(out, "    {}:{}: {}", import.file, import.line, import.text).unwrap();
    }
}

/// A path of imports from `start` back to `start`, if there is one.
fn cycle_through(
    start: &str,
    edges: &BTreeMap<String, BTreeMap<String, Import>>,
) -> Option<Vec<String>> {
    fn walk(
        at: &str,
        start: &str,
        edges: &BTreeMap<String, BTreeMap<String, Import>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    walk(start, start, edges, &mut path, &mut BTreeSet::new()).then_some(path)
}

/// The files of one folder (the modules of one parent, a sub-folder
/// counted as the module it declares) never import each other in a loop,
/// in the runtime and in the macros crate: a loop between two files means
/// neither can be read, changed or tested without the other, which is one
/// module split in two. The folder's `mod.rs` (or the crate root) is its
/// face: its re-exports are followed to the file that defines the name.
#[test]
fn no_cycle_between_files_of_one_folder() {
    let macros = concat!(env!("CARGO_MANIFEST_DIR"), "/../resilience-macros/src");
    let mut cycles = String::new();
    for root in [SRC, macros] {
        let graph = FileGraph::read(Path::new(root));
        for (folder, edges) in &graph.edges {
            let mut seen = BTreeSet::new();
            for start in edges.keys() {
                let Some(path) = cycle_through(start, edges) else {
                    continue;
                };
                let mut members: Vec<_> = path[..path.len() - 1].to_vec();
                members.sort();
                if !seen.insert(members) {
                    continue;
                }
                describe_cycle(&mut cycles, &format!("in {root}/{folder}: "), &path, edges);
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "files of one folder that import each other (move what both need into a file of its own):\n{cycles}"
    );
}

/// The check of files can fail: a loop through `super::`, through a
/// re-export of the folder's face and through `crate::` paths is seen,
/// an import of the face's own item or of a file of another folder is not.
#[test]
fn the_file_reader_sees_loops_through_every_kind_of_path() {
    let files: BTreeMap<String, String> = [
        (
            "breaker/mod.rs",
            "mod machine; mod family; mod state;\npub use family::Family;\nuse self::machine::Common;\npub struct Top;",
        ),
        (
            "breaker/machine.rs",
            "use super::{Family, Top};\nuse super::state::Word;\npub struct Common;",
        ),
        (
            "breaker/family.rs",
            "use crate::breaker::machine::Common;\nuse crate::retry::Policy;\npub struct Family;",
        ),
        ("breaker/state.rs", "use super::super::retry::Policy;\npub struct Word;"),
        ("retry/mod.rs", "pub struct Policy;"),
    ]
    .into_iter()
    .map(|(file, source)| (file.to_owned(), source.to_owned()))
    .collect();
    let graph = FileGraph::from_sources(&files);
    let breaker = &graph.edges["breaker/"];
    let targets = |from: &str| -> Vec<&str> {
        breaker
            .get(from)
            .map(|edges| edges.keys().map(String::as_str).collect())
            .unwrap_or_default()
    };
    assert_eq!(targets("machine"), ["family", "state"]);
    assert_eq!(targets("family"), ["machine"]);
    assert_eq!(targets("state"), Vec::<&str>::new());
    assert_eq!(
        cycle_through("machine", breaker),
        Some(vec!["machine".into(), "family".into(), "machine".into()])
    );
    let root: Vec<_> = graph.edges[""]
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |to| (from.as_str(), to.as_str())))
        .collect();
    assert_eq!(root, [("breaker", "retry")]);
}

/// The imports between the files of each folder of a crate's `src/`, by
/// folder (relative to `src/`, `""` for the root, `"breaker/"`), then by
/// the importing file's module name and the imported one's.
struct FileGraph {
    edges: BTreeMap<String, BTreeMap<String, BTreeMap<String, Import>>>,
}

impl FileGraph {
    fn read(src: &Path) -> FileGraph {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let files = paths
            .iter()
            .map(|path| {
                let file = path
                    .strip_prefix(src)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                (file, fs::read_to_string(path).unwrap())
            })
            .collect();
        FileGraph::from_sources(&files)
    }

    fn from_sources(files: &BTreeMap<String, String>) -> FileGraph {
        // Test-only files (`#[cfg(test)] mod tests;`) import what they like.
        let mut test_only = BTreeSet::new();
        let mut code = BTreeMap::new();
        for (file, source) in files {
            let (stripped, declared) = strip(source);
            let module = module_path(file);
            for name in declared {
                let mut path = module.clone();
                path.push(name);
                test_only.insert(path);
            }
            code.insert(file.clone(), (module, stripped));
        }
        let is_test_only =
            |module: &[String]| (1..=module.len()).any(|len| test_only.contains(&module[..len]));
        // What each folder's face re-exports or imports: the name, the
        // file module that defines it (`use machine::Common` in mod.rs).
        let mut faces: BTreeMap<Vec<String>, BTreeMap<String, String>> = BTreeMap::new();
        for (file, (module, stripped)) in &code {
            if !(file.ends_with("mod.rs") || file == "lib.rs" || file == "main.rs") {
                continue;
            }
            let names = faces.entry(module.clone()).or_default();
            for path in paths_in(stripped, module) {
                if let [child, .., name] = path.relative.as_slice()
                    && path.from_use
                    && path.absolute.len() == module.len() + path.relative.len()
                {
                    names.insert(name.clone(), child.clone());
                }
            }
        }
        let mut edges: BTreeMap<String, BTreeMap<String, BTreeMap<String, Import>>> =
            BTreeMap::new();
        for (file, (module, stripped)) in &code {
            if is_test_only(module) {
                continue;
            }
            let inline = inline_modules(stripped);
            let original: Vec<&str> = files[file].lines().collect();
            for path in paths_in(stripped, module) {
                let nesting = inline
                    .iter()
                    .filter(|(s, e)| *s < path.at && path.at < *e)
                    .count();
                if nesting > 0 && path.from_here {
                    continue;
                }
                let target = &path.absolute;
                // The folder both sit in, and the next step down on each side.
                let common = module
                    .iter()
                    .zip(target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if common == module.len() || common >= target.len() {
                    continue;
                }
                let folder = &module[..common];
                let from = &module[common];
                let mut to = target[common].clone();
                if let Some(defined) = faces.get(folder).and_then(|names| names.get(&to)) {
                    to = defined.clone();
                }
                let siblings = code.values().any(|(other, _)| {
                    other.len() > common && other[..common] == *folder && other[common] == to
                });
                if !siblings || &to == from {
                    continue;
                }
                let line = stripped[..path.at].matches('\n').count() + 1;
                let key = folder
                    .iter()
                    .map(|part| format!("{part}/"))
                    .collect::<String>();
                edges
                    .entry(key)
                    .or_default()
                    .entry(from.clone())
                    .or_default()
                    .entry(to.clone())
                    .or_insert(Import {
                        file: file.clone(),
                        line,
                        to,
                        text: original[line - 1].trim().to_owned(),
                    });
            }
        }
        FileGraph { edges }
    }
}

/// The module path of a file relative to `src/`: `breaker/family/mod.rs`
/// is `["breaker", "family"]`, `lib.rs` the root `[]`.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// A path written in code, made absolute from the crate root.
struct CodePath {
    at: usize,
    /// As written after `crate::`, `super::…` or `self::`, or, in a `use`
    /// line of a folder's face, after nothing at all.
    relative: Vec<String>,
    absolute: Vec<String>,
    from_use: bool,
    /// Written from the file's own module (`super::`, `self::`, a plain
    /// `use`), so wrong inside an inline module, where it is left out.
    from_here: bool,
}

/// Every `crate::`, `super::` and `self::` path in `code` (a file of the
/// module `module`), each group member (`{a, b::c}`) a path of its own;
/// plain `use child::…` lines too, which only a face's re-exports need.
fn paths_in(code: &str, module: &[String]) -> Vec<CodePath> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let word_start = at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b':';
        let rest = &code[at..];
        let mut base: Option<(Vec<String>, &str)> = None;
        if word_start && let Some(tail) = rest.strip_prefix("crate::") {
            base = Some((Vec::new(), tail));
        } else if word_start && let Some(tail) = rest.strip_prefix("self::") {
            base = Some((module.to_vec(), tail));
        } else if word_start && rest.starts_with("super::") {
            let mut tail = rest;
            let mut up = module.len();
            while let Some(next) = tail.strip_prefix("super::") {
                up = up.saturating_sub(1);
                tail = next;
            }
            base = Some((module[..up].to_vec(), tail));
        }
        let Some((base, tail)) = base.or_else(|| {
            // `use child::Name;` in a face: relative to the module itself.
            (word_start && is_use_head(code, at)).then(|| (module.to_vec(), rest))
        }) else {
            at += 1;
            continue;
        };
        let from_use = line_starts_with_use(code, at);
        let from_here = !rest.starts_with("crate::");
        let consumed = rest.len() - tail.len();
        let (relatives, used) = segments(tail);
        for relative in relatives {
            let mut absolute = base.clone();
            absolute.extend(relative.iter().cloned());
            found.push(CodePath {
                at,
                relative,
                absolute,
                from_use,
                from_here,
            });
        }
        at += (consumed + used).max(1);
    }
    found
}

/// Whether the statement `at` stands in begins with `use` (or `pub use`,
/// `pub(crate) use`, …).
fn line_starts_with_use(code: &str, at: usize) -> bool {
    let start = code[..at].rfind([';', '{', '}']).map_or(0, |i| i + 1);
    let statement = code[start..at].trim_start();
    let statement = statement
        .strip_prefix("pub")
        .map(|rest| {
            let rest = rest.trim_start();
            rest.strip_prefix('(')
                .and_then(|inner| inner.split_once(')').map(|(_, after)| after))
                .unwrap_or(rest)
        })
        .unwrap_or(statement)
        .trim_start();
    statement.starts_with("use ")
}

/// Whether `at` is the first word after `use` (a plain `use child::…`).
fn is_use_head(code: &str, at: usize) -> bool {
    let before = &code.as_bytes()[at.saturating_sub(5)..at];
    before.ends_with(b"use ")
        && (before.len() == 4 || !is_ident(before[0]) || at == 4)
        && code.as_bytes().get(at).is_some_and(|&b| is_ident(b))
}

/// The paths of `tail` (`a::b::C`, or `a::{b, c::D}` read as `a::b` and
/// `a::c::D`), and how many bytes they took.
fn segments(tail: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut at = 0;
    loop {
        let rest = &tail[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut paths = Vec::new();
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    ',' | '}' if depth == 0 => {
                        let member = group[start..i].trim();
                        if !member.is_empty() && member != "self" {
                            let (inner, _) = segments(member);
                            for path in inner {
                                let mut full = prefix.clone();
                                full.extend(path);
                                paths.push(full);
                            }
                        } else if member == "self" {
                            paths.push(prefix.clone());
                        }
                        start = i + 1;
                        if c == '}' {
                            return (paths, at + 1 + i + 1);
                        }
                    }
                    _ => {}
                }
            }
            return (paths, tail.len());
        }
        let name: String = rest
            .bytes()
            .take_while(|&b| is_ident(b))
            .map(char::from)
            .collect();
        if name.is_empty() {
            return (
                vec![prefix].into_iter().filter(|p| !p.is_empty()).collect(),
                at,
            );
        }
        at += name.len();
        prefix.push(name);
        match tail[at..].strip_prefix("::") {
            Some(_) => at += 2,
            None => return (vec![prefix], at),
        }
    }
}
