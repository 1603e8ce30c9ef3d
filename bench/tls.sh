#!/usr/bin/env bash
# TLS termination, one run, one worker each, the same ECDSA P-256 certificate
# and cipher suite (the client offers only TLS_AES_128_GCM_SHA256, TLS 1.3,
# no resumption):
#  1. new TLS connections per second: handshake, then a short answer (32 bytes
#     from a plain backend behind the terminator; tcpmuxd also with its
#     built-in daytime, no backend);
#  2. one connection's bulk throughput through TLS termination to a plain
#     backend (SIZE bytes, median of REPEAT);
#  3. returning clients: as 1, each session resumed from a TLS 1.3 ticket
#     (tickets on in all three servers; off in every other row's listeners,
#     tcpmuxd's too, as a server that sends tickets costs the client their
#     records);
#  4. TLS to the backend: plain clients, relayed over TLS (certificate
#     verified) to a TLS backend that answers 32 bytes (nginx `return`,
#     tickets on, so both relays may resume): tcpmuxd's backend_tls against
#     HAProxy's `server ... ssl verify required`;
#  5. one port for passthrough and termination: a TLS client for a name
#     that is terminated (relayed in clear to the 32-byte backend), and one
#     for a name passed through untouched to the TLS backend; tcpmuxd
#     (detect + tls, sni_terminate), nginx (ssl_preread in front of its own
#     ssl server), HAProxy (req.ssl_sni in front of an abns@ ssl frontend).
# tcpmuxd (tls listener, proxy service), nginx (stream, listen ... ssl,
# worker_processes 1) and HAProxy (bind ... ssl crt, nbthread 1).
# Every connection row ends with the server's CPU per connection (user +
# system, all its threads; nginx's worker): the client's handshakes share
# the machine's cores, so rates understate the servers' differences, and the
# CPU a server spends per connection is its own cost. Row 2 ends with the
# server's and the client's CPU per GB moved, for the same reason.
#   bench/tls.sh [SECONDS] [CLIENTS] [SIZE] [REPEAT]
#   ROWS="1 3" bench/tls.sh ...    # some rows only; ROUNDS=3 repeats them
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-8}
SIZE=${3:-1000000000}
REPEAT=${4:-3}
ROWS=${ROWS:-1 2 3 4 5}
ROUNDS=${ROUNDS:-1}
want() { case " $ROWS " in *" $1 "*) return 0;; *) return 1;; esac; }
BASE=${BASE_PORT:-27800}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
BENCH=target/release/tcpmux-bench
MUX=$BASE NGINX=$((BASE + 1)) HAP=$((BASE + 2)) SHORT_BACKEND=$((BASE + 3)) BULK_BACKEND=$((BASE + 4))
MUX_BULK=$((BASE + 5)) NGINX_BULK=$((BASE + 6)) HAP_BULK=$((BASE + 7))
NGINX_RES=$((BASE + 8)) HAP_RES=$((BASE + 9)) TLS_BACKEND=$((BASE + 10))
MUX_PLAIN=$((BASE + 11)) HAP_RELAY=$((BASE + 12))
MUX_ONE=$((BASE + 13)) NGINX_ONE=$((BASE + 14)) NGINX_INNER=$((BASE + 15)) HAP_ONE=$((BASE + 16))
MUX_RES=$((BASE + 17))
echo "# $(nproc) cores, $(uname -r); $(haproxy -v | head -1); $(nginx -v 2>&1)"

# One CA, one server certificate for localhost.
localhost_cert
cat "$WORK/cert.pem" "$WORK/key.pem" > "$WORK/haproxy.pem"

$BENCH source --listen "127.0.0.1:$SHORT_BACKEND" --bytes 32 --tasks > /dev/null & PIDS+=($!)
$BENCH source --listen "127.0.0.1:$BULK_BACKEND" --bytes "$SIZE" > /dev/null & PIDS+=($!)

