//! What `tcpmuxd --check-config` says about a file, as a sysadmin reads it:
//! misspelt keys, wrong types, where in which file, and what is valid but odd;
//! a TLS listener's bad certificates, keys and combinations.

use crate::common;

use std::process::Command;

use common::Daemon;

/// (exit code, stdout, stderr) of `tcpmuxd --check-config` on `text` as
/// `name` in a fresh directory, with `extra` files beside it.
fn check(text: &str, extra: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let dir = common::scratch_dir();
    for (name, content) in extra {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let path = dir.join("tcpmuxd.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_misspelt_key_gets_did_you_mean_and_a_caret() {
    let (code, _, stderr) = check("listen = \"127.0.0.1:0\"\nmax_conections = 100\n", &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(":2:1: unknown key `max_conections`; did you mean `max_connections`?"),
        "{stderr}"
    );
    assert!(
        stderr.contains("2 | max_conections = 100\n  | ^^^^^^^^^^^^^^"),
        "{stderr}"
    );
    // In a listener table, and a service table too.
    let (_, _, stderr) = check(
        "listen = [{ address = \"127.0.0.1:0\", acept_proxy_from = [] }]\n",
        &[],
    );
    assert!(
        stderr
            .contains("listen: unknown key `acept_proxy_from`; did you mean `accept_proxy_from`?"),
        "{stderr}"
    );
    let (_, _, stderr) = check("[service.x]\nbuiltin = \"echo\"\nmax_conection = 1\n", &[]);
    assert!(
        stderr.contains("did you mean `max_connections`?"),
        "{stderr}"
    );
}

#[test]
fn type_errors_are_in_plain_words() {
    let (code, _, stderr) = check("max_connections = \"100\"\n", &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("expected a whole number, found text \"100\""),
        "{stderr}"
    );
    let (_, _, stderr) = check("builtin_services = 1\n", &[]);
    assert!(
        stderr.contains("expected true or false, found the number 1"),
        "{stderr}"
    );
}

#[test]
fn durations_listen_and_empty_configurations() {
    let (code, stdout, stderr) = check(
        "listen = \"127.0.0.1:0\"\nnegotiation_timeout = \"1m30s\"\nshutdown_grace = \"250ms\"\nclose_drain_timeout = \"500us\"\n",
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("listening on 127.0.0.1:0"), "{stdout}");
    let (code, _, stderr) = check("negotiation_timeout = \"1m30\"\n", &[]);
    assert_eq!(code, Some(1), "{stderr}");
    // Valid, but serving nothing: said, not refused.
    let (code, _, stderr) = check("builtin_services = false\n", &[]);
    assert_eq!(code, Some(0));
    assert!(
        stderr.contains("warning") && stderr.contains("no services"),
        "{stderr}"
    );
}

#[test]
fn drop_in_files_add_services_and_their_errors_name_them() {
    let main = "builtin_services = false\ninclude = [\"conf.d/*.toml\"]\n";
    let (code, stdout, stderr) = check(
        main,
        &[
            (
                "conf.d/10-web.toml",
                "[service.web]\nproxy = \"127.0.0.1:8080\"\n",
            ),
            (
                "conf.d/20-db.toml",
                "[service.db]\nproxy = \"127.0.0.1:5432\"\n",
            ),
            ("conf.d/notes.txt", "not toml at all"),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("2 services (db, web)"), "{stdout}");

    let (code, _, stderr) = check(
        main,
        &[
            (
                "conf.d/10-web.toml",
                "[service.web]\nproxy = \"127.0.0.1:8080\"\n",
            ),
            (
                "conf.d/20-bad.toml",
                "[service.db]\n\nprxy = \"127.0.0.1:5432\"\n",
            ),
        ],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("conf.d/20-bad.toml:3:1: unknown key `prxy`; did you mean `proxy`?"),
        "{stderr}"
    );

    // QUIC server IDs are the whole configuration's: one in a drop-in that
    // begins one in the main file is refused there.
    let (code, _, stderr) = check(
        &format!("{main}[service.a]\nproxy_udp = [{{ address = \"127.0.0.1:1\", quic_server_id = \"0a\" }}]\n"),
        &[(
            "conf.d/10-b.toml",
            "[service.b]\nproxy_udp = [{ address = \"127.0.0.1:2\", quic_server_id = \"0a0b\" }]\n",
        )],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("conf.d/10-b.toml") && stderr.contains("127.0.0.1:1 of service a has 0a"),
        "{stderr}"
    );

    let (code, _, stderr) = check(
        "include = [\"conf.d/*.toml\"]\n[service.web]\nbuiltin = \"echo\"\n",
        &[("conf.d/web.toml", "[service.WEB]\nbuiltin = \"daytime\"\n")],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("conf.d/web.toml:1:")
            && stderr.contains("defined twice")
            && stderr.contains("tcpmuxd.toml:2"),
        "{stderr}"
    );

    // A drop-in holds service tables only.
    let (code, _, stderr) = check(
        main,
        &[("conf.d/10-web.toml", "listen = [\"127.0.0.1:9\"]\n")],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("conf.d/10-web.toml:1:1: unknown key `listen`; the keys here are service"),
        "{stderr}"
    );

    // An empty or a missing conf.d is fine; a missing plain file is not.
    let (code, _, _) = check("include = [\"conf.d/*.toml\"]\n", &[("conf.d/README", "x")]);
    assert_eq!(code, Some(0));
    let (code, _, stderr) = check("include = [\"conf.d/*.toml\"]\n", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = check("include = [\"extra.toml\"]\n", &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("extra.toml"), "{stderr}");
}

#[test]
fn the_documented_and_the_shipped_configurations_pass() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let docs = std::fs::read_to_string(format!("{root}/docs/configuration.md")).unwrap();
    let example = docs.split("## Example").nth(1).expect("an Example section");
    let toml = example
        .split("```toml\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("a toml block");
    let (code, _, stderr) = check(toml, &[]);
    assert_eq!(code, Some(0), "docs/configuration.md's example: {stderr}");

    // The package's /etc/tcpmuxd/tcpmuxd.toml, its conf.d beside it.
    let shipped = std::fs::read_to_string(format!("{root}/contrib/tcpmuxd.toml")).unwrap();
    let shipped = shipped.replace("/etc/tcpmuxd/conf.d/", "conf.d/");
    let (code, stdout, stderr) = check(&shipped, &[("conf.d/README", "x")]);
    assert_eq!(code, Some(0), "contrib/tcpmuxd.toml: {stderr}");
    assert!(stdout.contains("listening on 0.0.0.0:1"), "{stdout}");
}

#[test]
fn tls_configuration_errors_are_clear() {
    let setup = common::pki::TlsSetup::new();
    let table = setup.tls_table("");
    let listen = |tls: &str| format!("listen = [{{ address = \"127.0.0.1:0\", {tls} }}]\n");
    common::assert_config_rejected(
        &format!(
            "{}handoff_socket = \"/tmp/x.sock\"\n[service.h]\nhandoff = {{ uid = [0] }}\n",
            listen(&table)
        ),
        "needs kernel TLS",
    );
    let acme = |keys: &str| format!("tls = {{ acme = {{ {keys} }} }}");
    for (tls, words) in [
        (
            acme("directory = \"http://ca.test/dir\", names = [\"a.test\"]"),
            "must be an https:// URL",
        ),
        (
            acme("directory = \"https://ca.test/dir\", names = [\"*.a.test\"]"),
            "a wildcard name needs the DNS-01 challenge",
        ),
        (
            acme("directory = \"https://ca.test/dir\", names = []"),
            "names needs at least one DNS name",
        ),
        (
            acme("directory = \"https://ca.test/dir\", names = [\"a.test\"], email = \"nobody\""),
            "is not an e-mail address",
        ),
        (
            acme("directory = \"https://ca.test/dir\", names = [\"a.test\"], renew_before = \"3w\""),
            "invalid duration unit",
        ),
        (
            format!(
                "tls = {{ cert = \"{}\", key = \"{}\", acme = {{ directory = \"https://ca.test/dir\", names = [\"a.test\"] }} }}",
                setup.server.cert.display(),
                setup.server.key.display()
            ),
            "acme takes the place of cert and key",
        ),
        ("tls = { client_auth = \"optional\" }".into(), "give cert and key, or acme"),
        (
            format!("tls = {{ cert = \"{}\" }}", setup.server.cert.display()),
            "cert and key go together",
        ),
    ] {
        common::assert_config_rejected(&listen(&tls), words);
    }
    common::assert_config_rejected(
        &listen(&format!("detect = true, sni_default = \"echo\", {table}")),
        "`sni_default` and `tls` do not mix",
    );
    common::assert_config_rejected(
        "[service.a]\nproxy = \"127.0.0.1:9\"\nsni_terminate = [\"*.example.com\"]\n\
         [service.b]\nproxy = \"127.0.0.1:9\"\nsni = [\"*.example.com\"]\n",
        "is passed through by one of services",
    );
    common::assert_config_rejected(
        "[service.a]\nproxy = \"127.0.0.1:9\"\nsni_terminate = [\"app.example.com\"]\n\
         [service.b]\nproxy = \"127.0.0.1:9\"\nsni_terminate = [\"APP.example.com\"]\n",
        "sni_terminate app.example.com is already claimed by service a",
    );
    common::assert_config_rejected(
        "[service.a]\nproxy = \"127.0.0.1:9\"\nsni = [\"x.test\"]\nsni_terminate = [\"x.test\"]\n",
        "x.test is in both sni (passed through) and sni_terminate",
    );
    common::assert_config_rejected(
        &listen("tls = { cert = \"/nonexistent.pem\", key = \"/nonexistent.key\" }"),
        "tls cert /nonexistent.pem: No such file",
    );
    common::assert_config_rejected(
        &listen(&setup.tls_table(", client_auth = \"required\"")),
        "client_auth needs client_ca",
    );
    let key_as_cert = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}",
        setup.server.key.display(),
        setup.server.key.display()
    );
    common::assert_config_rejected(&listen(&key_as_cert), "no PEM certificate in it");
    common::assert_config_rejected(
        &listen(&format!(
            "tls = {{ cert = \"{}\", key = \"{}\", typo = 1 }}",
            setup.server.cert.display(),
            setup.server.key.display()
        )),
        "unknown key `typo`",
    );
    // An extra certificate with another's key, or a key left out.
    let other = setup.ca.server("other", 2);
    let mismatched = format!(
        ", certs = [{{ cert = \"{}\", key = \"{}\" }}]",
        other.cert.display(),
        setup.server.key.display()
    );
    common::assert_config_rejected(
        &listen(&setup.tls_table(&mismatched)),
        &format!("tls cert {}", other.cert.display()),
    );
    let keyless = format!(", certs = [{{ cert = \"{}\" }}]", other.cert.display());
    common::assert_config_rejected(&listen(&setup.tls_table(&keyless)), "missing field `key`");
}

#[test]
fn metrics_hosts_are_names_for_a_metrics_listener() {
    common::assert_config_rejected(
        "metrics_hosts = [\"metrics.example\"]\n",
        "metrics_hosts needs metrics_listen",
    );
    common::assert_config_rejected(
        "metrics_listen = \"127.0.0.1:9\"\nmetrics_hosts = [\"metrics.example:9900\"]\n",
        "is not a host name",
    );
}

/// `listen` with one detecting listener and these `match` rules.
fn with_rules(rules: &[String]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|r| format!("{{ regex = '{r}', service = \"echo\" }}"))
        .collect();
    format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, match = [{}] }}]\n",
        rules.join(", ")
    )
}

