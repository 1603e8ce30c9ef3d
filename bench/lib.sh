# Sourced by the bench scripts: a scratch directory, the processes they start
# (stopped by PID on exit, never by name), and the peers' loopback configs.
WORK=$(mktemp -d)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# CPU time of a process, all its threads, user and system, in clock ticks
# (getconf CLK_TCK per second): cpu_ticks PID
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# Runs a bench command that prints one row ("... (N in S s ..."), and
# appends the CPU (user + system, all threads) that process PID used per
# connection meanwhile:   with_cpu PID COMMAND [ARGS...]
with_cpu() {
  local pid=$1 before after line n
  shift
  before=$(cpu_ticks "$pid")
  line=$("$@")
  after=$(cpu_ticks "$pid")
  n=$(sed -E 's/.*\(([0-9]+) in .*/\1/' <<<"$line")
  echo "$line, server CPU $(( (after - before) * 1000000 / $(getconf CLK_TCK) / (n > 0 ? n : 1) )) us/connection"
}

# One `tcpmux-bench short` row against a server, with the server's CPU per
# connection appended:   short_with_cpu PORT PID SERVICE LABEL
# Uses $BENCH, $CLIENTS and $SECS from the calling script.
short_with_cpu() {
  with_cpu "$2" $BENCH short --connect "127.0.0.1:$1" --service "$3" --connections "$CLIENTS" --duration "$SECS" --label "$4"
}

# TCP Fast Open on both sides for this run (net.ipv4.tcp_fastopen = 3, root
# only), and the old value back on exit or at fast_open_restore.
fast_open_on() {
  OLD_TFO=$(cat /proc/sys/net/ipv4/tcp_fastopen)
  trap 'fast_open_restore; cleanup' EXIT
  echo 3 > /proc/sys/net/ipv4/tcp_fastopen
}
fast_open_restore() { if [ -n "${OLD_TFO:-}" ]; then echo "$OLD_TFO" > /proc/sys/net/ipv4/tcp_fastopen; fi; }

# SIGTERM, then SIGKILL after 5 s: a daemon that ignores SIGTERM (a frozen
# event loop) must not hang the script. Says so when it had to.
stop_pid() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }; sleep 0.1; done
  echo "    (pid $1 ignored SIGTERM for 5 s: killed)"
  kill -9 "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true
}

# A throwaway CA and a server certificate for localhost and *.bench.test
# (ECDSA P-256), as $WORK/ca.pem, $WORK/cert.pem and $WORK/key.pem.
localhost_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench CA" \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -days 2 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$WORK/key.pem" -out "$WORK/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,DNS:*.bench.test\nbasicConstraints=CA:FALSE\n' > "$WORK/ext"
  openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -out "$WORK/cert.pem" -days 1 -extfile "$WORK/ext" 2>/dev/null
}

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

# One HAProxy TCP frontend/backend pair: haproxy_pair NAME PORT BACKEND_PORT [splice]
haproxy_pair() {
  local splice=${4:+  option splice-auto}
  cat <<CFG
frontend fe_$1
  bind 127.0.0.1:$2
$splice
  default_backend be_$1
backend be_$1
$splice
  server backend 127.0.0.1:$3
CFG
}

# HAProxy in the foreground with its sections read from stdin, on all
# threads or, with NBTHREAD=N, on N; its PID is ${PIDS[-1]}:
#   start_haproxy < <(haproxy_pair plain 8000 9000)
start_haproxy() {
  {
    printf 'global\n  maxconn 4000\n'
    if [ -n "${NBTHREAD:-}" ]; then printf '  nbthread %s\n' "$NBTHREAD"; fi
    printf 'defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n'
    cat
  } > "$WORK/haproxy.cfg"
  haproxy -db -f "$WORK/haproxy.cfg" >/dev/null 2>&1 & PIDS+=($!)
}

# nginx with its stream module, one worker, the body of its `stream { }`
# block read from stdin; its master's PID is ${PIDS[-1]} (the worker, which
# does the work, is that PID's child):   start_nginx_with <<CFG ... CFG
start_nginx_with() {
  {
    cat <<CFG
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
stream {
CFG
    cat
    echo '}'
  } > "$WORK/nginx.conf"
  nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & PIDS+=($!)
}

# nginx's stream proxy, one worker: start_nginx_stream PORT BACKEND_PORT
start_nginx_stream() {
  start_nginx_with <<CFG
  server { listen 127.0.0.1:$1; proxy_pass 127.0.0.1:$2; }
CFG
}

have_nginx_stream() { command -v nginx >/dev/null && [ -e /usr/lib/nginx/modules/ngx_stream_module.so ]; }
