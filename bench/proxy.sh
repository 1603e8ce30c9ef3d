#!/usr/bin/env bash
# Loopback proxy throughput in one run: direct to a backend, through tcpmuxd
# (splice and copy relays), through socat, HAProxy and nginx stream, on the same
# backend and workload, with iperf3's single stream as the loopback limit.
# Prints one table per concurrency, with the ratios.
#
#   bench/proxy.sh [BYTES_PER_CONNECTION] [CONNECTIONS...]
#
# Needs socat, haproxy, nginx with its stream module and iperf3
# (apt-get install socat haproxy nginx libnginx-mod-stream iperf3). Only loopback is used;
# every process started here is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

BYTES=${1:-2000000000}
shift || true
CONNS=("${@:-1}")
[ ${#CONNS[@]} -gt 0 ] || CONNS=(1)
REPEAT=${REPEAT:-5}
BASE=${BASE_PORT:-27100}
SRC=$BASE MUX=$((BASE + 1)) SOCAT=$((BASE + 2)) HAP=$((BASE + 3)) HAPS=$((BASE + 4)) NGX=$((BASE + 5)) IPERF=$((BASE + 6))

for tool in socat haproxy nginx iperf3; do
  command -v "$tool" >/dev/null || { echo "bench/proxy.sh: $tool is not installed" >&2; exit 1; }
done
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
BIN=target/release
. bench/lib.sh

$BIN/tcpmux-bench source --listen 127.0.0.1:$SRC --bytes "$BYTES" & PIDS+=($!)
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
[service.splice]
proxy = "127.0.0.1:$SRC"
relay = "splice"
[service.copy]
proxy = "127.0.0.1:$SRC"
relay = "copy"
CFG
RUST_LOG=warn ${TCPMUXD:-$BIN/tcpmuxd} --config "$WORK/tcpmuxd.toml" & PIDS+=($!)
socat TCP-LISTEN:$SOCAT,fork,reuseaddr TCP:127.0.0.1:$SRC & PIDS+=($!)
start_haproxy < <(haproxy_pair plain $HAP $SRC; haproxy_pair splice $HAPS $SRC splice)
start_nginx_stream $NGX $SRC
iperf3 -s -p $IPERF >/dev/null 2>&1 & PIDS+=($!)
for port in $SRC $MUX $SOCAT $HAP $HAPS $NGX; do wait_port "$port"; done

echo "# $(nproc) cores, $(uname -r), $BYTES bytes per connection, median of $REPEAT runs"
sleep 0.3
IPERF_MBS=$(iperf3 -c 127.0.0.1 -p $IPERF -t 3 -J | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6))')
echo "iperf3 single stream (the loopback limit): $IPERF_MBS MB/s"
for conns in "${CONNS[@]}"; do
  run() { $BIN/tcpmux-bench bulk --connect "127.0.0.1:$1" ${3:+--service "$3"} --connections "$conns" --expect "$BYTES" --repeat "$REPEAT" --label "$2" --json; }
  {
    run $SRC direct
    run $MUX tcpmuxd-splice splice
    run $MUX tcpmuxd-copy copy
    run $SOCAT socat
    run $HAP haproxy
    run $HAPS haproxy-splice
    run $NGX nginx-stream
  } > "$WORK/results.json"
  python3 - "$WORK/results.json" "$conns" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate = {r["label"]: r["median_aggregate_mb_s"] for r in rows}
print(f"\n## {sys.argv[2]} connection(s)\n")
print("| target | aggregate MB/s | per-connection MB/s (min..max) | vs direct |")
print("|---|---:|---:|---:|")
for r in rows:
    print(f"| {r['label']} | {r['median_aggregate_mb_s']:.0f} | {r['per_connection_min_mb_s']:.0f}..{r['per_connection_max_mb_s']:.0f} | {r['median_aggregate_mb_s']/rate['direct']:.2f} |")
for mode in ("tcpmuxd-splice", "tcpmuxd-copy"):
    print(f"\n{mode}: {rate[mode]/rate['haproxy']:.2f}x haproxy, {rate[mode]/rate['haproxy-splice']:.2f}x haproxy-splice, {rate[mode]/rate['nginx-stream']:.2f}x nginx, {rate[mode]/rate['socat']:.2f}x socat, {rate[mode]/rate['direct']:.2f}x direct", end="")
print()
PY
done
