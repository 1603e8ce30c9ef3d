#!/usr/bin/env bash
# Where a relay's time goes: one bulk connection direct to a source, through
# tcpmuxd's splice and copy relays, and through HAProxy with splice, with the
# CPU time the whole machine spent per GB (/proc/stat) and the relay's own
# share (/proc/PID/stat). Rounds alternate, so drift hits every row alike.
#   bench/relay_cost.sh [BYTES] [ROUNDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-1000000000}
ROUNDS=${2:-3}
CONNS=${3:-1}
BASE=${BASE_PORT:-27400}
SRC=$BASE MUX=$((BASE + 1)) HAPS=$((BASE + 2))
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BIN=target/release
$BIN/tcpmux-bench source --listen 127.0.0.1:$SRC --bytes "$BYTES" >/dev/null & PIDS+=($!)
printf 'listen = ["127.0.0.1:%s"]\n[service.splice]\nproxy = "127.0.0.1:%s"\nrelay = "splice"\n[service.copy]\nproxy = "127.0.0.1:%s"\nrelay = "copy"\n' \
  $MUX $SRC $SRC > "$WORK/t.toml"
RUST_LOG=warn $BIN/tcpmuxd --config "$WORK/t.toml" 2>/dev/null & PIDS+=($!); MUX_PID=$!
HAP_PID=
if command -v haproxy >/dev/null; then
  start_haproxy < <(haproxy_pair splice $HAPS $SRC splice); HAP_PID=${PIDS[-1]}
  wait_port $HAPS
fi
for p in $SRC $MUX; do wait_port $p; done
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
own() { if [ -n "$1" ]; then cpu_ticks "$1"; else echo 0; fi; }
TICK=$(getconf CLK_TCK)
echo "# $(nproc) cores, $(uname -r), $CONNS connection(s) x $BYTES bytes per row"
echo "| round | path | MB/s | machine CPU ms per GB | relay's own CPU ms per GB |"
echo "|---:|---|---:|---:|---:|"
row() { # row ROUND LABEL PORT SERVICE RELAY_PID
  local b0 o0 b1 o1 rate gb
  b0=$(busy); o0=$(own "$5")
  rate=$($BIN/tcpmux-bench bulk --connect "127.0.0.1:$3" ${4:+--service "$4"} --connections "$CONNS" \
    --expect "$BYTES" --repeat 1 --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_aggregate_mb_s"]))')
  b1=$(busy); o1=$(own "$5")
  gb=$(python3 -c "print($BYTES * $CONNS / 1e9)")
  python3 -c "import sys; t=$TICK; gb=$gb; print(f'| $1 | $2 | $rate | {($b1-$b0)*1000/t/gb:.0f} | ' + ('-' if '$5' == '' else f'{($o1-$o0)*1000/t/gb:.0f}') + ' |')"
}
for round in $(seq "$ROUNDS"); do
  row "$round" direct $SRC "" ""
  row "$round" "tcpmuxd splice" $MUX splice $MUX_PID
  row "$round" "tcpmuxd copy" $MUX copy $MUX_PID
  if [ -n "$HAP_PID" ]; then row "$round" "HAProxy splice" $HAPS "" "$HAP_PID"; fi
done
