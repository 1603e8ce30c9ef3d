#!/usr/bin/env bash
# What watching costs: short connections per second (daytime through TCPMUX)
# with nobody watching, with the dashboard open in a headless chromium (it
# polls /status.json every second, as a browser tab does), and with a script
# polling /status.json ten times a second. Rounds alternate, so drift on a busy
# machine hits every setup alike; the ratios are against "unwatched" in the
# same round.
#   bench/dashboard.sh [SECONDS] [CLIENTS] [ROUNDS]
# With BEFORE=path/to/an/older/tcpmuxd, that binary is measured unwatched in
# each round too (the cost of the session table every connection enters).
# Needs chromium (Debian's package); without it, that row is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-27480}
MUX=$BASE METRICS=$((BASE + 1))
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh

cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
metrics_listen = "127.0.0.1:$METRICS"
CFG
B=target/release/tcpmux-bench
measure() { # label
  $B short --connect "127.0.0.1:$MUX" --service daytime --connections "$CLIENTS" \
    --duration "$SECONDS_EACH" --label "$1" --json
}
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
start() { # binary
  RUST_LOG=warn "$1" --config "$WORK/tcpmuxd.toml" & DAEMON=$!
  PIDS+=($DAEMON)
  wait_port $MUX
}
browser() {
  chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-extensions --user-data-dir="$WORK/chromium" \
    --remote-debugging-port=0 "http://127.0.0.1:$METRICS/" >/dev/null 2>&1 & BROWSER=$!
  PIDS+=($BROWSER)
  # Loaded and polling: the daemon has answered status.json at least twice.
  sleep 3
}
poller() {
  (for _ in $(seq $((SECONDS_EACH * 10 + 50))); do
     (exec 3<>"/dev/tcp/127.0.0.1/$METRICS"; printf 'GET /status.json HTTP/1.0\r\n\r\n' >&3; cat <&3 >/dev/null) 2>/dev/null
     sleep 0.1
   done) & POLLER=$!
  PIDS+=($POLLER)
}
HAVE_CHROMIUM=$(command -v chromium || true)
[ -n "$HAVE_CHROMIUM" ] || echo "chromium: not installed, the browser row is skipped" >&2
echo "# $(nproc) cores, $CLIENTS clients, $SECONDS_EACH s each, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  if [ -n "${BEFORE:-}" ]; then
    start "$BEFORE"; measure "before-unwatched" | sed "s/^{/{\"round\":$round,/"; stop_pid $DAEMON
  fi
  start target/release/tcpmuxd
  measure "unwatched" | sed "s/^{/{\"round\":$round,/"
  if [ -n "$HAVE_CHROMIUM" ]; then
    browser
    measure "dashboard-open" | sed "s/^{/{\"round\":$round,/"
    stop_pid $BROWSER
  fi
  poller
  measure "status.json-10-per-s" | sed "s/^{/{\"round\":$round,/"
  stop_pid $POLLER
  stop_pid $DAEMON
done > "$WORK/rows.json"
python3 - "$WORK/rows.json" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {r["round"]: r["per_second"] for r in rows if r["label"] == "unwatched"}
by = collections.defaultdict(list)
for r in rows:
    by[r["label"]].append(r)
print("| setup | connections/s (each round) | vs unwatched, same round | p99 us (median) |")
print("|---|---|---|---:|")
for label, rs in by.items():
    rates = ", ".join(f"{r['per_second']:.0f}" for r in rs)
    ratios = ", ".join(f"{r['per_second'] / base[r['round']]:.3f}" for r in rs)
    p99 = sorted(r["p99_us"] for r in rs)[len(rs) // 2]
    print(f"| {label} | {rates} | {ratios} | {p99} |")
PY
