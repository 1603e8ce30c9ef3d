#!/usr/bin/env bash
# Installs, on Debian, the real programs the integration tests run against
# when given --include-ignored (as root): both the README's test command and
# .ci/run use it. Only what is missing is installed.
#   sudo contrib/test-peers.sh
# What each is for: setpriv and prlimit (util-linux) switch users and
# limits; python3 runs the hostile local user's floods and the demo's web
# servers; ssh, sshd, curl and openssl for the detection tests; dnsmasq
# serves the DNS discovery tests' records, and dig asks it through a UDP
# listener; chromium loads the dashboard;
# openvpn, psql with a PostgreSQL server, and curl through microsocks for the
# probes; ip, nft and socat build and use the network namespaces of the
# transparent test; pebble is the ACME server certificates are ordered from;
# haproxy stands in front; wireguard-go and wg are two real WireGuard peers
# (userspace, no kernel module) whose tunnel runs through a UDP listener;
# prometheus (and its promtool) loads the alert rules of contrib/prometheus/;
# etcd (and etcdctl) is the three-member cluster a fleet shares its state in
# (Debian also starts an etcd.service on 127.0.0.1:2379, which the tests do
# not use: `systemctl disable --now etcd` if you do not want it).
set -euo pipefail
PEERS="etcd-server etcd-client wireguard-go wireguard-tools haproxy util-linux python3 python3-yaml openssh-client openssh-server curl openssl dnsmasq-base bind9-dnsutils chromium openvpn postgresql microsocks iproute2 nftables socat pebble prometheus"
missing=""
for tool in etcd etcdctl wireguard-go wg haproxy setpriv prlimit /usr/bin/python3 ssh /usr/sbin/sshd curl openssl dnsmasq dig chromium openvpn psql microsocks ip nft socat pebble prometheus promtool; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
python3 -c "import yaml" 2>/dev/null || missing="$missing python3-yaml"
if [ -n "$missing" ]; then
  echo "test-peers: installing (missing:$missing)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq $PEERS >/dev/null
fi
# aioquic (PyPI): the real QUIC client and servers of tests/udp.rs.
if ! python3 -c "import aioquic" 2>/dev/null; then
  echo "test-peers: installing aioquic (pip)"
  python3 -m pip install --quiet aioquic 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages aioquic
fi
