//! The lock file `lua/scripts.lock` pins name, version, key count and SHA1 of every shipped
//! script. A shipped script is immutable: change its body and this test fails until the change
//! is shipped as a new version (`<name>.v<N+1>.lua`) and pinned with
//! `cargo run --features cli -- scripts lock --scripts-dir lua` (or
//! `REDKIT_BLESS=1 cargo test --all-features --test manifest`). Both only append pins, and
//! mark `retired = true` the pin of a version whose file left `lua/`.
//!
//! `lua/` ships only what runs: every file there has a caller in `src/`
//! (`Registry::embedded("name", N)`, the crate's one internal look-up, or the public
//! `require`), and every look-up names a file there. A version no caller uses leaves `lua/` (its pin stays, retired);
//! a test that still needs one runs it from `tests/fixtures/lua/`.

use std::collections::BTreeSet;
use std::path::Path;

use redkit::script::lockfile;
use redkit::Registry;

#[path = "fixtures/mod.rs"]
mod fixtures;
#[path = "support/sources.rs"]
mod sources;

const LOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../redkit/lua/scripts.lock");
const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../redkit/lua");
const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../redkit/src");

/// `name.vN` of every `.lua` file in `dir`.
fn lua_files(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".lua").map(str::to_owned))
        .collect()
}