ANSWER=0123456789abcdef0123456789abcde
# Tickets off where the peers have them off (rows 1, 2 and 5a): a server
# that sends tickets also costs the client their records.
TLS="tls = { cert = \"$WORK/cert.pem\", key = \"$WORK/key.pem\", tickets = false }"
TLS_RES="tls = { cert = \"$WORK/cert.pem\", key = \"$WORK/key.pem\" }"
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = [{ address = "127.0.0.1:$MUX", $TLS }, "127.0.0.1:$MUX_PLAIN", { address = "127.0.0.1:$MUX_RES", $TLS_RES }]
[service.short]
proxy = "127.0.0.1:$SHORT_BACKEND"
[service.bulk]
proxy = "127.0.0.1:$BULK_BACKEND"
[service.tlsback]
proxy = "127.0.0.1:$TLS_BACKEND"
backend_tls = { ca = "$WORK/ca.pem", server_name = "localhost" }
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/tcpmuxd.toml" & PIDS+=($!) MUXD=$!
# The one-port listener in a daemon of its own, so that rows 1-3 measure a
# daemon with nothing but its TLS listener's services.
cat > "$WORK/one-port.toml" <<CFG
listen = [{ address = "127.0.0.1:$MUX_ONE", detect = true, $TLS }]
[service.app]
proxy = "127.0.0.1:$SHORT_BACKEND"
sni_terminate = ["app.bench.test"]
[service.pass]
proxy = "127.0.0.1:$TLS_BACKEND"
sni = ["pass.bench.test"]
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/one-port.toml" & PIDS+=($!) ONED=$!

start_nginx_with <<CFG
  ssl_certificate $WORK/cert.pem;
  ssl_certificate_key $WORK/key.pem;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache off;
  ssl_session_tickets off;
  server { listen 127.0.0.1:$NGINX ssl; proxy_pass 127.0.0.1:$SHORT_BACKEND; }
  server { listen 127.0.0.1:$NGINX_BULK ssl; proxy_pass 127.0.0.1:$BULK_BACKEND; }
  server { listen 127.0.0.1:$NGINX_RES ssl; ssl_session_tickets on; proxy_pass 127.0.0.1:$SHORT_BACKEND; }
  map \$ssl_preread_server_name \$one_port {
    pass.bench.test 127.0.0.1:$TLS_BACKEND;
    default 127.0.0.1:$NGINX_INNER;
  }
  server { listen 127.0.0.1:$NGINX_ONE; ssl_preread on; proxy_pass \$one_port; }
  server { listen 127.0.0.1:$NGINX_INNER ssl; proxy_pass 127.0.0.1:$SHORT_BACKEND; }
CFG
NGINXD=${PIDS[-1]}

# The TLS backend of rows 4 and 5, a process of its own.
mkdir -p "$WORK/backend"
cat > "$WORK/backend/nginx.conf" <<CFG
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
pid $WORK/backend/nginx.pid;
error_log $WORK/backend/nginx.err;
events { worker_connections 4096; }
stream {
  server {
    listen 127.0.0.1:$TLS_BACKEND ssl;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets on;
    return "$ANSWER\n";
  }
}
CFG
nginx -p "$WORK/backend" -c "$WORK/backend/nginx.conf" -g 'daemon off;' & PIDS+=($!)

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
frontend resumed
  bind 127.0.0.1:$HAP_RES ssl crt $WORK/haproxy.pem
  default_backend short
frontend relay
  bind 127.0.0.1:$HAP_RELAY
  default_backend tls_backend
backend tls_backend
  server t 127.0.0.1:$TLS_BACKEND ssl verify required ca-file $WORK/ca.pem sni str(localhost) verifyhost localhost
frontend one_port
  bind 127.0.0.1:$HAP_ONE
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend one_pass if { req.ssl_sni -i pass.bench.test }
  default_backend one_terminate
backend one_pass
  server p 127.0.0.1:$TLS_BACKEND
backend one_terminate
  server t abns@one_tls send-proxy-v2
frontend one_tls
  bind abns@one_tls accept-proxy ssl crt $WORK/haproxy.pem no-tls-tickets
  default_backend short
CFG
haproxy -db -f "$WORK/haproxy.cfg" >/dev/null 2>&1 & PIDS+=($!) HAPD=$!
for port in $MUX $NGINX $HAP $SHORT_BACKEND $BULK_BACKEND $NGINX_BULK $HAP_BULK $NGINX_RES $HAP_RES \
  $TLS_BACKEND $MUX_PLAIN $HAP_RELAY $MUX_ONE $NGINX_ONE $HAP_ONE $MUX_RES; do wait_port "$port"; done

