#!/usr/bin/env bash
# One connection against the loopback limit, in alternation so that drift on a
# busy machine hits every row alike: iperf3's single stream, tcpmuxd's sometext
# (the seed's 1,000,007-byte download, a new connection each, connect and
# negotiation included, as the seed's client timed it) and chargen (one
# connection streaming 2 GB), and tcpmux-bench's own plain TCP source sending
# the same 1,000,007 bytes per new connection with no negotiation, which shows
# what a fresh connection costs any server. Prints medians, ratios to iperf3.
#   bench/bulk.sh [ROUNDS]        needs iperf3
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BASE=${BASE_PORT:-27300}
MUX=$BASE IPERF=$((BASE + 1)) SRC=$((BASE + 2))
command -v iperf3 >/dev/null || { echo "bench/bulk.sh: iperf3 is not installed" >&2; exit 1; }
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
B=target/release/tcpmux-bench
RUST_LOG=warn target/release/tcpmuxd --listen 127.0.0.1:$MUX & PIDS+=($!)
iperf3 -s -p $IPERF >/dev/null 2>&1 & PIDS+=($!)
$B source --listen 127.0.0.1:$SRC --bytes 1000007 >/dev/null & PIDS+=($!)
wait_port $MUX; wait_port $IPERF; wait_port $SRC
echo "# $(nproc) cores, $(uname -r), $ROUNDS rounds"
for _ in $(seq "$ROUNDS"); do
  iperf3 -c 127.0.0.1 -p $IPERF -t 3 -J | python3 -c 'import json,sys; print("iperf3", json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)'
  $B bulk --connect 127.0.0.1:$MUX --service sometext --expect 1000007 --repeat 200 --json \
    | python3 -c 'import json,sys; print("sometext", json.load(sys.stdin)["median_aggregate_mb_s"])'
  $B bulk --connect 127.0.0.1:$SRC --expect 1000007 --repeat 200 --json \
    | python3 -c 'import json,sys; print("source", json.load(sys.stdin)["median_aggregate_mb_s"])'
  $B sweep --connect 127.0.0.1:$MUX --service chargen --endless --expect 2000000000 --levels 1 \
    | awk -F'|' '$2+0 == 1 {print "chargen", $3+0}'
done > "$WORK/bulk.txt"
python3 - "$WORK/bulk.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, value = line.split()
    runs.setdefault(name, []).append(float(value))
limit = statistics.median(runs["iperf3"])
print("| one connection | MB/s, each round | median | vs iperf3 |")
print("|---|---|---:|---:|")
labels = {"iperf3": "iperf3 single stream (the loopback limit)",
          "sometext": "tcpmuxd sometext, 1 MB per connection (median of 200)",
          "source": "plain TCP source, 1 MB per connection, no negotiation (median of 200)",
          "chargen": "tcpmuxd chargen, 2 GB on one connection"}
for name in ("iperf3", "sometext", "source", "chargen"):
    values = runs.get(name, [])
    if not values:
        continue
    median = statistics.median(values)
    print(f"| {labels[name]} | {', '.join(f'{v:.0f}' for v in values)} | {median:.0f} | {median/limit:.2f}x |")
PY
