#!/usr/bin/env bash
# The demo, one command: builds tcpmuxd and tcpmux, starts two small web
# servers (python3's http.server, each saying which it is) on 127.0.0.1:4181
# and :4182, and runs tcpmuxd in the foreground with contrib/demo/tcpmuxd.toml
# in a scratch directory, where its admin socket is made. Ctrl-C stops it
# all. Loopback only; every process it starts is stopped by PID.
#   contrib/demo/run.sh
#   TCPMUX_DEMO_BIN=DIR contrib/demo/run.sh    tcpmuxd and tcpmux from DIR, no build
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v python3 >/dev/null || { echo "run.sh: the demo's web servers need python3" >&2; exit 1; }
if [ -n "${TCPMUX_DEMO_BIN:-}" ]; then
  BIN=$TCPMUX_DEMO_BIN
else
  cargo build --quiet -p tcpmuxd -p tcpmux-cli
  BIN=$PWD/target/debug
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
for n in 1 2; do
  mkdir -p "$WORK/site$n"
  echo "hello from web server $n" > "$WORK/site$n/index.html"
  python3 -m http.server --bind 127.0.0.1 --directory "$WORK/site$n" "418$n" >/dev/null 2>&1 &
  PIDS+=($!)
done
# Both answer before tcpmuxd starts, so its first checks find them up.
for n in 1 2; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/418$n") 2>/dev/null && break
    sleep 0.1
  done
done
cp contrib/demo/tcpmuxd.toml "$WORK/"
cat <<HELP
tcpmuxd demo: one port, 127.0.0.1:4141, for TCPMUX names and HTTP.
Try, from another terminal:
  curl http://127.0.0.1:4141/                # the web pool, each server in turn
  $BIN/tcpmux -H 127.0.0.1 -p 4141 daytime
  $BIN/tcpmux -H 127.0.0.1 -p 4141 --list
  open http://127.0.0.1:9900/                # the dashboard
  $BIN/tcpmux admin --socket $WORK/admin.sock show backends
  $BIN/tcpmux admin --socket $WORK/admin.sock set backend web 127.0.0.1:4181 state drain
Ctrl-C stops the demo.
HELP
cd "$WORK"
"$BIN/tcpmuxd" --config "$WORK/tcpmuxd.toml" &
PIDS+=($!)
wait "${PIDS[-1]}"
