//! redkit's own scripts, each declared once: one handle per file of `lua/`.
//!
//! A handle names its file, `lua/<name>.v<N>.lua`, and the declaration includes that file at
//! compile time: a missing or misnamed file does not compile. The code that runs a script
//! names its handle (`embedded::LOCK_ACQUIRE.script()`), never a string and a number. A
//! handle no code uses does not compile either (`dead_code` is denied here), and a unit test
//! keeps every file of `lua/` declared by exactly one handle, so `lua/` ships only what runs.
//!
//! A handle resolves to the [`Script`] of [`Registry::global`] (hashed once, when the
//! registry is built) and keeps it: the look-up runs once per handle, not per call.
//! Users look scripts up by name with [`Registry::require`].
#![deny(dead_code)]

use std::sync::OnceLock;

use super::registry::{Registry, Script};

/// One of redkit's own scripts: `lua/<name>.v<version>.lua`.
pub(crate) struct Embedded {
    name: &'static str,
    version: u32,
    script: OnceLock<&'static Script>,
}

impl Embedded {
    const fn new(name: &'static str, version: u32) -> Self {
        Self {
            name,
            version,
            script: OnceLock::new(),
        }
    }

    /// The script, from the global registry (found once, then kept).
    pub(crate) fn script(&self) -> &'static Script {
        self.script.get_or_init(|| {
            Registry::global()
                .require(self.name, self.version)
                .unwrap_or_else(|e| panic!("an embedded script is a valid script of lua/: {e}"))
        })
    }
}

/// Declares each handle: `HANDLE => "name", version;`. The file is included (and so must
/// exist) at compile time.
macro_rules! embedded {
    ($($(#[$meta:meta])* $handle:ident => $name:literal, $version:literal;)*) => {
        $(
            #[doc = concat!("`lua/", $name, ".v", $version, ".lua`.")]
            $(#[$meta])*
            pub(crate) static $handle: Embedded = Embedded::new($name, $version);
            const _: &str = include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"), "/lua/", $name, ".v", $version, ".lua"
            ));
        )*

        /// Every handle, in declaration order.
        #[cfg(test)]
        static ALL: &[&Embedded] = &[$(&$handle),*];
    };
}

embedded! {
    // Rate limiters.
    FIXED_WINDOW => "fixed_window", 9;
    FIXED_WINDOW_ALIGNED => "fixed_window_aligned", 3;
    FIXED_WINDOW_GROUP => "fixed_window_group", 3;
    FIXED_WINDOW_ALIGNED_GROUP => "fixed_window_aligned_group", 4;
    FIXED_WINDOW_LEASE => "fixed_window_lease", 2;
    GCRA => "gcra", 4;
    GCRA_LEASE => "gcra_lease", 1;
    SLIDING_WINDOW => "sliding_window", 4;
    SLIDING_WINDOW_LEASE => "sliding_window_lease", 1;
    FIXED_WINDOW_PEEK => "fixed_window_peek", 1;
    FIXED_WINDOW_BLOCK => "fixed_window_block", 1;
    GCRA_BLOCK => "gcra_block", 1;
    GCRA_PEEK => "gcra_peek", 1;
    SLIDING_WINDOW_PEEK => "sliding_window_peek", 1;
    // Locks.
    LOCK_ACQUIRE => "lock_acquire", 5;
    LOCK_RELEASE => "lock_release", 5;
    LOCK_RELEASE_WAKE => "lock_release_wake", 4;
    LOCK_MARK => "lock_mark", 1;
    LOCK_RENEW => "lock_renew", 3;
    LOCK_FENCE => "lock_fence", 3;
    LOCK_INSPECT => "lock_inspect", 2;
    FENCED_SET => "fenced_set", 2;
    FAIR_ACQUIRE => "fair_acquire", 1;
    FAIR_RENEW => "fair_renew", 1;
    FAIR_RELEASE => "fair_release", 1;
    FAIR_INSPECT => "fair_inspect", 1;
    REENTRANT_ACQUIRE => "reentrant_acquire", 1;
    REENTRANT_RENEW => "reentrant_renew", 1;
    REENTRANT_RELEASE => "reentrant_release", 1;
    REENTRANT_INSPECT => "reentrant_inspect", 1;
    RW_ACQUIRE => "rw_acquire", 1;
    RW_RENEW => "rw_renew", 1;
    RW_RELEASE => "rw_release", 1;
    RW_INSPECT => "rw_inspect", 1;
    SEMAPHORE_ACQUIRE => "semaphore_acquire", 1;
    SEMAPHORE_RENEW => "semaphore_renew", 1;
    SEMAPHORE_RELEASE => "semaphore_release", 2;
    // Used by the concurrency layer's leased slots (feature `tower`) only.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    SEMAPHORE_BLOCK => "semaphore_block", 1;
    SEMAPHORE_INSPECT => "semaphore_inspect", 1;
    // Inventory.
    INVENTORY_SET => "inventory_set", 3;
    INVENTORY_GET => "inventory_get", 5;
    INVENTORY_PEEK => "inventory_peek", 1;
    INVENTORY_APPLY => "inventory_apply", 14;
    INVENTORY_RESERVE => "inventory_reserve", 5;
    INVENTORY_MIGRATE => "inventory_migrate", 2;
    INVENTORY_GROUP => "inventory_group", 7;
    // Versioned values.
    VERSIONED_READ => "versioned_read", 3;
    VERSIONED_CAS => "versioned_cas", 1;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every script of `lua/` (as embedded in the registry) has exactly one handle, and every
    /// handle resolves to its own script.
    #[test]
    fn every_file_of_lua_has_exactly_one_handle() {
        let declared: Vec<String> = ALL
            .iter()
            .map(|h| format!("{}.v{}", h.name, h.version))
            .collect();
        let unique: BTreeSet<&String> = declared.iter().collect();
        assert_eq!(unique.len(), declared.len(), "a file declared twice");
        let names: BTreeSet<&str> = ALL.iter().map(|h| h.name).collect();
        assert_eq!(names.len(), ALL.len(), "one version per name in lua/");
        let embedded: BTreeSet<String> = Registry::global()
            .scripts()
            .iter()
            .map(|s| s.id().to_owned())
            .collect();
        assert_eq!(
            embedded,
            declared.iter().cloned().collect::<BTreeSet<_>>(),
            "every file of lua/ is declared by one handle in script/embedded.rs"
        );
        // The files on disk, too (the embedded copy is as old as the build).
        let on_disk: BTreeSet<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter_map(|n| n.strip_suffix(".lua").map(str::to_owned))
                .collect();
        assert_eq!(on_disk, embedded);
        for handle in ALL {
            let script = handle.script();
            assert_eq!(
                (script.name(), script.version()),
                (handle.name, handle.version)
            );
            assert!(
                std::ptr::eq(script, handle.script()),
                "kept, not looked up again"
            );
        }
    }
}
