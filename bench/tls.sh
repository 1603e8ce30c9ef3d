#!/usr/bin/env bash
# TLS termination, one run, one worker each, the same ECDSA P-256 certificate
# and cipher suite (the client offers only TLS_AES_128_GCM_SHA256, TLS 1.3,
# no resumption):
#  1. new TLS connections per second: handshake, then a short answer (32 bytes
#     from a plain backend behind the terminator; tcpmuxd also with its
#     built-in daytime, no backend);
#  2. one connection's bulk throughput through TLS termination to a plain
#     backend (SIZE bytes, median of REPEAT).
# tcpmuxd (tls listener, proxy service), nginx (stream, listen ... ssl,
# worker_processes 1) and HAProxy (bind ... ssl crt, nbthread 1).
#   bench/tls.sh [SECONDS] [CLIENTS] [SIZE] [REPEAT]
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
SIZE=${3:-1000000000}
REPEAT=${4:-3}
BASE=${BASE_PORT:-27800}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
MUX=$BASE NGINX=$((BASE + 1)) HAP=$((BASE + 2)) SHORT_BACKEND=$((BASE + 3)) BULK_BACKEND=$((BASE + 4))
MUX_BULK=$((BASE + 5)) NGINX_BULK=$((BASE + 6)) HAP_BULK=$((BASE + 7))
echo "# $(nproc) cores, $(uname -r); $(haproxy -v | head -1); $(nginx -v 2>&1)"

# One CA, one server certificate for localhost.
localhost_cert
cat "$WORK/cert.pem" "$WORK/key.pem" > "$WORK/haproxy.pem"

$BENCH source --listen "127.0.0.1:$SHORT_BACKEND" --bytes 32 --tasks > /dev/null & PIDS+=($!)
$BENCH source --listen "127.0.0.1:$BULK_BACKEND" --bytes "$SIZE" > /dev/null & PIDS+=($!)

cat > "$WORK/tcpmuxd.toml" <<CFG
listen = [{ address = "127.0.0.1:$MUX", tls = { cert = "$WORK/cert.pem", key = "$WORK/key.pem" } }]
[service.short]
proxy = "127.0.0.1:$SHORT_BACKEND"
[service.bulk]
proxy = "127.0.0.1:$BULK_BACKEND"
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/tcpmuxd.toml" & PIDS+=($!)

cat > "$WORK/nginx.conf" <<CFG
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
stream {
  ssl_certificate $WORK/cert.pem;
  ssl_certificate_key $WORK/key.pem;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache off;
  ssl_session_tickets off;
  server { listen 127.0.0.1:$NGINX ssl; proxy_pass 127.0.0.1:$SHORT_BACKEND; }
  server { listen 127.0.0.1:$NGINX_BULK ssl; proxy_pass 127.0.0.1:$BULK_BACKEND; }
}
CFG
nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & PIDS+=($!)

cat > "$WORK/haproxy.cfg" <<CFG
global
  nbthread 1
  maxconn 4000
  tune.ssl.cachesize 0
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend short
  bind 127.0.0.1:$HAP ssl crt $WORK/haproxy.pem no-tls-tickets
  default_backend short
backend short
  server s 127.0.0.1:$SHORT_BACKEND
frontend bulk
  bind 127.0.0.1:$HAP_BULK ssl crt $WORK/haproxy.pem no-tls-tickets
  default_backend bulk
backend bulk
  server b 127.0.0.1:$BULK_BACKEND
CFG
haproxy -db -f "$WORK/haproxy.cfg" >/dev/null 2>&1 & PIDS+=($!)
for port in $MUX $NGINX $HAP $SHORT_BACKEND $BULK_BACKEND $NGINX_BULK $HAP_BULK; do wait_port "$port"; done

echo "## 1. new TLS connections: handshake + 32-byte answer from a plain backend"
short() { $BENCH tls-short --connect "127.0.0.1:$1" --ca "$WORK/ca.pem" --connections "$CLIENTS" --duration "$SECS" --label "$2" ${3:+--service $3}; }
short $MUX "tcpmuxd (proxy)" short
short $NGINX "nginx stream"
short $HAP "haproxy"
short $MUX "tcpmuxd (built-in daytime, no backend)" daytime

echo "## 2. one connection, $SIZE bytes through TLS termination"
# The bulk service is on the same tcpmuxd listener.
$BENCH tls-bulk --connect "127.0.0.1:$MUX" --ca "$WORK/ca.pem" --service bulk --expect "$SIZE" --repeat "$REPEAT" --label "tcpmuxd"
$BENCH tls-bulk --connect "127.0.0.1:$NGINX_BULK" --ca "$WORK/ca.pem" --expect "$SIZE" --repeat "$REPEAT" --label "nginx stream"
$BENCH tls-bulk --connect "127.0.0.1:$HAP_BULK" --ca "$WORK/ca.pem" --expect "$SIZE" --repeat "$REPEAT" --label "haproxy"