/// The script look-ups of some Rust code, as `name.vN`: `require("name", N)` and
/// `embedded("name", N)`, on one line or several; comment lines (doc examples included) are
/// not callers and are skipped.
fn look_ups(code: &str) -> Vec<String> {
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    for call in ["require(", "embedded("] {
        for (at, _) in code.match_indices(call) {
            let rest = code[at + call.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('"') else {
                continue;
            };
            let Some((name, rest)) = rest.split_once('"') else {
                continue;
            };
            let Some(rest) = rest.trim_start().strip_prefix(',') else {
                continue;
            };
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !digits.is_empty() {
                out.push(format!("{name}.v{digits}"));
            }
        }
    }
    out
}

/// `name.vN` -> the files of `src/` that look it up.
fn callers_in_src() -> std::collections::BTreeMap<String, Vec<String>> {
    let files = sources::rust_files(Path::new(SRC));
    let mut callers = std::collections::BTreeMap::<String, Vec<String>>::new();
    for file in files {
        let code = std::fs::read_to_string(&file).unwrap();
        for id in look_ups(&code) {
            let shown = file.strip_prefix(SRC).unwrap();
            callers
                .entry(id)
                .or_default()
                .push(shown.display().to_string());
        }
    }
    callers
}

#[test]
fn the_scan_finds_look_ups_and_skips_comments() {
    let code = "let a = Registry::global().require(\"gcra\", 1)?;\n\
                /// let d = Registry::global().require(\"fixed_window\", 1)?;\n\
                acquire: Registry::embedded(\"lock_acquire\", 3),\n\
                set: registry\n    .require(\n        \"inventory_set\",\n        2,\n    )?,\n\
                map.get(\"not_a_look_up\")";
    assert_eq!(
        look_ups(code),
        ["gcra.v1", "inventory_set.v2", "lock_acquire.v3"]
    );
}

#[test]
fn lua_holds_exactly_the_versions_src_calls() {
    let files = lua_files(LUA);
    let callers = callers_in_src();
    let uncalled: Vec<&String> = files.iter().filter(|f| !callers.contains_key(*f)).collect();
    assert!(
        uncalled.is_empty(),
        "lua/ ships {} files no code in src/ calls: {uncalled:?}. Move a version no caller uses \
         out of lua/ (to tests/fixtures/lua/ when a test still runs it) and run \
         `REDKIT_BLESS=1 cargo test --all-features --test manifest` to mark it retired",
        uncalled.len()
    );
    let missing: Vec<String> = callers
        .iter()
        .filter(|(id, _)| !files.contains(*id))
        .map(|(id, at)| format!("{id} (called in {})", at.join(", ")))
        .collect();
    assert!(
        missing.is_empty(),
        "src/ looks up versions lua/ does not ship: {missing:?}"
    );
}

#[test]
fn no_retired_version_is_embedded() {
    let registry = Registry::global();
    assert!(
        !registry.retired().is_empty(),
        "the lock keeps the retired pins"
    );
    for retired in registry.retired() {
        let (name, version) = retired.id.rsplit_once(".v").unwrap();
        let version: u32 = version.parse().unwrap();
        assert!(
            registry.require(name, version).is_err(),
            "{} is pinned retired but embedded in lua/",
            retired.id
        );
        assert!(
            !registry.scripts().iter().any(|s| s.sha1() == retired.sha1),
            "an embedded script has the body of retired {}",
            retired.id
        );
        assert!(!lua_files(LUA).contains(&retired.id), "{}", retired.id);
    }
    // Every version ever shipped is pinned: the live ones and the retired ones.
    let lock = std::fs::read_to_string(LOCK).unwrap();
    assert_eq!(
        lock.matches("[[script]]").count(),
        registry.scripts().len() + registry.retired().len()
    );
}

/// The fixtures are the retired versions byte for byte (same SHA1 as their pin).
#[test]
fn fixtures_are_retired_versions_unchanged() {
    let retired = Registry::global().retired();
    assert!(fixtures::registry().problems().is_empty());
    assert_eq!(
        fixtures::registry().scripts().len(),
        lua_files(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/lua")).len()
    );
    for script in fixtures::registry().scripts() {
        let pin = retired
            .iter()
            .find(|r| r.id == script.id())
            .unwrap_or_else(|| panic!("{} is not a retired version", script.id()));
        assert_eq!(pin.sha1, script.sha1(), "{} changed", script.id());
    }
}

#[test]
fn every_file_is_a_valid_script() {
    assert_eq!(Registry::global().problems(), &[]);
    assert_eq!(lua_files(LUA).len(), Registry::global().scripts().len());
}

#[test]
fn lock_pins_every_shipped_script() {
    // The files on disk (not the embedded copy, which is as old as the last build).
    let registry = Registry::from_dir(LUA).unwrap();
    if std::env::var_os("REDKIT_BLESS").is_some() {
        match lockfile::bless(&registry, registry.lock_text()) {
            Ok(text) => std::fs::write(LOCK, text).expect("write lock"),
            Err(problems) => panic!("{}", lockfile::report(&problems)),
        }
    }
    let registry = Registry::from_dir(LUA).unwrap();
    let problems = lockfile::check(&registry);
    assert!(problems.is_empty(), "{}", lockfile::report(&problems));
    // The embedded set is the same set (its lock is as old as the build: not when blessing).
    if std::env::var_os("REDKIT_BLESS").is_none() {
        let problems = lockfile::check(Registry::global());
        assert!(problems.is_empty(), "{}", lockfile::report(&problems));
    }
}

#[test]
fn a_bless_never_rewrites_a_pin() {
    let lock = std::fs::read_to_string(LOCK).unwrap();
    let pinned = &Registry::global().scripts()[0];
    let edited = Registry::from_files([
        (
            format!("{}.lua", pinned.id()),
            format!("{}\n-- edited", pinned.source()),
        ),
        ("scripts.lock".to_owned(), lock.clone()),
    ]);
    let problems = lockfile::bless(&edited, Some(&lock)).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, lockfile::LockProblem::BodyChanged { script, .. } if script == pinned.id())),
        "{problems:?}"
    );
    // A new version appends, and every old pin stays byte for byte.
    let mut files: Vec<(String, String)> = Registry::global()
        .scripts()
        .iter()
        .map(|s| (format!("{}.lua", s.id()), s.source().to_owned()))
        .collect();
    files.push(("brand_new.v1.lua".into(), "--! keys: 1\nreturn 1".into()));
    let grown = Registry::from_files(files);
    let text = lockfile::bless(&grown, Some(&lock)).unwrap();
    assert!(text.starts_with(&lock), "append-only");
    assert!(text[lock.len()..].contains("name = \"brand_new\""));
}

