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
/// that reads stock. This keeps the copies in the newest version of each script identical:
/// fix one, fix all. (Older versions are immutable and keep their own copy.)
#[test]
fn the_reservation_reclaim_block_is_identical_in_every_script() {
    const START: &str = "-- Lazy reclaim of expired reservations";
    const END: &str = "-- End of the reclaim block.";
    let scripts = Registry::global().scripts();
    let newest = |name: &str| {
        scripts
            .iter()
            .filter(|s| s.name() == name)
            .map(|s| s.version())
            .max()
    };
    let blocks: Vec<(String, String)> = scripts
        .iter()
        .filter(|s| s.source().contains(START) && newest(s.name()) == Some(s.version()))
        .map(|s| {
            let src = s.source();
            let from = src.find(START).unwrap();
            let to = src[from..].find(END).expect("block has an end marker") + from;
            (s.id().to_owned(), src[from..to].to_owned())
        })
        .collect();
    let ids: Vec<&str> = blocks.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["inventory_get.v3", "inventory_reserve.v3"],
        "get and reserve carry the block (inventory_apply.v4 and later have their own ZCARD-gated reclaim)"
    );
    for (id, block) in &blocks[1..] {
        assert_eq!(block, &blocks[0].1, "{id} differs from {}", blocks[0].0);
    }
}
