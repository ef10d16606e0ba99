//! The crate's own source files, for the tests that read them (`manifest`, `doc_examples`).
//! Included by path (`#[path = "support/sources.rs"]`), so those tests need no server.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively, sorted by path.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}
