//! The daemon's `static` items: each holds state for the whole process, which
//! a second server in one process (a test's, a worker's) would share without
//! asking. The run-time state belongs in a value built by `Server::bind` and
//! handed down; these are the justified exceptions, each with why. A new
//! one fails `cargo xtask layout` until it is passed down or listed here.

/// (file under daemon/src, static's name, why it may be one).
pub(super) const JUSTIFIED: [(&str, &str, &str); 10] = [
    (
        "ops/logging.rs",
        "QUEUE",
        "the process's one log queue, for its one writer thread",
    ),
    (
        "ops/logging.rs",
        "STARTED",
        "the writer thread starts once per process",
    ),
    (
        "ops/access_log.rs",
        "MODE",
        "the log format, set once from the command line",
    ),
    (
        "net/listener/mod.rs",
        "HANDED_OVER",
        "a fact about the process once it handed its sockets to a successor",
    ),
    (
        "net/tls_threads.rs",
        "RUNTIME",
        "the TLS threads are the process's, shared by every worker",
    ),
    (
        "net/datagram/send.rs",
        "GSO_BELOW",
        "what the host's routes let UDP GSO send, learned from the kernel's refusals: the same for every server in the process",
    ),
    ("services/chargen.rs", "CYCLE", "immutable bytes, made once"),
    ("services/sometext.rs", "TEXT", "immutable bytes, made once"),
    ("heap.rs", "COUNTING", "the test-only counting allocator"),
    (
        "ops/connection_counts.rs",
        "NEXT",
        "hands threads their metrics shard in turn; servers sharing it only spread wider",
    ),
];

/// The breach for `name` at `line` of `file` (relative to daemon/src), if
/// it is not listed.
pub(super) fn unjustified(file: &str, name: &str, line: usize) -> Option<String> {
    let listed = JUSTIFIED.iter().any(|(f, n, _)| *f == file && *n == name);
    (!listed).then(|| {
        format!(
            "daemon/src/{file}:{line}: static {name} holds state for the whole process: \
             hand it down from Server::bind, or list it with why in xtask/src/layout/statics.rs"
        )
    })
}
