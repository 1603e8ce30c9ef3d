//! A fleet over etcd (`cluster`): three tcpmuxd instances and a real
//! three-member etcd cluster on loopback. What one instance's operator sets
//! reaches the others (and `--local` does not); `show fleet` lists the
//! members and drops one that stopped; without etcd's quorum every instance
//! keeps serving, refuses fleet changes plainly, and catches up after.

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use common::etcd::{secret, Etcd};
use common::{tagged_echo, Daemon, Scratch, PATIENCE};

/// One instance: `web` balanced over `backends`, an admin socket in
/// `dir`, in the cluster under `prefix` as `node`.
fn instance(etcd: &Etcd, dir: &Path, prefix: &str, node: &str, backends: &[SocketAddr]) -> Daemon {
    instance_with(etcd, dir, prefix, node, backends, "")
}

/// The same with `extra` lines at the top of its configuration.
fn instance_with(
    etcd: &Etcd,
    dir: &Path,
    prefix: &str,
    node: &str,
    backends: &[SocketAddr],
    extra: &str,
) -> Daemon {
    let config = format!("{extra}{}", config(etcd, dir, prefix, node, backends));
    started(&config, node)
}

/// An instance's configuration: `web` balanced over `backends`, an admin
/// socket in `dir`, in the cluster under `prefix` as `node`; more
/// `[service.*]` tables may follow.
pub(crate) fn config(
    etcd: &Etcd,
    dir: &Path,
    prefix: &str,
    node: &str,
    backends: &[SocketAddr],
) -> String {
    let backends: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "listen = [\"127.0.0.1:0\"]\nadmin_socket = \"{dir}/{node}.sock\"\n{}\
         [service.web]\nproxy = [{}]\nbalance = \"round-robin\"\n",
        etcd.cluster_line(dir, prefix, node),
        backends.join(", "),
        dir = dir.display(),
    )
}

/// The daemon of `config`, once it has tried etcd.
pub(crate) fn started(config: &str, node: &str) -> Daemon {
    let mut daemon = Daemon::binary(config);
    daemon
        .wait_for_log(|l| l.contains("fleet: joined") || l.contains("fleet: etcd unreachable"))
        .unwrap_or_else(|| panic!("{node} never tried etcd: {:?}", daemon.logs()));
    daemon
}

fn socket(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.sock"))
}

/// `tcpmux admin` on `node`'s socket.
fn admin(dir: &Path, node: &str, words: &str) -> Output {
    common::admin(&socket(dir, node), words)
}

