#!/usr/bin/env bash
# The whole comparison in one run: installs the peers it needs (Debian packages,
# as root), then runs every benchmark script on the same machine back to back
# and prints their tables, so the ratios in docs/benchmarks.md can be redone
# with one command.   bench/compare.sh        (INSTALL=0 to skip installing)
#
# openbsd-inetd's package conflicts with xinetd's, so short.sh unpacks its
# binary into target/peers/ instead of installing it (libwrap0 is its library).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in socat:socat haproxy:haproxy nginx:nginx iperf3:iperf3 xinetd:xinetd; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair##*:}")
done
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
# Captured, not piped into grep -q: under pipefail an early grep exit SIGPIPEs
# the writer and the pipeline reads as a miss.
[[ $(ldconfig -p 2>/dev/null) == *libwrap.so.0* ]] || need+=(libwrap0)
if [ ${#need[@]} -gt 0 ]; then
  if [ "${INSTALL:-1}" = 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "bench/compare.sh: missing ${need[*]} (run with INSTALL=1 as root)" >&2
    exit 1
  fi
fi
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench

echo "## Proxy throughput"
REPEAT=${REPEAT:-5} bench/proxy.sh 2000000000 1 4 2> >(grep -v 'socat\[' >&2)
echo
echo "## One connection against the loopback limit"
bench/bulk.sh 3
echo
echo "## The Nagle experiment"
bench/nagle.sh 30 2> >(grep -v 'socat\[' >&2)
echo
echo "## Short connections"
bench/short.sh 5 8
echo
echo "## Idle clients"
bench/idle.sh 10000
echo
echo "## Concurrency sweeps"
PORT=${SWEEP_PORT:-27600}
RUST_LOG=warn target/release/tcpmuxd --listen 127.0.0.1:$PORT & DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true' EXIT
sleep 0.5
echo "### chargen, 100 MB per connection, all reading at once"
target/release/tcpmux-bench sweep --connect 127.0.0.1:$PORT --service chargen --endless \
  --expect 100000000 --levels 1,2,4,8,16,32,64
echo "### sometext, 1,000,007 bytes per connection, 1 to 10,000 at once"
target/release/tcpmux-bench sweep --connect 127.0.0.1:$PORT