# nginx's one worker does the work (worker_processes 1), not its master.
NGINXW=$(pgrep -P "$NGINXD" | head -1)

# Row 2's line with the CPU per GB moved of the server (PID) and of the
# client, which decrypts every byte on the same cores.
bulk_cpu() {
  local pid=$1 before after out ticks
  shift
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='client-cpu %U %S'; time "$@"; } 2>&1 )
  after=$(cpu_ticks "$pid")
  ticks=$(getconf CLK_TCK)
  awk -v t="$ticks" -v s=$((after - before)) -v bytes=$((SIZE * REPEAT)) '
    /^client-cpu/ { client = ($2 + $3) * 1000 / (bytes / 1e9); next }
    { line = line $0 }
    END { printf "%s, server CPU %.0f ms/GB, client CPU %.0f ms/GB\n", line, s * 1000 / t / (bytes / 1e9), client }' <<<"$out"
}
short() { $BENCH tls-short --connect "127.0.0.1:$1" --ca "$WORK/ca.pem" --connections "$CLIENTS" --duration "$SECS" --label "$2" ${3:+--service $3} "${@:4}"; }
relay() { $BENCH short --connect "127.0.0.1:$1" --connections "$CLIENTS" --duration "$SECS" --label "$2" ${3:+--service $3}; }
for round in $(seq "$ROUNDS"); do
[ "$ROUNDS" = 1 ] || echo "# round $round"
if want 1; then
  echo "## 1. new TLS connections: handshake + 32-byte answer from a plain backend"
  with_cpu $MUXD short $MUX "tcpmuxd (proxy)" short
  with_cpu $NGINXW short $NGINX "nginx stream"
  with_cpu $HAPD short $HAP "haproxy"
  with_cpu $MUXD short $MUX "tcpmuxd (built-in daytime, no backend)" daytime
fi

# The bulk service is on the same tcpmuxd listener.
if want 2; then
  echo "## 2. one connection, $SIZE bytes through TLS termination"
  bulk_cpu $MUXD $BENCH tls-bulk --connect "127.0.0.1:$MUX" --ca "$WORK/ca.pem" --service bulk --expect "$SIZE" --repeat "$REPEAT" --label "tcpmuxd"
  bulk_cpu $NGINXW $BENCH tls-bulk --connect "127.0.0.1:$NGINX_BULK" --ca "$WORK/ca.pem" --expect "$SIZE" --repeat "$REPEAT" --label "nginx stream"
  bulk_cpu $HAPD $BENCH tls-bulk --connect "127.0.0.1:$HAP_BULK" --ca "$WORK/ca.pem" --expect "$SIZE" --repeat "$REPEAT" --label "haproxy"
fi

if want 3; then
  echo "## 3. returning clients: sessions resumed from TLS 1.3 tickets, + 32-byte answer"
  with_cpu $MUXD short $MUX_RES "tcpmuxd (proxy)" short --resume
  with_cpu $NGINXW short $NGINX_RES "nginx stream" "" --resume
  with_cpu $HAPD short $HAP_RES "haproxy" "" --resume
fi

if want 4; then
  echo "## 4. plain clients relayed over verified TLS to a TLS backend (32-byte answer)"
  with_cpu $MUXD relay $MUX_PLAIN "tcpmuxd (backend_tls)" tlsback
  with_cpu $HAPD relay $HAP_RELAY "haproxy (ssl verify required)"
fi

if want 5; then
  echo "## 5. one port: a terminated name, then a passed-through name (32-byte answers)"
  with_cpu $ONED short $MUX_ONE "tcpmuxd (terminated: sni_terminate)" "" --server-name app.bench.test
  with_cpu $NGINXW short $NGINX_ONE "nginx (terminated: ssl_preread + inner ssl server)" "" --server-name app.bench.test
  with_cpu $HAPD short $HAP_ONE "haproxy (terminated: req.ssl_sni + abns ssl frontend)" "" --server-name app.bench.test
  with_cpu $ONED short $MUX_ONE "tcpmuxd (passed through: sni)" "" --server-name pass.bench.test
  with_cpu $NGINXW short $NGINX_ONE "nginx (passed through: ssl_preread)" "" --server-name pass.bench.test
  with_cpu $HAPD short $HAP_ONE "haproxy (passed through: req.ssl_sni)" "" --server-name pass.bench.test
fi
done
