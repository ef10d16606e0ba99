//! CPU time of the bench process itself, for "client CPU per operation" columns.

/// CPU time (ns) of this process, every thread (the runtime and redis-rs; not the
/// redis-server, not wrk): the sum over `/proc/self/task/*/schedstat`, `None` without it.
pub fn process_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended meanwhile is skipped.
        if let Ok(text) = std::fs::read_to_string(path) {
            total = total.saturating_add(text.split_whitespace().next()?.parse().ok()?);
        }
    }
    Some(total)
}
