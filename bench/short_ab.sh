#!/usr/bin/env bash
# Short connections through several tcpmuxd builds, rounds alternating, beside
# the C limit for the same exchange, each row with the server's CPU per
# connection. For an A/B of builds in one run (bench/limit.sh's BEFORE= takes
# only one older build).
#   bench/short_ab.sh daytime DAEMON...   the built-in daytime, against bench/c/limit.c
#   bench/short_ab.sh proxy DAEMON...     a proxy service to a 32-byte backend
#                                         (tcpmux-bench source), against bench/c/relay.c
#   ROUNDS=4 SECS=4 CLIENTS=8 LOG=warn (defaults)
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-}
[ $# -gt 1 ] && { [ "$MODE" = daytime ] || [ "$MODE" = proxy ]; } \
  || { echo "usage: bench/short_ab.sh daytime|proxy DAEMON..." >&2; exit 2; }
shift
cargo build --release --quiet -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
CLIENTS=${CLIENTS:-8} SECS=${SECS:-4}
BASE=${BASE_PORT:-27940}
LIMIT=$BASE BACKEND=$((BASE + 1))
if [ "$MODE" = daytime ]; then
  SERVICE=daytime
  cc -O2 -o "$WORK/limit" bench/c/limit.c
  "$WORK/limit" $LIMIT & PIDS+=($!); LIMIT_PID=$!
  LIMIT_LABEL="C epoll limit"
else
  SERVICE=short
  $BENCH source --listen 127.0.0.1:$BACKEND --bytes 32 >/dev/null & PIDS+=($!)
  wait_port $BACKEND
  cc -O2 -o "$WORK/relay" bench/c/relay.c
  "$WORK/relay" $LIMIT $BACKEND & PIDS+=($!); LIMIT_PID=$!
  LIMIT_LABEL="C epoll relay"
fi
DAEMONS=("$@") DAEMON_PIDS=() DAEMON_PORTS=()
port=$((BASE + 2))
for daemon in "${DAEMONS[@]}"; do
  # The daytime mode uses the built-in; the proxy mode the service `short`.
  printf 'listen = ["127.0.0.1:%s"]\n[service.short]\nproxy = "127.0.0.1:%s"\n' $port $BACKEND > "$WORK/$port.toml"
  RUST_LOG=${LOG:-warn} "$daemon" --config "$WORK/$port.toml" 2>/dev/null & PIDS+=($!)
  DAEMON_PIDS+=($!) DAEMON_PORTS+=($port)
  port=$((port + 1))
done
for p in $LIMIT "${DAEMON_PORTS[@]}"; do wait_port "$p"; done
echo "# $(nproc) cores, $(uname -r); $MODE, $CLIENTS clients, $SECS s per row, log at ${LOG:-warn}"
for round in $(seq "${ROUNDS:-4}"); do
  short_with_cpu $LIMIT $LIMIT_PID $SERVICE "round $round, $LIMIT_LABEL"
  for i in "${!DAEMONS[@]}"; do
    short_with_cpu "${DAEMON_PORTS[$i]}" "${DAEMON_PIDS[$i]}" $SERVICE "round $round, ${DAEMONS[$i]}"
  done
done
