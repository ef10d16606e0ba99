//! The files that run on the custom harness (`harness = false` in a `Cargo.toml`: tests/
//! support/harness.rs) register their tests in `main`; a `#[test]` or `#[tokio::test]`
//! attribute there would compile to nothing (no test harness) and the test would silently
//! never run. An unregistered test function is caught by the dead-code lint.

use std::path::Path;

/// `(package dir, test file)` of every `[[test]]` with `harness = false` in `manifest`.
fn custom_harness_files(package: &Path) -> Vec<std::path::PathBuf> {
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).expect("Cargo.toml");
    let mut files = Vec::new();
    for section in manifest.split("[[test]]").skip(1) {
        let section = section.split("\n[").next().unwrap_or(section);
        if !section.contains("harness = false") {
            continue;
        }
        let field = |key: &str| {
            section.lines().find_map(|l| {
                let value = l.trim().strip_prefix(key)?.trim().strip_prefix('=')?;
                Some(value.trim().trim_matches('"').to_owned())
            })
        };
        let name = field("name").expect("a [[test]] has a name");
        let path = field("path").unwrap_or(format!("tests/{name}.rs"));
        files.push(package.join(path));
    }
    files
}

#[test]
fn no_test_attribute_in_a_custom_harness_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for package in ["tests", "redkit-cli", "demo"] {
        files.extend(custom_harness_files(&root.join(package)));
    }
    assert!(files.len() >= 9, "found only {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for (i, line) in source.lines().enumerate() {
            let line = line.trim();
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                found.push(format!("{}:{}: {line}", file.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a test attribute in a file on the custom harness never runs: register the test in \
         main (harness::add!) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_reads_harness_false_sections() {
    let dir = std::env::temp_dir().join(format!("redkit-harness-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"x\"\n\n[[test]]\nname = \"a\"\npath = \"a.rs\"\nharness = false\n\n\
         [[test]]\nname = \"b\"\npath = \"b.rs\"\n\n[[test]]\nname = \"c\"\nharness = false\n",
    )
    .unwrap();
    let files = custom_harness_files(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(files, [dir.join("a.rs"), dir.join("tests/c.rs")]);
}
