#!/usr/bin/env bash
# The first packets of a connection, A/B in one run (issue "Performance II"):
#  1. TCP Fast Open: sometext (1,000,007 bytes) per new connection, and daytime,
#     with the client's TCP_FASTOPEN_CONNECT and a `fast_open = true` listener,
#     against a plain one;
#  2. TCP_DEFER_ACCEPT: short daytime connections and the daemon's CPU per
#     connection, `defer_accept = true` against without.
# Rounds alternate A and B. Needs root to set net.ipv4.tcp_fastopen = 3 (put
# back on exit).
#   bench/first_packets.sh [SECONDS] [CLIENTS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-27900}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
fast_open_on
echo "# $(nproc) cores, $(uname -r), $SECS s x $CLIENTS clients per row, net.ipv4.tcp_fastopen = 3"

PLAIN=$BASE TFO=$((BASE + 1)) DEFER=$((BASE + 2))
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$PLAIN", { address = "127.0.0.1:$TFO", fast_open = true }, { address = "127.0.0.1:$DEFER", defer_accept = true }]
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/tcpmuxd.toml" & D=$!; PIDS+=($D)
for p in $PLAIN $TFO $DEFER; do wait_port $p; done
row() { # LABEL PORT SERVICE [--fast-open]
  local before after line n
  before=$(cpu_ticks $D)
  line=$($BENCH short --connect "127.0.0.1:$2" --service "$3" --connections "$CLIENTS" --duration "$SECS" --label "$1" ${4:-})
  after=$(cpu_ticks $D)
  n=$(sed -E 's/.*\(([0-9]+) in .*/\1/' <<<"$line")
  echo "$line, daemon CPU $(( (after - before) * 1000000 / $(getconf CLK_TCK) / (n > 0 ? n : 1) )) us/connection"
}
echo "## 1. TCP Fast Open"
for round in $(seq "$ROUNDS"); do
  row "round $round, sometext, plain" $PLAIN sometext
  row "round $round, sometext, fast open" $TFO sometext --fast-open
  row "round $round, daytime, plain" $PLAIN daytime
  row "round $round, daytime, fast open" $TFO daytime --fast-open
done
echo "## 2. TCP_DEFER_ACCEPT"
for round in $(seq "$ROUNDS"); do
  row "round $round, daytime, plain" $PLAIN daytime
  row "round $round, daytime, defer_accept" $DEFER daytime
done