pub(crate) fn admin_ok(dir: &Path, node: &str, words: &str) -> String {
    let out = admin(dir, node, words);
    assert!(
        out.status.success(),
        "{node}: {words}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `node`'s answer to `words` (with --json) satisfies `ok`.
pub(crate) fn wait_for_answer(
    dir: &Path,
    node: &str,
    words: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = admin_ok(dir, node, &format!("--json {words}"));
        if ok(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{node}: {words}: {answer}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The tag of the backend a new client of `web` reaches through `daemon`,
/// or what the daemon answered instead.
fn reached(daemon: &Daemon) -> String {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"web\r\n").unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.trim_start_matches("+\r\n").to_owned()
}

/// The body of `/status.json` on `metrics`.
fn get_status(metrics: &str) -> String {
    let mut stream = std::net::TcpStream::connect(metrics).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let request = format!("GET /status.json HTTP/1.0\r\nHost: {metrics}\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

pub(crate) fn two_backends() -> [SocketAddr; 2] {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    [tagged_echo(any, "one"), tagged_echo(any, "two")]
}

pub(crate) fn prefix() -> String {
    format!("/test{}", std::process::id())
}

#[test]
#[ignore = "needs etcd and etcdctl (etcd-server, etcd-client; CI runs it)"]
fn a_change_on_one_instance_reaches_the_fleet_and_a_local_one_stays_local() {
    let etcd = Etcd::cluster();
    let dir: Scratch = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = prefix();
    let nodes = ["a", "b", "c"];
    let metrics = format!("127.0.0.1:{}", common::dns::free_port());
    let dashboard = format!("metrics_listen = \"{metrics}\"\n");
    let mut fleet: Vec<Daemon> = nodes
        .iter()
        .map(|node| {
            let extra = if *node == "a" { dashboard.as_str() } else { "" };
            instance_with(&etcd, &dir, &prefix, node, &[one, two], extra)
        })
        .collect();
    for node in nodes {
        wait_for_answer(&dir, node, "show fleet", |a| {
            nodes
                .iter()
                .all(|n| a.contains(&format!("\"node\":\"{n}\"")))
        });
    }
    let table = admin_ok(&dir, "a", "show fleet");
    assert!(
        table.contains("etcd: connected to http://127.0.0.1:"),
        "{table}"
    );
    assert!(table.contains("a (this)"), "{table}");
    // The dashboard's data lists them too.
    let status = get_status(&metrics);
    for node in nodes {
        assert!(status.contains(&format!("\"node\":\"{node}\"")), "{status}");
    }
    assert!(status.contains(r#""etcd":"connected to"#), "{status}");

    // A drain on a: every instance stops sending clients to `one`.
    admin_ok(&dir, "a", &format!("set backend web {one} state drain"));
    for node in nodes {
        wait_for_answer(&dir, node, "show backends web", |a| {
            a.contains(r#""state":"drain""#)
                && a.contains(r#""set_by":{"node":"a","scope":"fleet"}"#)
        });
    }
    let mut reached_one = 0;
    for daemon in &fleet[1..] {
        for _ in 0..50 {
            let tag = reached(daemon);
            assert!(tag.starts_with("one") || tag.starts_with("two"), "{tag}");
            reached_one += usize::from(tag.starts_with("one"));
        }
    }
    assert_eq!(reached_one, 0, "of 100 clients through b and c");

    // `--local` on b: b alone turns web off, etcd never hears of it.
    let out = admin_ok(&dir, "b", "disable service web --local");
    assert!(out.contains("web: disabled"), "{out}");
    let services = admin_ok(&dir, "b", "show services");
    assert!(services.contains("b (local)"), "{services}");
    assert!(reached(&fleet[1]).starts_with('-'), "b refuses web");
    assert!(reached(&fleet[0]).starts_with("two"), "a still serves web");
    assert!(reached(&fleet[2]).starts_with("two"), "c still serves web");
    let held = etcd.dump(&prefix);
    assert!(held.contains("/state/backend/web/"), "{held}");
    assert!(!held.contains("/state/service/"), "{held}");

    // c stops: its membership goes when its lease runs out.
    let c = fleet.pop().unwrap();
    drop(c);
    wait_for_answer(&dir, "a", "show fleet", |a| !a.contains(r#""node":"c""#));
    let listed = admin_ok(&dir, "a", "--json show fleet");
    assert!(listed.contains(r#""node":"b""#), "{listed}");
}

#[test]
#[ignore = "needs etcd and etcdctl (etcd-server, etcd-client; CI runs it)"]
fn without_quorum_the_fleet_keeps_serving_and_catches_up_after() {
    let mut etcd = Etcd::cluster();
    let dir: Scratch = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = prefix();
    let a = instance(&etcd, &dir, &prefix, "a", &[one, two]);
    let mut b = instance(&etcd, &dir, &prefix, "b", &[one, two]);
    admin_ok(&dir, "a", &format!("set backend web {one} state drain"));
    wait_for_answer(&dir, "b", "show backends web", |a| {
        a.contains(r#""state":"drain""#)
    });

    // Two of three members gone: no quorum.
    etcd.stop(1);
    etcd.stop(2);
    let refused = admin(&dir, "a", &format!("set backend web {one} state ready"));
    assert_eq!(refused.status.code(), Some(1));
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains("add --local"), "{error}");
    assert!(
        b.wait_for_log(|l| l.contains("fleet: etcd unreachable"))
            .is_some(),
        "{:?}",
        b.logs()
    );
    // Everyone still serves, with the state last known.
    for daemon in [&a, &b] {
        for _ in 0..10 {
            assert!(reached(daemon).starts_with("two"));
        }
    }
    // b restarted now serves with the fleet's state from its local copy.
    drop(b);
    let mut b = instance(&etcd, &dir, &prefix, "b", &[one, two]);
    assert!(
        b.wait_for_log(|l| l.contains("kept by the last run is in force"))
            .is_some(),
        "{:?}",
        b.logs()
    );
    for _ in 0..10 {
        assert!(reached(&b).starts_with("two"), "the drain holds");
    }
    let shown = admin_ok(&dir, "b", "--json show backends web");
    assert!(
        shown.contains(r#""set_by":{"node":"a","scope":"fleet"}"#),
        "{shown}"
    );
    // An instance started now serves too.
    let c = instance(&etcd, &dir, &prefix, "c", &[one, two]);
    assert!(reached(&c).starts_with("one") || reached(&c).starts_with("two"));

    // Quorum back: a change made on a reaches b and c.
    etcd.start(1);
    etcd.start(2);
    etcd.wait_writable(0);
    for daemon in [&a, &b, &c] {
        assert!(
            daemon.wait_for_lines(1, |l| l.contains("fleet: joined")) >= 1,
            "{:?}",
            daemon.logs()
        );
    }
    wait_for_answer(&dir, "a", "show fleet", |a| a.contains(r#""node":"c""#));
    admin_ok(&dir, "a", &format!("set backend web {one} state maint"));
    for node in ["b", "c"] {
        wait_for_answer(&dir, node, "show backends web", |a| {
            a.contains(r#""state":"maint""#)
        });
    }
    assert!(reached(&c).starts_with("two"));
}

/// A `cluster` table with `secret` and `extra` keys, for --check-config.
fn cluster_config(secret: &Path, extra: &str) -> String {
    format!(
        "cluster = {{ etcd = [\"http://127.0.0.1:2379\"], secret = \"{}\"{extra} }}\n",
        secret.display()
    )
}

#[test]
fn a_cluster_without_a_private_secret_or_with_a_bad_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::scratch_dir();
    let good = secret(&dir);
    common::assert_config_rejected(
        "cluster = { etcd = [\"http://127.0.0.1:2379\"] }\n",
        "secret is required",
    );
    common::assert_config_rejected(
        &cluster_config(&good, ", node = \"edge 1\""),
        "node \"edge 1\"",
    );
    common::assert_config_rejected(
        "cluster = { etcd = [\"127.0.0.1:2379\"] }\n",
        "expected http://HOST:PORT",
    );
    common::assert_config_rejected(
        &cluster_config(&good, ", colour = 1"),
        "unknown key `colour`",
    );
    common::assert_config_rejected(
        &cluster_config(&good, ", user = \"root\""),
        "user and password go together",
    );
    let readable = dir.join("readable.key");
    std::fs::write(&readable, [1u8; 32]).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    common::assert_config_rejected(&cluster_config(&readable, ""), "chmod 600");
    let link = dir.join("link.key");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    common::assert_config_rejected(&cluster_config(&link, ""), "symbolic link");
    let short = dir.join("short.key");
    std::fs::write(&short, b"password").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    common::assert_config_rejected(&cluster_config(&short, ""), "at least 32");
}

/// A secret another local user owns (planted where the operator's was to
/// be) is refused: it is theirs to read and change.
#[test]
#[ignore = "needs root to give the file to uid 65534 (CI runs it)"]
fn a_secret_owned_by_another_user_is_refused() {
    common::require_root();
    let dir = common::scratch_dir();
    let planted = secret(&dir);
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    common::assert_config_rejected(&cluster_config(&planted, ""), "owned by uid 65534");
}

/// A reload and then `--upgrade` on an instance: the reload keeps its
/// membership and watch; the successor joins as the same node, and
/// once the predecessor's lease has run out the node is still a member and
/// takes the fleet's changes.
#[test]
#[ignore = "needs etcd and etcdctl (etcd-server, etcd-client; CI runs it)"]
fn an_upgraded_instance_stays_in_the_fleet() {
    let etcd = Etcd::cluster();
    let dir: Scratch = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = format!("{}u", prefix());
    let addr = common::successor::free_address(104);
    let mut a = Daemon::binary(&format!(
        "listen = [\"{addr}\"]\nupgrade_socket = \"{}\"\nadmin_socket = \"{}\"\n{}\
         [service.web]\nproxy = [\"{one}\", \"{two}\"]\n",
        dir.join("upgrade.sock").display(),
        socket(&dir, "a").display(),
        etcd.cluster_line(&dir, &prefix, "a"),
    ));
    a.wait_for_log(|l| l.contains("fleet: joined"))
        .expect("a joined");
    let _b = instance(&etcd, &dir, &prefix, "b", &[one, two]);
    wait_for_answer(&dir, "b", "show fleet", |f| f.contains(r#""node":"a""#));

    // A reload keeps the membership and the watch.
    a.signal("HUP");
    a.wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    admin_ok(&dir, "b", &format!("set backend web {two} weight 7"));
    wait_for_answer(&dir, "a", "show backends web", |a| {
        a.contains(r#""weight":7"#)
    });

    let successor = common::successor::Successor::start(&a.config_path());
    successor.wait_for_log("took over from the running daemon");
    successor.wait_for_log("fleet: joined");
    assert!(a.wait_exit().is_some(), "the predecessor exits");
    // b's lease and the successor's: the predecessor's has run out.
    etcd.wait_leases(2);
    let fleet = admin_ok(&dir, "b", "--json show fleet");
    assert!(fleet.contains(r#""node":"a""#), "{fleet}");
    admin_ok(&dir, "b", &format!("set backend web {one} state drain"));
    wait_for_answer(&dir, "a", "show backends web", |a| {
        a.contains(r#""set_by":{"node":"b","scope":"fleet"}"#)
    });
}

/// What another etcd client (or a backup restored from another fleet)
/// wrote under the prefix, and a copy planted in `cache` by another local
/// user, change nothing: values that do not read or do not open are left,
/// with a warning, and the instance serves from its file.
#[test]
#[ignore = "needs root, etcd and etcdctl (CI runs it)"]
fn garbage_in_etcd_and_a_planted_local_copy_change_nothing() {
    common::require_root();
    let etcd = Etcd::cluster();
    let dir: Scratch = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = format!("{}g", prefix());
    for (key, value) in [
        (
            format!("{prefix}/state/backend/web/{one}/state"),
            "{not json",
        ),
        (
            format!("{prefix}/state/service/web/disabled"),
            r#"{"value":true}"#,
        ),
        (
            format!("{prefix}/state/backend/web/{two}/weight"),
            r#"{"value":99999,"node":"x"}"#,
        ),
        (format!("{prefix}/tickets"), "sealed under another secret"),
        (format!("{prefix}/nodes/evil"), "\u{1}"),
        (format!("{prefix}/acme/cert/web.pem"), "-----BEGIN nothing"),
    ] {
        etcd.put(&key, value);
    }
    // Another user's file where this instance keeps its copy.
    let cache = dir.join("fleet-a");
    std::fs::create_dir(&cache).unwrap();
    std::fs::write(cache.join("state"), common::random_bytes(3, 200)).unwrap();
    std::os::unix::fs::chown(cache.join("state"), Some(65534), Some(65534)).unwrap();

    let mut a = instance(&etcd, &dir, &prefix, "a", &[one, two]);
    a.wait_for_log(|l| l.contains("does not open with this secret"))
        .unwrap_or_else(|| panic!("{:?}", a.logs()));
    a.wait_for_log(|l| l.contains("fleet: joined"))
        .unwrap_or_else(|| panic!("{:?}", a.logs()));
    a.wait_for_log(|l| l.contains("session-ticket keys in etcd do not open"))
        .unwrap_or_else(|| panic!("{:?}", a.logs()));
    let services = admin_ok(&dir, "a", "--json show services");
    assert!(services.contains(r#""state":"enabled""#), "{services}");
    let backends = admin_ok(&dir, "a", "--json show backends web");
    assert!(!backends.contains("set_by"), "{backends}");
    let mut reached_both = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let tag = reached(&a);
        reached_both.insert(tag.get(..3).unwrap_or_default().to_owned());
    }
    assert_eq!(reached_both.len(), 2, "{reached_both:?}");
    let fleet = admin_ok(&dir, "a", "--json show fleet");
    assert!(!fleet.contains("evil"), "{fleet}");
}
