#!/usr/bin/env bash
# The Performance II and III table (docs/benchmarks.md) in one run: each
# workload of tcpmuxd against this machine's own limit for it, or the peer it
# must beat, measured side by side.
#  1. short connections: bench/limit.sh (the C epoll limit, the same exchange
#     on io_uring with liburing-dev, p99.9, syscalls);
#  2. sometext, 1,000,007 bytes per new connection, against a plain TCP source
#     sending as much per connection; with TCP Fast Open too when run as root
#     (net.ipv4.tcp_fastopen = 3 for the run, then put back);
#  3. the relay, 1 and 4 connections, against direct: bench/relay_cost.sh;
#  4. memory per idle session: bench/idle.sh;
#  5. proxied short connections against a C epoll splice relay:
#     bench/proxy_short.sh;
#  6. exec'd services against xinetd and the machine's ceiling for spawning
#     the same program: bench/short.sh (needs xinetd);
#  7. TLS against nginx and HAProxy: bench/tls.sh (needs both; with
#     TLS=0 left out, it takes some minutes);
#  8. cost curves as services, SNI names, sessions and pool members grow:
#     bench/scale.sh (SCALE=0 leaves it out; about 6 minutes);
#  9. SNI passthrough, the front alone, against nginx's ssl_preread and
#     HAProxy's req.ssl_sni: bench/passthrough.sh (needs both).
#   bench/table.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
ROUNDS=${2:-3}
CLIENTS=8
echo "# $(date -u +%F), $(nproc) cores, $(uname -r)"
echo; echo "## 1. Short connections (bench/limit.sh $SECS $CLIENTS $ROUNDS)"
bench/limit.sh "$SECS" "$CLIENTS" "$ROUNDS" | grep -v '^#'

echo; echo "## 2. sometext, 1,000,007 bytes per new connection, $CLIENTS clients"
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
BASE=${BASE_PORT:-27500}
SRC=$BASE PLAIN=$((BASE + 1)) TFO=$((BASE + 2))
TFO_OK=
if [ "$(id -u)" = 0 ]; then
  fast_open_on
  TFO_OK=1
fi
$BENCH source --listen 127.0.0.1:$SRC --bytes 1000007 --tasks >/dev/null & PIDS+=($!)
printf 'listen = ["127.0.0.1:%s", { address = "127.0.0.1:%s", fast_open = true }]\n' $PLAIN $TFO > "$WORK/t.toml"
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/t.toml" 2>/dev/null & PIDS+=($!)
for p in $SRC $PLAIN $TFO; do wait_port $p; done
mbs() { # LABEL PORT [--service NAME] [--fast-open]: connections/s and MB/s
  local label=$1 port=$2; shift 2
  $BENCH short --connect "127.0.0.1:$port" "$@" --connections $CLIENTS --duration "$SECS" --label "$label" \
    | awk -F': ' '{ split($2, f, " "); printf "%s: %.0f MB/s (%s connections/s)\n", $1, f[1] * 1000007 / 1e6, f[1] }'
}
for round in $(seq "$ROUNDS"); do
  mbs "round $round, plain TCP source" $SRC
  mbs "round $round, tcpmuxd sometext" $PLAIN --service sometext
  if [ -n "$TFO_OK" ]; then mbs "round $round, tcpmuxd sometext, fast open" $TFO --service sometext --fast-open; fi
done
cleanup; PIDS=()
fast_open_restore

echo; echo "## 3. Relay against direct (bench/relay_cost.sh 2000000000 $ROUNDS 1, then 4 x 500000000)"
bench/relay_cost.sh 2000000000 "$ROUNDS" 1 | grep -v '^#'
bench/relay_cost.sh 500000000 "$ROUNDS" 4 | grep -v '^#'

echo; echo "## 4. Memory per idle session (bench/idle.sh 10000)"
bench/idle.sh 10000 | grep -v '^#'

echo; echo "## 5. Proxied short connections (bench/proxy_short.sh $SECS $CLIENTS $ROUNDS)"
bench/proxy_short.sh "$SECS" "$CLIENTS" "$ROUNDS" | grep -v '^#'

echo; echo "## 6. Exec'd services against xinetd (bench/short.sh $SECS $CLIENTS)"
if command -v xinetd >/dev/null; then
  bench/short.sh "$SECS" "$CLIENTS" | grep -v '^#'
else
  echo "not measured: xinetd is not installed"
fi

echo; echo "## 7. TLS against nginx and HAProxy (bench/tls.sh $SECS $CLIENTS 1000000000 $ROUNDS)"
if [ "${TLS:-1}" = 0 ]; then
  echo "left out (TLS=0)"
elif command -v nginx >/dev/null && command -v haproxy >/dev/null; then
  bench/tls.sh "$SECS" "$CLIENTS" 1000000000 "$ROUNDS" | grep -v '^#'
else
  echo "not measured: nginx and haproxy are needed"
fi

echo; echo "## 8. Cost curves as the work grows (bench/scale.sh $SECS)"
if [ "${SCALE:-1}" = 0 ]; then
  echo "left out (SCALE=0)"
else
  bench/scale.sh "$SECS" | grep -v '^#'
fi

echo; echo "## 9. SNI passthrough, the front alone (bench/passthrough.sh $SECS $CLIENTS $ROUNDS)"
if have_nginx_stream && command -v haproxy >/dev/null; then
  bench/passthrough.sh "$SECS" "$CLIENTS" "$ROUNDS" | grep -v '^#'
else
  echo "not measured: nginx's stream module and haproxy are needed"
fi
