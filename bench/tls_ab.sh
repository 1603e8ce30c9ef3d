#!/usr/bin/env bash
# New TLS connections through several tcpmuxd builds, rounds alternating: a
# `tls` listener answering with the built-in daytime (no backend), 8 clients
# (`tcpmux-bench tls-short`, full handshakes), each row with the daemon's CPU
# per connection (all its threads). For an A/B of two builds in one run.
#   bench/tls_ab.sh DAEMON...            e.g. bench/tls_ab.sh /tmp/old target/release/tcpmuxd
#   ROUNDS=3 SECS=4 CLIENTS=8 (defaults)
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: bench/tls_ab.sh DAEMON..." >&2; exit 2; }
cargo build --release --quiet -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
localhost_cert
PORT=${PORT:-27990}
printf 'listen = [{ address = "127.0.0.1:%s", tls = { cert = "%s", key = "%s" } }]\n' \
  "$PORT" "$WORK/cert.pem" "$WORK/key.pem" > "$WORK/tls.toml"
echo "# $(nproc) cores, $(uname -r); ${CLIENTS:-8} clients, ${SECS:-4} s per row"
for round in $(seq "${ROUNDS:-3}"); do
  for daemon in "$@"; do
    RUST_LOG=warn "$daemon" --config "$WORK/tls.toml" 2>/dev/null & pid=$!; PIDS+=("$pid")
    wait_port "$PORT"
    echo "round $round, $daemon: $(with_cpu "$pid" "$BENCH" tls-short --connect "127.0.0.1:$PORT" \
      --ca "$WORK/ca.pem" --connections "${CLIENTS:-8}" --duration "${SECS:-4}" --service daytime --label new)"
    stop_pid "$pid"
  done
done
