use super::*;

use crate::model::{Builtin, ServiceKind};
use tcpmux_proto::ServiceName;

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, "test.toml", &Keys::default()).map_err(|e| e.to_string())
}

#[test]
fn empty_file_is_the_default() {
    let config = parse("").unwrap();
    assert_eq!(config.listen, Config::default().listen);
    assert_eq!(config.negotiation_timeout, DEFAULT_NEGOTIATION_TIMEOUT);
    assert_eq!(config.registry.len(), Builtin::ALL.len());
}

#[test]
fn full_file() {
    let config = parse(
        r#"
listen = ["127.0.0.1:41397", "[::1]:41397", "unix:/tmp/tcpmux.sock"]
negotiation_timeout = "1500ms"
close_drain_timeout = 0.25
builtin_services = false

[service.Clock]
builtin = "isotime"
message = "the time follows"

[service.echo]
"#,
    )
    .unwrap();
    assert_eq!(config.listen.len(), 3);
    assert_eq!(config.negotiation_timeout, Duration::from_millis(1500));
    assert_eq!(config.close_drain_timeout, Duration::from_millis(250));
    assert_eq!(
        config.registry.names().collect::<Vec<_>>(),
        ["clock", "echo"]
    );
    let clock = config
        .registry
        .lookup(&ServiceName::parse("CLOCK").unwrap())
        .unwrap();
    assert_eq!(clock.kind, ServiceKind::Builtin(Builtin::Isotime));
    assert_eq!(clock.message, "the time follows");
}

#[test]
fn a_table_replaces_the_builtin_of_its_name_and_names_stay_sorted() {
    let config =
        parse("[service.zz]\nbuiltin = \"echo\"\n[service.daytime]\nbuiltin = \"isotime\"\n[service.aa]\nbuiltin = \"echo\"\n").unwrap();
    let names: Vec<_> = config.registry.names().collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "sorted, each name once");
    assert!(names.contains(&"aa") && names.contains(&"zz") && names.contains(&"echo"));
    let daytime = config
        .registry
        .lookup(&ServiceName::parse("daytime").unwrap())
        .unwrap();
    assert_eq!(daytime.kind, ServiceKind::Builtin(Builtin::Isotime));
}

#[test]
fn disabling_a_builtin_removes_it() {
    let config = parse("[service.chargen]\nenabled = false\n").unwrap();
    assert!(!config.registry.names().any(|n| n == "chargen"));
    assert!(config.registry.names().any(|n| n == "echo"));
}

#[test]
fn errors_name_the_line() {
    let cases = [
        (
            "listen = [\"nowhere\"]\n",
            "test.toml:1:",
            "invalid listen address",
        ),
        (
            "\n\n[service.x]\nbuiltin = \"ech\"\n",
            "test.toml:4:",
            "unknown builtin \"ech\"",
        ),
        (
            "[service.help]\nbuiltin = \"echo\"\n",
            "test.toml:1:",
            "reserved",
        ),
        (
            "[service.\"a b\"]\nbuiltin = \"echo\"\n",
            "test.toml:1:",
            "0x20",
        ),
        ("[service.mine]\n", "test.toml:1:", "says nothing to do"),
        (
            "negotiation_timeout = \"10 parsecs\"\n",
            "test.toml:1:",
            "unit",
        ),
        (
            "negotiation_timeout = 0\n",
            "test.toml:1:",
            "greater than zero",
        ),
        ("\nlisten = 5\n", "test.toml:2:", "found the number 5"),
        (
            "colour = \"blue\"\n",
            "test.toml:1:",
            "unknown key `colour`",
        ),
        (
            "[service.echo]\nbuiltn = \"echo\"\n",
            "test.toml:2:",
            "did you mean `builtin`?",
        ),
        (
            "[service.Echo]\n[service.echo]\n",
            "test.toml:2:",
            "defined twice",
        ),
        ("listen = [\n", "test.toml:", ""),
        (
            "\nservice = 5\n",
            "test.toml:2:11:",
            "service takes [service.NAME] tables, not an integer",
        ),
        (
            "service.x = \"echo\"\n",
            "test.toml:1:13:",
            "expected a table, found text \"echo\"",
        ),
        (
            "[service.x]\nmax_connections = \"9\"\n",
            "test.toml:2:19:",
            "expected a whole number, found text \"9\"",
        ),
    ];
    for (text, location, words) in cases {
        let error = parse(text).expect_err(text);
        assert!(error.starts_with(location), "{text:?} gave {error}");
        assert!(error.contains(words), "{text:?} gave {error}");
    }
}

