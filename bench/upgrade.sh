#!/usr/bin/env bash
# Binary upgrades and reloads under load: short daytime connections from
# CLIENTS clients for SECONDS, while the daemon is upgraded (tcpmuxd --upgrade)
# UPGRADES times and reloaded as often; prints connections/s held, failures,
# and the slowest connection (which bounds the longest accept gap).
#   bench/upgrade.sh [SECONDS] [CLIENTS] [UPGRADES]
# Loopback only; every process started here is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-10}
CLIENTS=${2:-8}
UPGRADES=${3:-5}
PORT=${BASE_PORT:-27900}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
cat > "$WORK/t.toml" <<CFG
listen = ["127.0.0.1:$PORT"]
upgrade_socket = "$WORK/upgrade.sock"
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/t.toml" & CURRENT=$!; PIDS+=($CURRENT)
wait_port $PORT
echo "# $(nproc) cores, $(uname -r), $CLIENTS clients, $SECONDS_EACH s, $UPGRADES upgrades and reloads"

target/release/tcpmux-bench short --connect 127.0.0.1:$PORT --service daytime \
  --connections "$CLIENTS" --duration "$SECONDS_EACH" --label "during upgrades" > "$WORK/load.out" &
LOAD=$!
interval=$(awk -v s="$SECONDS_EACH" -v n="$UPGRADES" 'BEGIN { printf "%.2f", s / (n + 1) }')
for i in $(seq "$UPGRADES"); do
  sleep "$interval"
  kill -HUP $CURRENT
  RUST_LOG=warn target/release/tcpmuxd --config "$WORK/t.toml" --upgrade & NEXT=$!; PIDS+=($NEXT)
  # The old daemon exits once the new one serves and its sessions are done.
  for _ in $(seq 200); do kill -0 $CURRENT 2>/dev/null || break; sleep 0.05; done
  if kill -0 $CURRENT 2>/dev/null; then echo "upgrade $i: the old daemon did not exit" >&2; exit 1; fi
  CURRENT=$NEXT
done
wait $LOAD || true
cat "$WORK/load.out"
