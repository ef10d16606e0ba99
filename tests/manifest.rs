//! The lock file `lua/scripts.lock` pins name, version, key count and SHA1 of every shipped
//! script. A shipped script is immutable: change its body and this test fails until the change
//! is shipped as a new version (`<name>.v<N+1>.lua`) and the lock is regenerated with
//! `REDKIT_BLESS=1 cargo test --test manifest`.

use std::collections::BTreeMap;

use redkit::Registry;

#[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq, Eq, Clone)]
struct Entry {
    name: String,
    version: u32,
    keys: usize,
    /// `true` for a `--! keys: variadic` script (then `keys` is the minimum, 1).
    #[serde(default, skip_serializing_if = "is_false")]
    variadic: bool,
    sha1: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(serde::Deserialize, serde::Serialize, Debug)]
struct Lock {
    script: Vec<Entry>,
}

const LOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lua/scripts.lock");

fn expected() -> Vec<Entry> {
    Registry::global()
        .scripts()
        .iter()
        .map(|s| Entry {
            name: s.name().to_owned(),
            version: s.version(),
            keys: s.key_count(),
            variadic: s.is_variadic(),
            sha1: s.sha1().to_owned(),
        })
        .collect()
}

fn render(entries: &[Entry]) -> String {
    let header = "# Generated: REDKIT_BLESS=1 cargo test --test manifest\n\
                  # A shipped script never changes: a new body is a new version.\n\n";
    header.to_owned()
        + &toml::to_string(&Lock {
            script: entries.to_vec(),
        })
        .expect("serialize lock")
}

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
    let expected = expected();
    if std::env::var_os("REDKIT_BLESS").is_some() {
        std::fs::write(LOCK, render(&expected)).expect("write lock");
    }
    let text = std::fs::read_to_string(LOCK).expect("lua/scripts.lock exists");
    let lock: Lock = toml::from_str(&text).expect("lock parses");
    let locked: BTreeMap<(String, u32), Entry> = lock
        .script
        .into_iter()
        .map(|e| ((e.name.clone(), e.version), e))
        .collect();
    let shipped: BTreeMap<(String, u32), Entry> = expected
        .into_iter()
        .map(|e| ((e.name.clone(), e.version), e))
        .collect();
    for (id, entry) in &shipped {
        match locked.get(id) {
            None => panic!(
                "{}.v{} is not in lua/scripts.lock: run REDKIT_BLESS=1 cargo test --test manifest",
                id.0, id.1
            ),
            Some(pinned) if pinned.sha1 != entry.sha1 => panic!(
                "lua/{}.v{}.lua changed after it was pinned (SHA1 {} -> {}). A shipped script \
                 is immutable: restore it and ship the change as {}.v{}.lua",
                id.0,
                id.1,
                pinned.sha1,
                entry.sha1,
                id.0,
                id.1 + 1
            ),
            Some(pinned) => assert_eq!(pinned, entry, "key count changed for {}.v{}", id.0, id.1),
        }
    }
    for id in locked.keys() {
        assert!(
            shipped.contains_key(id),
            "lua/scripts.lock pins {}.v{} but no such file is embedded",
            id.0,
            id.1
        );
    }
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
        [
            "inventory_apply.v2",
            "inventory_get.v2",
            "inventory_reserve.v2"
        ],
        "get, apply and reserve carry the block"
    );
    for (id, block) in &blocks[1..] {
        assert_eq!(block, &blocks[0].1, "{id} differs from {}", blocks[0].0);
    }
}
