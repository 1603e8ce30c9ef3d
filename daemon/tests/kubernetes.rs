//! contrib/kubernetes/, read as Kubernetes would (YAML through python3's
//! yaml, Debian's python3-yaml): the ConfigMap's configuration passes
//! `--check-config`; every port the pods name is one it listens on; every
//! probe's path answers 200 on a daemon running that configuration; the
//! Service and the PodDisruptionBudget select the Deployment's pods; the
//! grace period covers `shutdown_delay` and `shutdown_grace`. Needs python3
//! with yaml: ignored by a plain `cargo test`, run by `--include-ignored`.

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::process::Command;

use common::dns::free_port;
use common::{read_all, Daemon, PATIENCE};
use serde_json::Value;

/// Every document of a YAML file, as JSON.
fn documents(file: &str) -> Vec<Value> {
    let path = format!(
        "{}/../contrib/kubernetes/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
            &path,
        ])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn of_kind<'v>(docs: &'v [Value], kind: &str) -> &'v Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// A port of an address in the configuration (`"0.0.0.0:41397"`).
fn port_of(address: &str) -> u64 {
    address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

/// Seconds of a duration written as `"5s"`.
fn seconds(duration: &str) -> u64 {
    duration
        .trim_end_matches('s')
        .parse()
        .expect("whole seconds")
}

/// 200 for `GET path` on the metrics endpoint at `addr`.
fn answers(addr: &str, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let _ = write!(stream, "GET {path} HTTP/1.0\r\n\r\n");
    String::from_utf8_lossy(&read_all(&mut stream)).starts_with("HTTP/1.0 200")
}

#[test]
#[ignore = "needs python3 with yaml (python3-yaml)"]
fn the_manifests_name_only_what_the_daemon_serves() {
    common::require_program("python3", "--version", "python3");
    let docs = documents("tcpmuxd.yaml");
    let config = of_kind(&docs, "ConfigMap")["data"]["tcpmuxd.toml"]
        .as_str()
        .expect("the ConfigMap holds tcpmuxd.toml");
    let dir = common::scratch_dir();
    let file = dir.join("tcpmuxd.toml");
    std::fs::write(&file, config).unwrap();
    let checked = Command::new(common::sibling_binary("tcpmuxd"))
        .args(["--check-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let parsed: toml::Value = toml::from_str(config).unwrap();
    let metrics = port_of(parsed["metrics_listen"].as_str().unwrap());
    let mut listened: BTreeSet<u64> = parsed["listen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| port_of(a.as_str().unwrap()))
        .collect();
    listened.insert(metrics);

    // The probe paths, answered by a daemon with this configuration (its
    // metrics endpoint moved to a free port, its backend to loopback: no
    // lookup of the cluster's name leaves the machine).
    let here = format!("127.0.0.1:{}", free_port());
    let backend = parsed["service"]["web"]["proxy"].as_str().unwrap();
    let moved = config
        .replace(parsed["metrics_listen"].as_str().unwrap(), &here)
        .replace(backend, "127.0.0.1:9")
        .replace("listen = [\"0.0.0.0:41397\"]\n", "");
    assert!(!moved.contains("cluster.local"), "{moved}");
    let _daemon = Daemon::with_config(&moved);
    let grace = seconds(parsed["shutdown_delay"].as_str().unwrap())
        + seconds(parsed["shutdown_grace"].as_str().unwrap());

    let deployment = of_kind(&docs, "Deployment");
    let daemonset = &documents("daemonset.yaml")[0];
    for workload in [deployment, daemonset] {
        let pod = &workload["spec"]["template"];
        let container = &pod["spec"]["containers"][0];
        let ports = container["ports"].as_array().unwrap();
        for port in ports {
            let number = port["containerPort"].as_u64().unwrap();
            assert!(
                listened.contains(&number),
                "port {number} is not listened on"
            );
        }
        for probe in ["livenessProbe", "readinessProbe"] {
            let get = &container[probe]["httpGet"];
            let named = get["port"].as_str().unwrap();
            let port = ports.iter().find(|p| p["name"] == named).unwrap();
            assert_eq!(port["containerPort"].as_u64(), Some(metrics), "{probe}");
            let path = get["path"].as_str().unwrap();
            assert!(answers(&here, path), "{probe} {path} does not answer 200");
        }
        let period = pod["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap();
        assert!(
            period > grace,
            "terminationGracePeriodSeconds {period} <= {grace}"
        );
        assert_eq!(
            workload["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"],
            "the selector selects the pods"
        );
    }
    let pods = &deployment["spec"]["template"]["metadata"]["labels"];
    let service = of_kind(&docs, "Service");
    assert_eq!(&service["spec"]["selector"], pods);
    let names: Vec<&Value> = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    for port in service["spec"]["ports"].as_array().unwrap() {
        assert!(names.contains(&&port["targetPort"]), "{port}");
    }
    let budget = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], pods);
}
