#!/usr/bin/env bash
# Proxied short connections against the machine's limit (issue "Performance
# III"): connect, name, `+`, 32 bytes from the backend, close; through
# tcpmuxd's `proxy` service (default info log and at warn) and through
# bench/c/relay.c, a minimal single-threaded C epoll relay that does the same
# exchange (read the line, connect, `+`, splice both ways) and nothing else;
# and through `tcpmux-bench relay`, the same exchange as the least tokio code
# (a task per session, copy_bidirectional): the floor of tcpmuxd's design.
# The backend is tcpmux-bench source (32 bytes per connection, then EOF).
# Rounds alternate; one event loop each; each row with the relay's CPU per
# connection (its own, not the backend's). Then the bulk relay against the
# same C relay: one connection carrying BULK bytes (default 1 GB), median
# of 3, per round.
#   bench/proxy_short.sh [SECONDS] [CLIENTS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-27960}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
cc -O2 -o "$WORK/relay" bench/c/relay.c
BULK=${BULK:-1000000000}
SRC=$BASE C=$((BASE + 1)) INFO=$((BASE + 2)) WARN=$((BASE + 3)) BULK_SRC=$((BASE + 4)) C_BULK=$((BASE + 5))
TOKIO=$((BASE + 6))
$BENCH source --listen 127.0.0.1:$SRC --bytes 32 >/dev/null & PIDS+=($!)
$BENCH source --listen 127.0.0.1:$BULK_SRC --bytes "$BULK" >/dev/null & PIDS+=($!)
wait_port $SRC; wait_port $BULK_SRC
"$WORK/relay" $C $SRC & PIDS+=($!); C_PID=$!
"$WORK/relay" $C_BULK $BULK_SRC & PIDS+=($!)
$BENCH relay --listen 127.0.0.1:$TOKIO --to 127.0.0.1:$SRC & PIDS+=($!); TOKIO_PID=$!
for p in $INFO $WARN; do
  printf 'listen = ["127.0.0.1:%s"]\n[service.short]\nproxy = "127.0.0.1:%s"\n[service.bulk]\nproxy = "127.0.0.1:%s"\n' $p $SRC $BULK_SRC > "$WORK/$p.toml"
done
target/release/tcpmuxd --config "$WORK/$INFO.toml" 2>/dev/null & PIDS+=($!); INFO_PID=$!
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/$WARN.toml" 2>/dev/null & PIDS+=($!); WARN_PID=$!
for p in $C $C_BULK $INFO $WARN $TOKIO; do wait_port $p; done
echo "# $(nproc) cores, $(uname -r), $SECS s x $CLIENTS clients per row, 32 bytes from the backend per connection"
row() { short_with_cpu "$1" "$2" short "$3"; } # PORT PID LABEL
for round in $(seq "$ROUNDS"); do
  row $C $C_PID "round $round, C epoll relay"
  row $TOKIO $TOKIO_PID "round $round, minimal tokio relay"
  row $WARN $WARN_PID "round $round, tcpmuxd proxy, log at warn"
  row $INFO $INFO_PID "round $round, tcpmuxd proxy, log at info"
done
echo "## bulk: one connection, $BULK bytes from the backend (median of 3)"
for round in $(seq "$ROUNDS"); do
  $BENCH bulk --connect 127.0.0.1:$C_BULK --service bulk --expect "$BULK" --repeat 3 --label "round $round, C epoll relay"
  $BENCH bulk --connect 127.0.0.1:$WARN --service bulk --expect "$BULK" --repeat 3 --label "round $round, tcpmuxd proxy (splice)"
done
