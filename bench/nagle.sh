#!/usr/bin/env bash
# The seeds' Nagle experiment in one run. First on the negotiation of fresh
# connections (name and CRLF as one write or two), then on one established
# connection: request/response rounds to a line server (`tcpmux-bench lines`),
# directly and through tcpmuxd, socat, HAProxy and nginx stream, each with the
# client splitting requests in two writes (Nagle on / TCP_NODELAY) or not.
# A relay that forwards the two pieces as two writes without TCP_NODELAY brings
# the 40 ms stall back even for a client that disabled Nagle.
#
#   bench/nagle.sh [ROUNDS]
#
# Needs socat, haproxy and nginx with its stream module (missing ones are
# skipped). Only loopback is used; every process started here is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-50}
BASE=${BASE_PORT:-27500}
LINES=$BASE MUX=$((BASE + 1)) SOCAT=$((BASE + 2)) HAP=$((BASE + 3)) NGX=$((BASE + 4))
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
BIN=target/release
. bench/lib.sh

$BIN/tcpmux-bench lines --listen 127.0.0.1:$LINES >/dev/null & PIDS+=($!)
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
[service.lines]
proxy = "127.0.0.1:$LINES"
CFG
RUST_LOG=warn $BIN/tcpmuxd --config "$WORK/tcpmuxd.toml" & PIDS+=($!)
TARGETS=("direct $LINES" "tcpmuxd $MUX lines")
if command -v socat >/dev/null; then
  socat TCP-LISTEN:$SOCAT,fork,reuseaddr,bind=127.0.0.1 TCP:127.0.0.1:$LINES & PIDS+=($!)
  TARGETS+=("socat $SOCAT")
fi
if command -v haproxy >/dev/null; then
  start_haproxy < <(haproxy_pair lines $HAP $LINES)
  TARGETS+=("haproxy $HAP")
fi
if have_nginx_stream; then
  start_nginx_stream $NGX $LINES
  TARGETS+=("nginx-stream $NGX")
fi
for t in "${TARGETS[@]}"; do set -- $t; wait_port "$2"; done

echo "# $(nproc) cores, $(uname -r)"
echo "## Fresh connections: the negotiation as one write or two (tcpmuxd daytime)"
$BIN/tcpmux-bench nagle --connect 127.0.0.1:$MUX --iterations "$ROUNDS"
echo
echo "## One established connection, $ROUNDS rounds after 20 to warm up"
echo
echo "| path | two writes, Nagle on | two writes, TCP_NODELAY | one write |"
echo "|---|---|---|---|"
for t in "${TARGETS[@]}"; do
  set -- $t
  out=$($BIN/tcpmux-bench nagle-established --connect 127.0.0.1:$2 ${3:+--service "$3"} --rounds "$ROUNDS")
  cells=$(printf '%s\n' "$out" | sed -E 's/^[^:]+: round trip median ([0-9.]+) ms, p90 ([0-9.]+) ms, max ([0-9.]+) ms; ([0-9]+) of ([0-9]+) rounds.*/median \1 ms, p90 \2 ms, \4\/\5 stalled/' | paste -sd'|' | sed 's/|/ | /g')
  echo "| $1 | $cells |"
done
