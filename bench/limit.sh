#!/usr/bin/env bash
# Short connections against the machine's own limit (issue "Performance II"):
# tcpmuxd's `daytime`, with the default info log line per connection and at
# warn, against bench/c/limit.c, a minimal single-threaded C epoll server doing
# the same exchange and nothing else, each row with the server's CPU per
# connection. Rounds alternate; one event loop each.
# With liburing-dev installed, also bench/c/uring.c: the C server's exchange
# on io_uring (the measure of what io_uring could give this path here).
# With strace installed, also the system calls per connection of each.
# BEFORE=<older tcpmuxd binary> adds its rows (log at warn and at info), in
# the same run.
#   bench/limit.sh [SECONDS] [CLIENTS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-27980}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
cc -O2 -o "$WORK/limit" bench/c/limit.c
C=$BASE INFO=$((BASE + 1)) WARN=$((BASE + 2)) URING=$((BASE + 5))
"$WORK/limit" $C & PIDS+=($!)
C_PID=$!
URING_PID=
if cc -O2 -o "$WORK/uring" bench/c/uring.c -luring 2>/dev/null; then
  "$WORK/uring" $URING & PIDS+=($!); URING_PID=$!
  wait_port $URING
else
  echo "# no io_uring row: bench/c/uring.c needs liburing-dev" >&2
fi
target/release/tcpmuxd --listen 127.0.0.1:$INFO 2>/dev/null & PIDS+=($!); INFO_PID=$!
RUST_LOG=warn target/release/tcpmuxd --listen 127.0.0.1:$WARN 2>/dev/null & PIDS+=($!); WARN_PID=$!
OLD=$((BASE + 3)) OLD_INFO=$((BASE + 4))
if [ -n "${BEFORE:-}" ]; then
  RUST_LOG=warn "$BEFORE" --listen 127.0.0.1:$OLD 2>/dev/null & PIDS+=($!); OLD_PID=$!
  "$BEFORE" --listen 127.0.0.1:$OLD_INFO 2>/dev/null & PIDS+=($!); OLD_INFO_PID=$!
  wait_port $OLD; wait_port $OLD_INFO
fi
for p in $C $INFO $WARN; do wait_port $p; done
echo "# $(nproc) cores, $(uname -r), $SECS s x $CLIENTS clients per row"
short() { short_with_cpu "$1" "$2" daytime "$3"; } # PORT PID LABEL
for round in $(seq "$ROUNDS"); do
  short $C $C_PID "round $round, C epoll limit"
  if [ -n "$URING_PID" ]; then short $URING $URING_PID "round $round, C io_uring"; fi
  short $WARN $WARN_PID "round $round, tcpmuxd, log at warn"
  if [ -n "${BEFORE:-}" ]; then short $OLD $OLD_PID "round $round, before, log at warn"; fi
  short $INFO $INFO_PID "round $round, tcpmuxd, log at info"
  if [ -n "${BEFORE:-}" ]; then short $OLD_INFO $OLD_INFO_PID "round $round, before, log at info"; fi
done
if command -v strace >/dev/null; then
  echo "## system calls per connection (strace -c -f on the server for 2 s; connections counted by their one shutdown, or setsockopt on io_uring)"
  targets=("$C:C epoll limit:$C_PID:shutdown" "$WARN:tcpmuxd (warn):$WARN_PID:shutdown")
  if [ -n "$URING_PID" ]; then targets+=("$URING:C io_uring:$URING_PID:setsockopt"); fi
  if [ -n "${BEFORE:-}" ]; then targets+=("$OLD:before (warn):$OLD_PID:shutdown"); fi
  for target in "${targets[@]}"; do
    IFS=: read -r port label pid once <<<"$target"
    strace -c -f -p "$pid" -o "$WORK/strace.$port" 2>/dev/null & S=$!
    sleep 0.5
    $BENCH short --connect "127.0.0.1:$port" --service daytime --connections 2 --duration 2 --label x >/dev/null
    kill -INT $S; wait $S 2>/dev/null || true
    total=$(awk '/^100.00/ { print $4 }' "$WORK/strace.$port")
    n=$(awk -v once="$once" '$NF == once { print $4 }' "$WORK/strace.$port")
    echo "$label: $total calls for $n connections: $(awk -v t="$total" -v n="$n" 'BEGIN { printf "%.1f", t / n }') per connection"
    awk -v n="$n" '/^ +[0-9]/ && $NF != "total" { printf "  %-14s %.2f\n", $NF, $4 / n }' "$WORK/strace.$port" | sort -k2 -n -r
  done
fi
