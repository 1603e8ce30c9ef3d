//! The fleet's state for what an instance gains later: a change made while
//! an instance lacked the service or member it names is put in force there
//! when a reload adds the service or DNS finds the member; what that
//! instance's own operator set stays. A real three-member etcd cluster and,
//! for DNS, real dnsmasq servers, all on loopback.

use crate::cluster::{admin_ok, config, prefix, started, two_backends, wait_for_answer};
use crate::common;
use crate::reload::reload;

use std::net::SocketAddr;
use std::path::Path;

use common::dns::{free_port, Dnsmasq};
use common::etcd::Etcd;

/// Waits until `b` has every change `a` made so far: `a` sets a weight on
/// `web` (which both have) and `b` shows it. The watch delivers in order,
/// so `b` has also seen (and, lacking what they name, left) the changes
/// before it.
fn synced(dir: &Path, backend: SocketAddr, weight: u32) {
    admin_ok(
        dir,
        "a",
        &format!("set backend web {backend} weight {weight}"),
    );
    wait_for_answer(dir, "b", "show backends web", |answer| {
        answer.contains(&format!("\"weight\":{weight}"))
    });
}

fn by_fleet_a(answer: &str) -> bool {
    answer.contains(r#""set_by":{"node":"a","scope":"fleet"}"#)
}

#[test]
#[ignore = "needs etcd and etcdctl (etcd-server, etcd-client; CI runs it)"]
fn a_service_a_reload_adds_takes_the_fleets_state_and_a_local_setting_stays() {
    let etcd = Etcd::cluster();
    let dir = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = prefix();
    let api = format!("[service.api]\nproxy = [\"{one}\", \"{two}\"]\n");
    let more = format!("[service.more]\nproxy = [\"{one}\"]\n");
    let last = format!("[service.last]\nproxy = [\"{one}\"]\n");
    let base = |node| config(&etcd, &dir, &prefix, node, &[one, two]);
    let _a = started(&format!("{}{api}{more}{last}", base("a")), "a");
    let mut b = started(&base("b"), "b");

    // Made on a while b has neither api nor more.
    admin_ok(&dir, "a", &format!("set backend api {one} state drain"));
    admin_ok(&dir, "a", "disable service more");
    admin_ok(&dir, "a", "disable service last");
    synced(&dir, two, 3);
    let backends = admin_ok(&dir, "b", "--json show backends");
    assert!(!backends.contains("\"api\""), "{backends}");

    // A reload gives b api: it takes the fleet's drain.
    let reloaded = reload(&mut b, &format!("{}{api}", base("b")), 1);
    assert!(reloaded.contains("configuration reloaded"), "{reloaded}");
    wait_for_answer(&dir, "b", "show backends api", |answer| {
        answer.contains(r#""state":"drain""#) && by_fleet_a(answer)
    });

    // b's operator puts that member in maint here; the next reload, which
    // gives b more (and so puts the fleet's state in force again), keeps it.
    admin_ok(
        &dir,
        "b",
        &format!("set backend api {one} state maint --local"),
    );
    let reloaded = reload(&mut b, &format!("{}{api}{more}", base("b")), 2);
    assert!(reloaded.contains("configuration reloaded"), "{reloaded}");
    wait_for_answer(&dir, "b", "show services", |answer| {
        answer.contains(r#""name":"more""#)
            && answer.contains(r#""state":"disabled""#)
            && by_fleet_a(answer)
    });
    let api_here = admin_ok(&dir, "b", "--json show backends api");
    assert!(api_here.contains(r#""state":"maint""#), "{api_here}");
    assert!(
        api_here.contains(r#""set_by":{"node":"b","scope":"local"}"#),
        "{api_here}"
    );

    // b's operator turns more back on here: a return to the default, which
    // the next reload (giving b last) leaves as b's word too.
    admin_ok(&dir, "b", "enable service more --local");
    let reloaded = reload(&mut b, &format!("{}{api}{more}{last}", base("b")), 3);
    assert!(reloaded.contains("configuration reloaded"), "{reloaded}");
    wait_for_answer(&dir, "b", "show services", |answer| {
        answer.contains(r#""name":"last""#) && answer.matches(r#""state":"disabled""#).count() == 1
    });
    let services = admin_ok(&dir, "b", "--json show services");
    let parsed: serde_json::Value = serde_json::from_str(&services).unwrap();
    let rows = parsed["services"].as_array().expect("rows");
    let more_row = rows.iter().find(|row| row["name"] == "more");
    let more_row = more_row.unwrap_or_else(|| panic!("{services}"));
    assert_eq!(more_row["state"], "enabled", "{services}");
    assert_eq!(more_row["set_by"]["scope"], "local", "{services}");
}

#[test]
#[ignore = "needs etcd, etcdctl and dnsmasq (CI runs it)"]
fn a_member_dns_finds_later_takes_the_fleets_state() {
    let etcd = Etcd::cluster();
    let dir = common::scratch_dir();
    let [one, two] = two_backends();
    let prefix = prefix();
    // a's DNS answers .2 and .3 for the name; b's only .2, until it changes.
    let (dns_a, dns_b) = (free_port(), free_port());
    let _a_dns = Dnsmasq::start(&dir, dns_a, "127.0.0.2 app.test\n127.0.0.3 app.test\n", &[]);
    let b_dir = dir.join("b-dns");
    std::fs::create_dir_all(&b_dir).unwrap();
    let b_dns = Dnsmasq::start(&b_dir, dns_b, "127.0.0.2 app.test\n", &[]);
    let node = |name, dns: u16| {
        let base = config(&etcd, &dir, &prefix, name, &[one, two]);
        let config = format!(
            "resolvers = [\"127.0.0.1:{dns}\"]\n{base}[service.app]\nproxy = \"app.test:9\"\n"
        );
        started(&config, name)
    };
    let _a = node("a", dns_a);
    let _b = node("b", dns_b);
    wait_for_answer(&dir, "a", "show backends app", |answer| {
        answer.contains("127.0.0.3:9")
    });

    admin_ok(&dir, "a", "set backend app 127.0.0.3:9 state drain");
    synced(&dir, one, 4);
    let app = admin_ok(&dir, "b", "--json show backends app");
    assert!(!app.contains("127.0.0.3:9"), "{app}");

    b_dns.set_hosts("127.0.0.2 app.test\n127.0.0.3 app.test\n");
    wait_for_answer(&dir, "b", "show backends app", |answer| {
        answer.contains("127.0.0.3:9")
            && answer.contains(r#""state":"drain""#)
            && by_fleet_a(answer)
    });
}