#[test]
fn an_error_without_a_place_says_so() {
    let error = parse("[service.app]\nhandoff = { uid = [1000] }\n").unwrap_err();
    assert!(
        error.starts_with("test.toml: handoff services need `handoff_socket"),
        "{error}"
    );
    let error = parse("listen = []\n").unwrap_err();
    assert!(
        error.starts_with("test.toml:1:10: `listen` is empty"),
        "{error}"
    );
}

#[test]
fn a_name_given_twice_is_reported_at_its_second_place() {
    let error =
        parse("[service.a]\nbuiltin = \"echo\"\n\n[service.A]\nbuiltin = \"echo\"\n").unwrap_err();
    assert!(error.starts_with("test.toml:4:"), "{error}");
    assert!(error.contains("first on line 1"), "{error}");
}

#[test]
fn a_name_given_twice_is_reported_where_it_comes_second_in_the_file() {
    // A `[service]` table written after `[service.b]` adds its keys after
    // b's; the error still points at the later place in the file.
    let error = parse("[service]\nB = { builtin = \"echo\" }\n[service.b]\nbuiltin = \"echo\"\n")
        .unwrap_err();
    assert!(error.starts_with("test.toml:3:10:"), "{error}");
    let error = parse("[service.b]\nbuiltin = \"echo\"\n[service]\nB = { builtin = \"echo\" }\n")
        .unwrap_err();
    assert!(error.starts_with("test.toml:4:1:"), "{error}");
    assert!(error.contains("first on line 1"), "{error}");
}

#[test]
fn listen_addresses_that_cannot_all_be_bound_are_refused() {
    for (text, words) in [
        (
            "listen = [\"127.0.0.1:5000\", \"127.0.0.1:5000\"]\n",
            "clashes with 127.0.0.1:5000",
        ),
        (
            "listen = [\"0.0.0.0:5000\",\n  \"127.0.0.1:5000\"]\n",
            "on line 1",
        ),
        (
            "listen = [\"unix:/tmp/a.sock\", \"unix:/tmp/a.sock\"]\n",
            "clashes",
        ),
        (
            "listen = [\"unix:/nonexistent/dir/x.sock\"]\n",
            "directory /nonexistent/dir does not exist",
        ),
    ] {
        let error = parse(text).unwrap_err();
        assert!(error.contains(words), "{text:?} gave {error}");
    }
    // Different families, or ports the kernel picks, do not clash.
    parse("listen = [\"0.0.0.0:5000\", \"[::]:5000\", \"127.0.0.1:0\", \"127.0.0.1:0\"]\n")
        .unwrap();
}

#[test]
fn a_proxy_to_the_daemons_own_address_is_refused() {
    for (listen, backend) in [
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("0.0.0.0:5000", "127.0.0.1:5000"),
        ("0.0.0.0:5000", "localhost:5000"),
        ("[::]:5000", "[::1]:5000"),
        ("unix:/tmp/mux.sock", "unix:/tmp/mux.sock"),
    ] {
        let text = format!("listen = [\"{listen}\"]\n[service.loop]\nproxy = \"{backend}\"\n");
        let error = parse(&text).unwrap_err();
        assert!(
            error.contains("this daemon's own listen address"),
            "{text}: {error}"
        );
        assert!(error.starts_with("test.toml:2:"), "{error}");
    }
    // Another port, or an address that is not ours, is fine.
    parse("listen = [\"127.0.0.1:5000\"]\n[service.ok]\nproxy = [\"127.0.0.1:5001\", \"192.0.2.1:5000\"]\n")
        .unwrap();
}

