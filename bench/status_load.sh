#!/usr/bin/env bash
# What many dashboards cost at many sessions: short connections per second
# (daytime, 8 clients) while SESSIONS idle echo sessions are held and
# POLLERS clients fetch /status.json, each once every INTERVAL seconds as a
# dashboard tab does (INTERVAL=0: as fast as answered), against the same
# with nobody polling; the requests answered are counted. A third row runs
# `tcpmux admin show sessions` in a loop instead (each reply lists every
# session): the clients' p99.9 and max latency show any stall of the loop.
# BEFORE=path/to/an/older/tcpmuxd adds the same rows for it, in the same
# run, alternating.   bench/status_load.sh [SECONDS] [SESSIONS] [POLLERS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
SESSIONS=${2:-5000}
POLLERS=${3:-200}
MUX=${BASE_PORT:-27520} METRICS=$(( ${BASE_PORT:-27520} + 1 ))
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench -p tcpmux-cli
. bench/lib.sh
ulimit -n "$(ulimit -Hn)"
cat > "$WORK/t.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
metrics_listen = "127.0.0.1:$METRICS"
max_connections = $((SESSIONS + 1000))
negotiation_timeout = "120s"
admin_socket = "$WORK/admin.sock"
CFG
B=target/release/tcpmux-bench
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
pollers() { # run for SECS + 2 seconds, POLLERS threads
  python3 - "$METRICS" "$POLLERS" $((SECS + 2)) "${INTERVAL:-1}" <<'PY' &
import socket, sys, threading, time
port, n, secs, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
end = time.time() + secs
answered = [0]
def poll():
    while time.time() < end:
        start = time.time()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /status.json HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            s.close()
            if got.startswith(b"HTTP/1.0 200"):
                answered[0] += 1
        except OSError:
            pass
        time.sleep(max(0.0, interval - (time.time() - start)))
threads = [threading.Thread(target=poll, daemon=True) for _ in range(n)]
for t in threads:
    t.start()
time.sleep(secs)
print(f"  /status.json answered: {answered[0] / secs:.0f}/s", flush=True)
PY
  POLLER=$!; PIDS+=($POLLER)
}
run() { # label binary
  RUST_LOG=warn "$2" --config "$WORK/t.toml" 2>/dev/null & local daemon=$!
  PIDS+=($daemon)
  wait_port $MUX
  $B idle --connect "127.0.0.1:$MUX" --service echo --connections "$SESSIONS" --hold $((SECS * 2 + 20)) > "$WORK/idle.out" &
  local idle=$!; PIDS+=($idle)
  for _ in $(seq 300); do grep -q holding "$WORK/idle.out" 2>/dev/null && break; sleep 0.1; done
  $B short --connect "127.0.0.1:$MUX" --service daytime --connections 8 --duration "$SECS" --label "$1 unwatched"
  pollers
  sleep 1
  $B short --connect "127.0.0.1:$MUX" --service daytime --connections 8 --duration "$SECS" --label "$1 $POLLERS pollers"
  wait $POLLER || true
  (end=$((SECONDS + SECS + 2)); while [ $SECONDS -lt $end ]; do
     target/release/tcpmux admin --socket "$WORK/admin.sock" --json show sessions > /dev/null; done) &
  local admin=$!; PIDS+=($admin)
  sleep 0.5
  $B short --connect "127.0.0.1:$MUX" --service daytime --connections 8 --duration "$SECS" --label "$1 show sessions in a loop"
  wait $admin || true
  kill $idle $daemon 2>/dev/null || true
  wait $idle $daemon 2>/dev/null || true
}
echo "# $(nproc) cores, $SESSIONS idle sessions, $POLLERS pollers of /status.json every ${INTERVAL:-1} s, $SECS s each"
if [ -n "${BEFORE:-}" ]; then run before "$BEFORE"; fi
run after target/release/tcpmuxd