#[test]
fn a_pattern_too_large_to_compile_is_refused_quickly_and_quoted_short() {
    // Its NFA took 2.2 GB and then an abort.
    common::assert_config_rejected(
        &with_rules(&["(?:(?:a{1000}){1000}){100}".to_owned()]),
        "too complex",
    );
    // Forty rules each under the one-pattern limit, over the listener's.
    let many = vec!["[01]*1[01]{11}".to_owned(); 40];
    common::assert_config_rejected(&with_rules(&many), "would take over 16 MiB together");
    // The error line quotes 200 bytes of a long pattern, not all of it.
    let long = format!("({}", "x".repeat(5000));
    let (code, _, stderr) = check(&with_rules(&[long]), &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!("\"({}\"... (5001 bytes)", "x".repeat(199))),
        "{stderr}"
    );
    assert!(stderr.len() < 1500, "{} bytes: {stderr}", stderr.len());
}

#[test]
fn a_reload_with_such_a_pattern_leaves_the_daemon_as_it_was() {
    let mut daemon = Daemon::with_config("");
    std::fs::write(
        daemon.config_path(),
        with_rules(&["(?:(?:a{1000}){1000}){100}".to_owned()]),
    )
    .unwrap();
    daemon.signal("HUP");
    let line = daemon
        .wait_for_log(|l| l.contains("reload failed"))
        .expect("the reload is refused");
    assert!(line.contains("too complex"), "{line}");
    assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+"));
}

