#!/usr/bin/env bash
# Multi-core scaling of `tcpmuxd --workers N`, in one run.
#
# On more than 4 cores (or with PIN=1), the daemon is pinned to the first
# half of the cores and the clients to the other half (taskset), so clients
# never take the daemon's CPU; N runs 1, 2, 4, ... up to the daemon's half.
# On 4 cores or fewer the clients must share the daemon's cores and no
# scaling can show: it compares 1 and 2 workers unpinned, as a smoke test.
# Two workloads per N: short daytime connections (connections/s, 4 clients
# per daemon core) and sometext, 1,000,007 bytes per connection, at 1..64
# simultaneous connections (median aggregate MB/s of REPEAT runs).
#   bench/workers.sh [SECONDS] [CONNECTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
shift || true
CONNS=("$@")
[ ${#CONNS[@]} -gt 0 ] || CONNS=(1 4 16 64)
REPEAT=${REPEAT:-5}
PORT=${PORT:-27300}
CORES=$(nproc)
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
if [ "$CORES" -gt 4 ] || [ "${PIN:-}" = 1 ]; then
  HALF=$(( CORES / 2 ))
  PIN_DAEMON=(taskset -c "0-$((HALF - 1))")
  PIN_CLIENTS=(taskset -c "$HALF-$((CORES - 1))")
  WORKERS=(); for ((n = 1; n <= HALF; n *= 2)); do WORKERS+=("$n"); done
  echo "# $CORES cores: tcpmuxd on CPUs 0-$((HALF - 1)), clients on CPUs $HALF-$((CORES - 1))"
else
  HALF=$CORES
  PIN_DAEMON=() PIN_CLIENTS=()
  WORKERS=(1 2)
  echo "# $CORES cores: clients share the daemon's cores, so no scaling can show here (docs/benchmarks.md)"
fi
SHORT_CLIENTS=$(( 4 * HALF ))
declare -A SHORT BULK
for workers in "${WORKERS[@]}"; do
  RUST_LOG=warn "${PIN_DAEMON[@]}" target/release/tcpmuxd --listen 127.0.0.1:$PORT --workers "$workers" 2>/dev/null &
  PID=$!; PIDS+=($PID)
  wait_port $PORT
  SHORT[$workers]=$("${PIN_CLIENTS[@]}" $BENCH short --connect 127.0.0.1:$PORT --service daytime \
    --connections $SHORT_CLIENTS --duration "$SECS" --label x | sed -E 's/^x: ([0-9]+) connections.*/\1/')
  for c in "${CONNS[@]}"; do
    BULK[$workers,$c]=$("${PIN_CLIENTS[@]}" $BENCH bulk --connect 127.0.0.1:$PORT --service sometext \
      --expect 1000007 --connections "$c" --repeat "$REPEAT" --json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_aggregate_mb_s"])')
  done
  kill $PID; wait $PID 2>/dev/null || true
done
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }
echo
echo "| workers | daytime connections/s ($SHORT_CLIENTS clients) | vs 1 |"
echo "|---:|---:|---:|"
for w in "${WORKERS[@]}"; do echo "| $w | ${SHORT[$w]} | $(ratio "${SHORT[$w]}" "${SHORT[1]}") |"; done
echo
header="| workers |"; for c in "${CONNS[@]}"; do header+=" $c conns MB/s (vs 1) |"; done
echo "$header"
echo "|---:|$(printf -- '---:|%.0s' "${CONNS[@]}")"
for w in "${WORKERS[@]}"; do
  line="| $w |"
  for c in "${CONNS[@]}"; do
    line+=" $(printf '%.0f' "${BULK[$w,$c]}") ($(ratio "${BULK[$w,$c]}" "${BULK[1,$c]}")) |"
  done
  echo "$line"
done
