#!/usr/bin/env bash
# Multi-core scaling: sometext (1,000,007 bytes per connection) at 1..64
# simultaneous connections, for tcpmuxd --workers 1 and --workers 2, in one run.
#   bench/workers.sh [CONNECTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=("${@:-1 4 16 64}")
[ $# -gt 0 ] || CONNS=(1 4 16 64)
REPEAT=${REPEAT:-5}
PORT=${PORT:-27300}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
echo "# $(nproc) cores, sometext, median aggregate MB/s of $REPEAT runs"
echo "| connections | workers=1 | workers=2 | ratio |"
echo "|---:|---:|---:|---:|"
declare -A RATE
for workers in 1 2; do
  RUST_LOG=warn target/release/tcpmuxd --listen 127.0.0.1:$PORT --workers $workers & PID=$!
  sleep 0.5
  for c in "${CONNS[@]}"; do
    RATE[$workers,$c]=$(target/release/tcpmux-bench bulk --connect 127.0.0.1:$PORT --service sometext \
      --expect 1000007 --connections "$c" --repeat "$REPEAT" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_aggregate_mb_s"])')
  done
  kill $PID; wait $PID 2>/dev/null || true
done
for c in "${CONNS[@]}"; do
  python3 -c "import sys; a,b=float(sys.argv[2]),float(sys.argv[3]); print(f'| {sys.argv[1]} | {a:.0f} | {b:.0f} | {b/a:.2f} |')" "$c" "${RATE[1,$c]}" "${RATE[2,$c]}"
done
