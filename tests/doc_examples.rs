//! Every public item of the library carries an example in its docs.
//!
//! Reads the sources under `src/` (the `redkit` binaries aside) and lists each `pub` item
//! (`fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`), and each method declared in
//! a public trait, whose doc comment has no code block. Rustdoc's own lint for this
//! (`missing_doc_code_examples`) is nightly-only. The examples themselves are doctests:
//! `cargo test --doc` compiles each one and runs those that need no server.
//!
//! Left out on purpose: items marked `#[doc(hidden)]`, files that say `Not public API` in
//! their first line (bench plumbing), the items of a `mod sealed` (traits that seal a public
//! one: users can never name them), and a macro's items whose docs the macro's callers pass
//! in (`$(#[$doc])*`; each call site's example is a doctest of its own).

#[path = "support/sources.rs"]
mod sources;

use std::path::Path;

const ITEM_KINDS: [&str; 7] = [
    "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ",
];

/// The item a line declares, when it is a `pub` item of the kinds checked (`pub(crate)` and
/// the like are not public; `pub use` re-exports are documented where they are defined).
fn public_item(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pub ")?;
    let rest = rest.strip_prefix("async ").unwrap_or(rest);
    let rest = rest.strip_prefix("const fn ").map_or(rest, |_| &rest[6..]);
    ITEM_KINDS
        .iter()
        .any(|kind| rest.starts_with(kind))
        .then_some(rest)
}

/// How an item's docs are given.
struct Docs {
    /// The `///` lines right above it.
    lines: Vec<String>,
    /// An attribute says `doc(hidden)`.
    hidden: bool,
    /// A macro's item whose docs its callers pass in (`$(#[$doc])*`): each call site's
    /// example is its own doctest, so the call sites carry them.
    from_caller: bool,
}

/// Whether a line in a trait's body declares a method (`fn`, `async fn`, `unsafe fn`).
fn trait_method(line: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("async ").unwrap_or(t);
    t.strip_prefix("unsafe ").unwrap_or(t).starts_with("fn ")
}

/// The doc comment and attributes right above line `at`. Attributes may span lines; a blank
/// line or code ends them.
fn doc_above(lines: &[&str], at: usize) -> Docs {
    let mut docs = Docs {
        lines: Vec::new(),
        hidden: false,
        from_caller: false,
    };
    for line in lines[..at].iter().rev() {
        let t = line.trim();
        if let Some(text) = t.strip_prefix("///") {
            docs.lines.push(text.to_string());
        } else if t.starts_with("$(#[$") {
            docs.from_caller = true;
        } else if t.is_empty() || t.ends_with(';') || t.ends_with('{') || t.ends_with('}') {
            break;
        } else {
            // An attribute, or a line of one spread over several lines.
            docs.hidden |= t.contains("doc(hidden)");
        }
    }
    docs.lines.reverse();
    docs
}

/// `file:line: item` for each public item of `source` whose docs have no code block.
fn missing_examples(file: &str, source: &str) -> Vec<String> {
    if source
        .lines()
        .next()
        .is_some_and(|first| first.contains("Not public API"))
    {
        return Vec::new();
    }
    let lines: Vec<&str> = source.lines().collect();
    let mut missing = Vec::new();
    // The indentation of the `mod sealed {` the scan is in, if any.
    let mut sealed: Option<usize> = None;
    // The indentation of the `pub trait` whose body the scan is in, if any: its methods are
    // public too.
    let mut in_trait: Option<usize> = None;
    // A `pub trait` whose bounds go on over several lines: its body opens at a later `{`.
    let mut opening: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        match sealed {
            Some(at) if indent == at && line.trim() == "}" => sealed = None,
            Some(_) => continue,
            None if line.trim_end().ends_with("mod sealed {") => sealed = Some(indent),
            None => {}
        }
        let method = match in_trait {
            Some(at) if indent == at && line.trim_start().starts_with('}') => {
                in_trait = None;
                false
            }
            Some(at) => indent == at + 4 && trait_method(line),
            None => false,
        };
        if in_trait.is_none() {
            let t = line.trim_end();
            if opening == Some(indent) && t.ends_with('{') {
                (in_trait, opening) = (Some(indent), None);
            } else if public_item(line).is_some_and(|item| item.starts_with("trait ")) {
                // A body opening here, none (`{}`), or one opening below the bounds.
                if t.ends_with('{') {
                    in_trait = Some(indent);
                } else if !t.ends_with('}') && !t.ends_with(';') {
                    opening = Some(indent);
                }
            }
        }
        if !method && public_item(line).is_none() {
            continue;
        }
        let docs = doc_above(&lines, i);
        let example = docs.lines.iter().any(|l| l.trim_start().starts_with("```"));
        if docs.hidden || docs.from_caller || example {
            continue;
        }
        missing.push(format!("{file}:{}: {}", i + 1, line.trim()));
    }
    missing
}

#[test]
fn every_public_item_has_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../redkit");
    // The library's sources.
    let files = sources::rust_files(&root.join("src"));
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut missing = Vec::new();
    let mut items = 0;
    for path in &files {
        let source = std::fs::read_to_string(path).expect("a source file");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        items += source.lines().filter(|l| public_item(l).is_some()).count();
        missing.extend(missing_examples(&name, &source));
    }
    assert!(
        items > 300,
        "found only {items} public items: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "{} public items have no example in their docs (add a ``` block):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_scan_finds_what_it_should() {
    let source = "\
/// Documented, with an example.
///
/// ```
/// assert!(true);
/// ```
#[derive(Debug)]
pub struct Good;

/// Documented, no example.
#[cfg_attr(
    docsrs,
    doc(cfg(feature = \"x\"))
)]
pub async fn bad() {}

pub(crate) fn internal() {}

#[doc(hidden)]
pub const HIDDEN: u8 = 1;

    /// A constant without one.
    pub const LIMIT: usize = 3;

pub use other::Thing;

pub(super) mod sealed {
    /// Never nameable outside.
    pub trait Hooks {
        fn hook(&self);
    }
}

/// A trait.
///
/// ```
/// ```
pub trait Kind {
    /// With one.
    ///
    /// ```
    /// ```
    fn good(&self);

    /// Without.
    fn bad(&self) -> u8 {
        0
    }
}

/// Bounds over several lines.
///
/// ```
/// ```
pub trait Long:
    Clone + Send
{
    /// Without.
    fn also_bad(&self);
}

macro_rules! verbs {
    ($(#[$doc:meta])*) => {
        $(#[$doc])*
        pub fn verb() {}
    };
}
";
    assert_eq!(
        missing_examples("x.rs", source),
        [
            "x.rs:14: pub async fn bad() {}",
            "x.rs:22: pub const LIMIT: usize = 3;",
            "x.rs:45: fn bad(&self) -> u8 {",
            "x.rs:58: fn also_bad(&self);"
        ]
    );
    assert!(missing_examples("y.rs", &format!("//! Not public API\n{source}")).is_empty());
    assert_eq!(
        public_item("pub const fn get(self) -> u64 {"),
        Some("fn get(self) -> u64 {")
    );
    assert_eq!(public_item("pub(super) fn f() {}"), None);
}