#[test]
fn detecting_listeners_and_host_names() {
    let config = parse(
        "listen = [{ address = \"127.0.0.1:443\", detect = true, ssh = \"echo\", sni_default = \"daytime\" }]\n\
         [service.db]\nproxy = \"127.0.0.1:5432\"\nsni = [\"DB.example.com\", \"*.example.org\"]\n\
         [service.web]\nproxy = \"127.0.0.1:8080\"\nhttp_host = [\"app.example.com\"]\n",
    )
    .unwrap();
    let detect = config.listen[0].options.detect.as_ref().unwrap();
    assert_eq!(detect.ssh.as_ref().map(|n| n.as_str()), Some("echo"));
    assert_eq!(detect.timeout, crate::model::DEFAULT_DETECT_TIMEOUT);
    let registry = &config.registry;
    assert_eq!(
        registry.by_sni("db.example.com").map(|s| s.name.as_str()),
        Some("db")
    );
    assert_eq!(
        registry.by_sni("a.example.org").map(|s| s.name.as_str()),
        Some("db")
    );
    assert!(registry.by_sni("a.b.example.org").is_none());
    assert!(registry.by_sni("example.org").is_none());
    assert_eq!(
        registry
            .by_http_host("app.example.com")
            .map(|s| s.name.as_str()),
        Some("web")
    );
    for (text, words) in [
        ("listen = [{ address = \"127.0.0.1:1\", detct = true }]\n", "unknown key `detct`; did you mean `detect`?"),
        ("listen = [{ address = \"127.0.0.1:1\", ssh = \"echo\" }]\n", "`ssh` needs `detect = true`"),
        ("listen = [{ address = \"127.0.0.1:1\", detect = true, http = \"nope\" }]\n", "http = \"nope\" is not a service"),
        ("[service.a]\nbuiltin = \"echo\"\nsni = [\"x.example\"]\n[service.b]\nbuiltin = \"echo\"\nsni = [\"X.example\"]\n", "sni x.example is already claimed by service a"),
        ("[service.a]\nbuiltin = \"echo\"\nhttp_host = [\"*.example\"]\n", "not wildcards"),
        ("[service.a]\nbuiltin = \"echo\"\nsni = [\"a b\"]\n", "invalid host name"),
    ] {
        let error = parse(text).unwrap_err();
        assert!(error.contains(words), "{text:?} gave {error}");
    }
}

/// Routing names are claimed once, in file order, whatever the number of
/// services (an index, not a scan of the services before): each kind of
/// second claim is refused at its place, and a name two services share for
/// different protocols is not.
#[test]
fn every_kind_of_second_claim_is_refused_and_sharing_by_alpn_is_not() {
    let echo = |name: &str, keys: &str| format!("[service.{name}]\nbuiltin = \"echo\"\n{keys}\n");
    let cases = [
        (
            echo("a", "http_host = [\"app.test\"]") + &echo("b", "http_host = [\"APP.test\"]"),
            "service b: http_host app.test is already claimed by service a",
        ),
        (
            echo("a", "sni = [\"x.test\"]") + &echo("b", "sni_terminate = [\"x.test\"]"),
            "x.test is passed through by one of services b and a",
        ),
        (
            echo("a", "sni_terminate = [\"x.test\"]") + &echo("b", "sni = [\"x.test\"]"),
            "x.test is passed through by one of services b and a",
        ),
        (
            echo("a", "sni = [\"*.x.test\"]\nalpn = [\"h2\"]")
                + &echo("b", "sni = [\"*.x.test\"]\nalpn = [\"h3\", \"h2\"]"),
            "service b: sni *.x.test with alpn h2 is already claimed by service a",
        ),
    ];
    for (text, words) in cases {
        let error = parse(&text).expect_err(&text);
        assert!(error.contains(words), "{text:?} gave {error}");
    }
    let shared = echo("a", "sni = [\"x.test\"]\nalpn = [\"h2\"]")
        + &echo("b", "sni = [\"x.test\"]\nalpn = [\"postgresql\"]")
        + &echo("c", "sni = [\"x.test\"]");
    parse(&shared).expect("one name, three protocols (and none)");
}

/// "Defined twice" names the first definition's line, counted as the tables
/// go by.
#[test]
fn a_name_defined_twice_names_the_first_line_among_many() {
    let mut text = String::new();
    for i in 0..500 {
        text.push_str(&format!("[service.s{i}]\nbuiltin = \"echo\"\n\n"));
    }
    text.push_str("[service.S250]\nbuiltin = \"echo\"\n");
    let error = parse(&text).expect_err("a duplicate");
    assert!(error.starts_with("test.toml:1501:"), "{error}");
    assert!(error.contains("first on line 751"), "{error}");
}
