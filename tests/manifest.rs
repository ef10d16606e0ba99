//! The lock file `lua/scripts.lock` pins name, version, key count and SHA1 of every shipped
//! script. A shipped script is immutable: change its body and this test fails until the change
//! is shipped as a new version (`<name>.v<N+1>.lua`) and pinned with
//! `cargo run --features cli -- scripts lock --scripts-dir lua` (or
//! `REDKIT_BLESS=1 cargo test --all-features --test manifest`). Both only append pins.

use redkit::script::lockfile;
use redkit::Registry;

const LOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lua/scripts.lock");

#[test]
fn every_file_is_a_valid_script() {
    assert_eq!(Registry::global().problems(), &[]);
    let on_disk: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lua"))
        .collect();
    assert_eq!(on_disk.len(), Registry::global().scripts().len());
}

#[test]
fn lock_pins_every_shipped_script() {
    // The files on disk (not the embedded copy, which is as old as the last build).
    let registry = Registry::from_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua")).unwrap();
    if std::env::var_os("REDKIT_BLESS").is_some() {
        match lockfile::bless(&registry, registry.lock_text()) {
            Ok(text) => std::fs::write(LOCK, text).expect("write lock"),
            Err(problems) => panic!("{}", lockfile::report(&problems)),
        }
    }
    let registry = Registry::from_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua")).unwrap();
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
