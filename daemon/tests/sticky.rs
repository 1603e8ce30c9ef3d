//! `balance = "source"`: a client (the address a PROXY header announces)
//! keeps its member, clients spread over the members, and taking one member
//! out moves only that member's clients.

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;

use common::{tagged_echo, Daemon, PATIENCE};

/// The tag of the member a client announced as `client` reaches.
fn reached_as(daemon: &Daemon, client: &str) -> u8 {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 1\r\nweb\r\n");
    stream.write_all(header.as_bytes()).unwrap();
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..3], b"+\r\n");
    reply[3]
}

#[test]
fn a_client_keeps_its_member_and_only_a_removed_members_clients_move() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let members = [
        tagged_echo(any, "A"),
        tagged_echo(any, "B"),
        tagged_echo(any, "C"),
    ];
    let scratch = common::scratch_dir();
    let socket = scratch.join("admin.sock");
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", accept_proxy_from = [\"127.0.0.1/32\"] }}]\n\
         admin_socket = \"{}\"\n\
         [service.web]\nproxy = [\"{}\", \"{}\", \"{}\"]\nbalance = \"source\"\n",
        socket.display(),
        members[0],
        members[1],
        members[2]
    ));
    let clients: Vec<String> = (1..=60).map(|i| format!("10.1.{}.{i}", i % 7)).collect();
    let first: Vec<u8> = clients.iter().map(|c| reached_as(&daemon, c)).collect();
    let again: Vec<u8> = clients.iter().map(|c| reached_as(&daemon, c)).collect();
    assert_eq!(first, again, "a client changed members");
    // Spread over all three. The members' ports differ in every run, and
    // with them the hash: 60 clients give a member 20 give or take 3.7.
    // 8..=32 failed about 1 run in 600 (once in CI, with 33); outside
    // 4..=40, about 1 in 2,000,000.
    for tag in [b'A', b'B', b'C'] {
        let on = first.iter().filter(|&&t| t == tag).count();
        assert!((4..=40).contains(&on), "{} of 60 on {}", on, tag as char);
    }
    // B out for maintenance: its clients move, no one else does.
    let maint = format!("set backend web {} state maint", members[1]);
    common::admin_ok(&socket, &maint);
    for (client, before) in clients.iter().zip(&first) {
        let now = reached_as(&daemon, client);
        if *before == b'B' {
            assert_ne!(now, b'B', "{client} still on the member in maintenance");
        } else {
            assert_eq!(now, *before, "{client} moved though its member is up");
        }
    }
}

/// The tag of the member a ClientHello for `name` reaches through a
/// detecting listener (every client here comes from 127.0.0.1).
fn reached_by_name(daemon: &Daemon, name: &str) -> u8 {
    let hello = tcpmux_proto::sniff::client_hello::build(Some(name), &[], 0, 16384);
    let mut stream = daemon.connect();
    stream.write_all(&hello).unwrap();
    let mut tag = [0u8; 1];
    stream.read_exact(&mut tag).unwrap();
    tag[0]
}

#[test]
fn hash_key_sni_sticks_each_server_name_to_a_member() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let members = [
        tagged_echo(any, "A"),
        tagged_echo(any, "B"),
        tagged_echo(any, "C"),
    ];
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         [service.web]\nproxy = [\"{}\", \"{}\", \"{}\"]\nbalance = \"source\"\n\
         hash_key = \"sni\"\nsni = [\"*.example.org\"]\n",
        members[0], members[1], members[2]
    ));
    // Enough names that an even spread is the only likely one whatever
    // ports the members got (the scores hash them): 100 each expected,
    // 50 is more than six standard deviations off.
    let names: Vec<String> = (1..=300).map(|i| format!("t{i}.example.org")).collect();
    let first: Vec<u8> = names.iter().map(|n| reached_by_name(&daemon, n)).collect();
    let again: Vec<u8> = names.iter().map(|n| reached_by_name(&daemon, n)).collect();
    assert_eq!(first, again, "a name changed members");
    // All from one address, yet spread by name (by address: all on one).
    for tag in [b'A', b'B', b'C'] {
        let on = first.iter().filter(|&&t| t == tag).count();
        assert!((50..=150).contains(&on), "{} of 300 on {}", on, tag as char);
    }
}

#[test]
fn hash_key_needs_a_hashing_balance() {
    common::assert_config_rejected(
        "[service.web]\nproxy = \"127.0.0.1:1\"\nhash_key = \"sni\"\n",
        "hash_key needs balance = \"source\"",
    );
    common::assert_config_rejected(
        "[service.web]\nproxy = \"127.0.0.1:1\"\nbalance = \"source\"\nhash_key = \"name\"\n",
        "hash_key",
    );
}
