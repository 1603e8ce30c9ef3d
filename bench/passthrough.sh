#!/usr/bin/env bash
# SNI passthrough, the front alone (Performance IV, item 2): a ClientHello
# for pass.bench.test, routed by that name to a plain backend that answers
# 32 bytes and closes (tcpmux-bench source; no TLS behind, so no handshake's
# crypto anywhere and both the rate and the CPU are the front's own: read
# the ClientHello, pick by its name, connect, relay both ways, close).
# Through tcpmuxd (a detecting listener, `sni`, log at warn), nginx (stream,
# `ssl_preread` and a map) and HAProxy (`req.ssl_sni` after an inspect
# delay); one worker or thread each, rounds alternating, each row with the
# front's CPU per connection (nginx's worker, not its master).
#   bench/passthrough.sh [SECONDS] [CLIENTS] [ROUNDS]
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
BASE=${BASE_PORT:-28100}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
SRC=$BASE MUX=$((BASE + 1)) NGINX=$((BASE + 2)) HAP=$((BASE + 3))
$BENCH source --listen 127.0.0.1:$SRC --bytes 32 >/dev/null & PIDS+=($!)

printf 'listen = [{ address = "127.0.0.1:%s", detect = true }]\n[service.pass]\nproxy = "127.0.0.1:%s"\nsni = ["pass.bench.test"]\n' \
  $MUX $SRC > "$WORK/tcpmuxd.toml"
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/tcpmuxd.toml" 2>/dev/null & PIDS+=($!) MUXD=$!

start_nginx_with <<CFG
  map \$ssl_preread_server_name \$to {
    pass.bench.test 127.0.0.1:$SRC;
    default 127.0.0.1:1;
  }
  server { listen 127.0.0.1:$NGINX; ssl_preread on; proxy_pass \$to; }
CFG
NGINXD=${PIDS[-1]}

NBTHREAD=1 start_haproxy <<CFG
frontend fe_sni
  bind 127.0.0.1:$HAP
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend be_pass if { req.ssl_sni -i pass.bench.test }
backend be_pass
  server source 127.0.0.1:$SRC
CFG
HAPD=${PIDS[-1]}

for p in $SRC $MUX $NGINX $HAP; do wait_port $p; done
NGINXW=$(pgrep -P "$NGINXD" | head -1)
echo "# $(date -u +%F), $(nproc) cores, $(uname -r); $SECS s x $CLIENTS clients per row"
row() { # PORT PID LABEL
  with_cpu "$2" $BENCH short --connect "127.0.0.1:$1" --probe tls:pass.bench.test \
    --connections "$CLIENTS" --duration "$SECS" --label "$3"
}
for round in $(seq "$ROUNDS"); do
  row $NGINX "$NGINXW" "round $round, nginx ssl_preread"
  row $HAP $HAPD "round $round, HAProxy req.ssl_sni"
  row $MUX $MUXD "round $round, tcpmuxd sni (warn)"
done
