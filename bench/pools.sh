#!/usr/bin/env bash
# Backend pools (issue "Backend pools for a fleet"), in one run:
#  1. the cost of balancing on short connections: a proxy to one local backend
#     against round-robin over three, alternating, ROUNDS times (and over three
#     entries of the same backend, which is the balancing code alone, without
#     three backend processes sharing the cores);
#  2. client latency with one dead backend first in the pool (a listener whose
#     accept queue is full, so SYNs go unanswered and connects time out, as to
#     a crashed host): plain failover, as before pools (set BEFORE to such a
#     tcpmuxd, e.g. one built from commit 1fba366^), against passive ejection
#     alone and with active health checks.
#   bench/pools.sh [SECONDS] [CLIENTS] [ROUNDS]
#   BEFORE=/path/to/old/tcpmuxd bench/pools.sh
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-27700}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
DAEMON=target/release/tcpmuxd
BENCH=target/release/tcpmux-bench
echo "# $(nproc) cores, $(uname -r), $SECS s x $CLIENTS clients per row"

backends=()
for i in 1 2 3; do
  $BENCH source --listen "127.0.0.1:$((BASE + 10 + i))" --bytes 32 > /dev/null & PIDS+=($!)
  wait_port $((BASE + 10 + i))
  backends+=("\"127.0.0.1:$((BASE + 10 + i))\"")
done
# The dead backend: backlog 1, filled, never accepting.
DEAD=$((BASE + 20))
python3 - "$DEAD" <<'PY' & PIDS+=($!)
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(0)
fill = []
for _ in range(4):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(("127.0.0.1", int(sys.argv[1])))
    except BlockingIOError: pass
    fill.append(c)
time.sleep(3600)
PY
sleep 0.5

# short SERVICE PORT LABEL: one tcpmux-bench short line, with the daemon's
# ($D) CPU time per connection (utime + stime from /proc, in microseconds).
short() {
  local before after line n
  before=$(cpu_ticks $D)
  line=$($BENCH short --connect "127.0.0.1:$2" --service "$1" --connections "$CLIENTS" --duration "$SECS" --label "$3")
  after=$(cpu_ticks $D)
  n=$(sed -E 's/.*\(([0-9]+) in .*/\1/' <<<"$line")
  echo "$line, daemon CPU $(( (after - before) * 1000000 / $(getconf CLK_TCK) / (n > 0 ? n : 1) )) us/connection"
}

# 1. One backend against round-robin over three.
P=$BASE
cat > "$WORK/balance.toml" <<CFG
listen = ["127.0.0.1:$P"]
[service.one]
proxy = ${backends[0]}
[service.rr]
balance = "round-robin"
proxy = [${backends[0]}, ${backends[1]}, ${backends[2]}]
[service.rr1]
balance = "round-robin"
proxy = [${backends[0]}, ${backends[0]}, ${backends[0]}]
CFG
RUST_LOG=warn $DAEMON --config "$WORK/balance.toml" 2>/dev/null & D=$!; PIDS+=($D)
wait_port $P
echo "## 1. balancing cost: short connections through a proxy"
for round in $(seq "$ROUNDS"); do
  short one $P "round $round, one backend"
  short rr $P "round $round, round-robin over 3"
  short rr1 $P "round $round, round-robin over 3 entries of the one backend"
done
kill $D

# 2. One dead backend first in the pool, connect_timeout 1 s.
dead_config() { # PORT EXTRA
  cat <<CFG
listen = ["127.0.0.1:$1"]
[service.pool]
proxy = ["127.0.0.1:$DEAD", ${backends[0]}]
connect_timeout = "1s"
$2
CFG
}
echo "## 2. one dead backend first in the pool (connect_timeout 1 s)"
run_dead() { # LABEL DAEMON EXTRA
  P=$((P + 1))
  dead_config $P "$3" > "$WORK/dead$P.toml"
  RUST_LOG=warn $2 --config "$WORK/dead$P.toml" 2>/dev/null & D=$!; PIDS+=($D)
  wait_port $P
  # Steady state: the checks (2 x 500 ms) have had their time.
  $BENCH short --connect "127.0.0.1:$P" --service pool --connections 1 --duration 2 --label warm-up > /dev/null
  short pool $P "$1"
  kill $D
}
if [ -n "${BEFORE:-}" ]; then
  run_dead "before pools: failover only" "$BEFORE" ""
fi
run_dead "passive ejection only" $DAEMON ""
run_dead "with health checks" $DAEMON 'health_check = { interval = "500ms", timeout = "300ms", rise = 2, fall = 2 }'