#[test]
fn a_bless_marks_a_removed_version_retired_and_refuses_a_retired_one_back() {
    let lock = std::fs::read_to_string(LOCK).unwrap();
    let all = Registry::global().scripts();
    let (gone, kept) = all.split_first().unwrap();
    let files = |scripts: &[redkit::Script]| -> Vec<(String, String)> {
        scripts
            .iter()
            .map(|s| (format!("{}.lua", s.id()), s.source().to_owned()))
            .collect()
    };
    let shrunk = Registry::from_files(files(kept));
    // Not blessed yet: the gone file is a problem.
    let mut unblessed = files(kept);
    unblessed.push(("scripts.lock".into(), lock.clone()));
    let problems = lockfile::check(&Registry::from_files(unblessed));
    assert!(
        matches!(&problems[..], [lockfile::LockProblem::FileMissing { script }] if script == gone.id()),
        "{problems:?}"
    );
    // Blessed: the pin stays, marked retired; nothing else changes.
    let text = lockfile::bless(&shrunk, Some(&lock)).unwrap();
    assert_eq!(text.len(), lock.len() + "retired = true\n".len());
    assert_eq!(text.replacen("retired = true\n", "", 1).len(), lock.len());
    let mut blessed = files(kept);
    blessed.push(("scripts.lock".into(), text.clone()));
    let blessed = Registry::from_files(blessed);
    assert!(lockfile::check(&blessed).is_empty());
    assert!(blessed
        .retired()
        .iter()
        .any(|r| r.id == gone.id() && r.sha1 == gone.sha1()));
    // A retired version never ships again.
    let mut back = files(all);
    back.push(("scripts.lock".into(), text.clone()));
    let back = Registry::from_files(back);
    let problems = lockfile::check(&back);
    assert!(
        problems.iter().any(|p| matches!(p, lockfile::LockProblem::RetiredEmbedded { script } if script == gone.id())),
        "{problems:?}"
    );
    assert!(lockfile::bless(&back, Some(&text)).is_err());
}

/// Redis scripts cannot share code, so the lazy reclaim of expired reservations (with the
/// strict integer parser and the ACL-checked write plan) is repeated in every inventory script
/// that reads stock, marked `--! shared: reclaim` (in a Functions library it is one function
/// per distinct text). This keeps the copies in the newest version of each script identical:
/// fix one, fix all. Older versions are immutable and keep their own copy.
#[test]
fn the_reservation_reclaim_block_is_marked_shared_and_identical_in_every_script() {
    const MARK: &str = "--! shared: reclaim\n";
    let scripts = Registry::global().scripts();
    let newest = |name: &str| {
        scripts
            .iter()
            .filter(|s| s.name() == name)
            .map(|s| s.version())
            .max()
    };
    let ids: Vec<&str> = scripts
        .iter()
        .filter(|s| s.source().contains(MARK) && newest(s.name()) == Some(s.version()))
        .map(|s| s.id())
        .collect();
    assert_eq!(
        ids,
        ["inventory_get.v4", "inventory_reserve.v4"],
        "get and reserve carry the block (inventory_apply.v4 and later have their own ZCARD-gated reclaim)"
    );
    let blocks: Vec<&str> = ids
        .iter()
        .map(|id| {
            let (name, v) = id.split_once(".v").unwrap();
            let src = Registry::global()
                .require(name, v.parse().unwrap())
                .unwrap()
                .source();
            let from = src.find(MARK).unwrap();
            let to = src.find("--! end shared: reclaim").expect("closed");
            &src[from..to]
        })
        .collect();
    assert_eq!(blocks[0], blocks[1], "the newest copies are identical");
    // One definition in the library, one call per carrying script.
    let code = redkit::script::Library::redkit().code();
    assert_eq!(
        code.matches("local function redkit_shared_reclaim_")
            .count(),
        1
    );
    assert_eq!(code.matches("= redkit_shared_reclaim_").count(), 2);
    // The unmarked copies of older versions stay inline in their own functions.
    let inline = scripts
        .iter()
        .filter(|s| {
            s.source()
                .contains("-- Lazy reclaim of expired reservations")
        })
        .filter(|s| !s.source().contains(MARK))
        .count();
    assert_eq!(
        code.matches("-- Lazy reclaim of expired reservations")
            .count(),
        1 + inline
    );
    // A later version with another text of the block: a second function, the first kept.
    let get = Registry::global().require("inventory_get", 4).unwrap();
    let edited = get
        .source()
        .replace("local RECLAIM = 16", "local RECLAIM = 17");
    let set = Registry::from_files([
        ("inventory_get.v4.lua", get.source().to_owned()),
        ("inventory_get.v5.lua", edited),
    ]);
    let library = redkit::script::Library::new("t", &set).unwrap();
    assert_eq!(
        library
            .code()
            .matches("local function redkit_shared_reclaim_")
            .count(),
        2
    );
}