#[test]
fn udp_configuration_errors_are_clear() {
    let service = "[service.wg]\nproxy_udp = \"127.0.0.1:51820\"\n";
    for (config, words) in [
        (
            format!("listen = [{{ address = \"127.0.0.1:0\", wireguard = \"wg\" }}]\n{service}"),
            "`wireguard` needs `udp = true`",
        ),
        (
            format!("listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"echo\" }}]\n{service}"),
            "udp_default = \"echo\" routes datagrams to a service without `proxy_udp`",
        ),
        (
            format!("listen = [{{ address = \"127.0.0.1:0\", udp = true, dns = \"nowhere\" }}]\n{service}"),
            "dns = \"nowhere\" is not a service",
        ),
        (
            "[service.wg]\nproxy_udp = \"unix:/run/wg.sock\"\n".to_owned(),
            "proxy_udp: unix:/run/wg.sock is a Unix socket; UDP backends are IP:PORT, host:port or srv:NAME",
        ),
        (
            format!("listen = [{{ address = \"127.0.0.1:0\", udp = true, tcp = false, detect = true }}]\n{service}"),
            "`detect` is for the TCP socket, which `tcp = false` leaves out",
        ),
        (
            format!("listen = [{{ address = \"unix:/tmp/x.sock\", udp = true }}]\n{service}"),
            "`udp = true` needs an IP:PORT address",
        ),
        (format!("max_udp_flows = 0\n{service}"), "max_udp_flows must be at least 1"),
        (format!("{service}udp_responses = 0\n"), "udp_responses must be at least 1"),
        (
            format!("{service}udp_responses = 4294967296\n"),
            "udp_responses 4294967296: at most 4294967295",
        ),
        (
            format!("{service}udp_idle_timeout = \"0s\"\n"),
            "udp_idle_timeout must be greater than zero",
        ),
        (
            "[service.dns]\nproxy = \"127.0.0.1:53\"\nudp_responses = 1\n".to_owned(),
            "service dns: `udp_responses` only applies to `proxy_udp` services",
        ),
        (
            "[service.wg]\nproxy_udp = [{ address = \"127.0.0.1:1\", weight = 0 }]\n".to_owned(),
            "proxy_udp: weight must be a whole number from 1 to 1000",
        ),
        (
            "[service.wg]\nproxy_udp = [{ addr = \"127.0.0.1:1\" }]\n".to_owned(),
            "proxy_udp: unknown key `addr` (address, weight, quic_server_id)",
        ),
        (
            "[service.wg]\nproxy_udp = [{ address = \"127.0.0.1:1\", max_connections = 5 }]\n".to_owned(),
            "proxy_udp: unknown key `max_connections` (address, weight, quic_server_id)",
        ),
        (
            "[service.wg]\nproxy_udp = [7]\n".to_owned(),
            "`proxy_udp` must be \"host:port\", \"srv:NAME\" or a list of those",
        ),
        (
            "[service.wg]\nproxy_udp = \"srv:_wg._udp.example\"\nudp_health_check = { interval = \"1s\" }\n".to_owned(),
            "udp_health_check: set `send`, the datagram a backend answers (UDP has no connect to check)",
        ),
        (
            "[service.wg]\nproxy_udp = \"127.0.0.1:1\"\nhealth_check = { send = \"x\" }\n".to_owned(),
            "`health_check` only applies to `proxy` services (proxy_udp's backends are checked by `udp_health_check`)",
        ),
        (
            "[service.h3]\nproxy_udp = [{ address = \"127.0.0.1:1\", quic_server_id = \"xyz\" }]\n".to_owned(),
            "quic_server_id \"xyz\": give 1 to 15 bytes in hex, such as \"0a\"",
        ),
        (
            "[service.h3]\nproxy_udp = [{ address = \"h3.example:443\", quic_server_id = \"0a\" }]\n".to_owned(),
            "quic_server_id needs a fixed address (IP:PORT), not \"h3.example:443\"",
        ),
        (
            "[service.h3]\nproxy_udp = [{ address = \"127.0.0.1:1\", quic_server_id = \"0a\" }, \
             { address = \"127.0.0.1:2\", quic_server_id = \"0a0b\" }]\n".to_owned(),
            "quic_server_id 0a0b: 127.0.0.1:1 of service h3 has 0a, and a connection ID could name either",
        ),
        (
            "[service.web]\nproxy = \"127.0.0.1:1\"\nudp_health_check = { send = \"x\" }\n".to_owned(),
            "service web: `udp_health_check` only applies to `proxy_udp` services",
        ),
    ] {
        common::assert_config_rejected(&config, words);
    }
}
