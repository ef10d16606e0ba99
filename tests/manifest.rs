//! The lock file `lua/scripts.lock` pins name, version, key count and SHA1 of every shipped
//! script. A shipped script is immutable: change its body (or its header: a comment is part of
//! the SHA1) and this test fails until the change is shipped as a new version
//! (`<name>.v<N+1>.lua`) and pinned with
//! `cargo run -p redkit-cli -- scripts lock --scripts-dir redkit/lua` (or
//! `REDKIT_BLESS=1 cargo test -p redkit-tests --all-features --test manifest`). Both only
//! append pins, and mark `retired = true` the pin of a version whose file left `lua/`.
//!
//! `lua/` ships only what runs: each file is declared by one handle in
//! `redkit/src/script/embedded.rs`, which includes it at compile time (a missing file does not
//! compile), a handle no code uses does not compile either, and a unit test there keeps every
//! file of `lua/` declared. A version no handle names leaves `lua/` (its pin stays, retired); a
//! test that still needs one runs it from `tests/fixtures/lua/`.
//!
//! A header (the leading comment block) holds the contract only: keys, arguments, reply,
//! errors and what the script writes. History (what an older version did, measurements)
//! belongs in the changelog; no comment names a version.

use std::collections::BTreeSet;

use redkit::script::lockfile;
use redkit::Registry;

#[path = "fixtures/mod.rs"]
mod fixtures;

const LOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../redkit/lua/scripts.lock");
const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../redkit/lua");

/// `name.vN` of every `.lua` file in `dir`.
fn lua_files(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".lua").map(str::to_owned))
        .collect()
}

/// Words that tell a script's history or measurements rather than its contract.
const HISTORY_WORDS: &[&str] = &[
    "previously",
    "formerly",
    "no longer",
    "used to",
    "unchanged",
    "as before",
    "bench",
    "measured",
    "faster",
    "slower",
    "ratio",
    "server cpu",
];

/// `true` when `text` names a script version: `v8`, `v8's`, `fixed_window.v7` (a `v` that
/// starts a word or follows a `.`, then digits that end the word).
fn names_a_version(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|i| {
        let starts = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')
            || bytes[i - 1] == b'.';
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let ends = bytes
            .get(i + 1 + digits)
            .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
        bytes[i] == b'v' && starts && digits > 0 && ends
    })
}

/// `true` when `text` gives a speed ratio, as `0.83x`.
fn gives_a_ratio(text: &str) -> bool {
    let bytes = text.as_bytes();
    (1..bytes.len()).any(|i| {
        bytes[i] == b'x'
            && bytes[i - 1].is_ascii_digit()
            && bytes
                .get(i + 1)
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
    })
}

/// The history a script's comments carry, one entry per offending line: in the header (the
/// leading `--` block) a version named, a history word or a ratio; in the body's comments a
/// version named.
fn history_in(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_header = true;
    for (n, line) in source.lines().enumerate() {
        in_header &= line.starts_with("--");
        // A comment line, or a comment after code.
        let Some(text) = line
            .trim_start()
            .strip_prefix("--")
            .or_else(|| line.split_once(" -- ").map(|(_, c)| c))
        else {
            continue;
        };
        let lower = text.to_ascii_lowercase();
        let why = if names_a_version(text) {
            Some("names a version")
        } else if in_header && gives_a_ratio(text) {
            Some("gives a ratio")
        } else if in_header {
            HISTORY_WORDS
                .iter()
                .find(|w| lower.contains(*w))
                .map(|_| "tells history")
        } else {
            None
        };
        if let Some(why) = why {
            found.push(format!("line {}: {why}: {}", n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn the_history_rules_read_words_not_parts_of_words() {
    assert!(names_a_version("as in v8, below"));
    assert!(names_a_version("v7's steps"));
    assert!(names_a_version("the counter is fixed_window.v7's"));
    assert!(!names_a_version("KEYS[1] = window counter; ARGV[2] = v"));
    assert!(!names_a_version("evals and lv8x, dev2"));
    assert!(gives_a_ratio("costs 0.83x of the other"));
    assert!(!gives_a_ratio("'0x10' is refused"));
    let old = "--! keys: 1\n--! Counter, v2: as v1, 0.9x faster.\nreturn 1 -- no longer v1\n";
    assert_eq!(history_in(old).len(), 2, "{:?}", history_in(old));
    assert!(history_in("--! keys: 1\n--! A counter.\nlocal was = 1 -- a count\n").is_empty());
}

/// Every shipped script's header holds its contract only, and no comment names a version.
#[test]
fn headers_hold_the_contract_not_history() {
    let registry = Registry::from_dir(LUA).unwrap();
    let found: Vec<String> = registry
        .scripts()
        .iter()
        .flat_map(|s| {
            history_in(s.source())
                .into_iter()
                .map(move |f| format!("{}.lua {f}", s.id()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "a header holds the contract (keys, arguments, reply, errors, writes); history goes to \
         CHANGELOG.md, and a cleaned header is a new version:\n{}",
        found.join("\n")
    );
}

/// The rules catch the headers that carried history (kept byte for byte as fixtures).
#[test]
fn the_history_rules_fail_the_retired_headers() {
    for id in [("fixed_window", 7), ("inventory_apply", 12)] {
        let script = fixtures::script(id.0, id.1);
        assert!(!history_in(script.source()).is_empty(), "{}", script.id());
    }
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
            "{} is pinned retired but in the registry's scripts",
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
        ["inventory_get.v5", "inventory_reserve.v5"],
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
    let get = Registry::global().require("inventory_get", 5).unwrap();
    let edited = get
        .source()
        .replace("local RECLAIM = 16", "local RECLAIM = 17");
    let set = Registry::from_files([
        ("inventory_get.v5.lua", get.source().to_owned()),
        ("inventory_get.v6.lua", edited),
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
