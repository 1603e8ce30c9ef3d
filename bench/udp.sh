#!/usr/bin/env bash
# Datagrams through a UDP front (issue "One port for datagrams too"):
# tcpmuxd (a UDP listener whose udp_default service has proxy_udp), nginx's
# stream module (`listen ... udp`, one worker) and sslh's UDP mode
# (sslh-select and sslh-ev), all in front of the same `tcpmux-bench
# udp-echo` backend; and bench/c/udp_relay.c ("c-floor"), tcpmuxd's design
# (a connected socket per flow, recvmmsg and sendmmsg by 16) as the least C
# code, the floor of that design; and bench/c/udp_uring.c ("c-uring"), the
# same relay on io_uring (multishot receives into a provided-buffer ring, one
# io_uring_enter a turn), what another design could reach (needs
# liburing-dev). Rows per round, the fronts alternating:
#   rr:   FLOWS flows, one 64-byte datagram in flight each (request/response)
#   bulk: one flow, 32 datagrams of 1,200 bytes in flight (a stream)
# each with the front's CPU (user + system, all threads) per datagram it
# relayed (a request and its reply are two). Then memory per idle flow:
# IDLE flows that sent one datagram each and were answered, held, against
# the front's RSS before.
#   bench/udp.sh [SECONDS] [ROUNDS] [FLOWS] [IDLE]
# TCPMUXD_BIN (default target/release/tcpmuxd) runs another build, for a
# before/after in one run. LISTEN_IP=0.0.0.0 binds every front to the
# wildcard address (a deployment's usual `0.0.0.0:443`), where each reply
# must leave from the address its client sent to; clients still send to
# 127.0.0.1.
# sslh: Debian 12's sslh (1.20) has no UDP; UDP came in 2.0. Point SSLH_DIR
# at a build of sslh >= 2.0 (its sslh-select and sslh-ev; `./configure &&
# make sslh-select sslh-ev` in its source needs libconfig-dev, libpcre2-dev,
# libev-dev, libcap-dev, libwrap0-dev, libbsd-dev); without one, its rows are
# left out and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
ROUNDS=${2:-3}
FLOWS=${3:-64}
IDLE=${4:-5000}
BASE=${BASE_PORT:-27400}
LISTEN_IP=${LISTEN_IP:-127.0.0.1}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
ulimit -n "$(ulimit -Hn)"
BENCH=target/release/tcpmux-bench
ECHO=$BASE TCPMUXD=$((BASE + 1)) NGINX=$((BASE + 2)) SELECT=$((BASE + 3)) EV=$((BASE + 4)) FLOOR=$((BASE + 5)) URING=$((BASE + 6))
cc -O2 -o "$WORK/udp_relay" bench/c/udp_relay.c
HAVE_URING=
cc -O2 -o "$WORK/udp_uring" bench/c/udp_uring.c -luring 2>/dev/null && HAVE_URING=1

$BENCH udp-echo --listen 127.0.0.1:$ECHO & PIDS+=($!)

tcpmuxd_config() { # PORT
  printf 'listen = [{ address = "%s:%s", udp = true, tcp = false, udp_default = "bench" }]\nmax_udp_flows = %s\n[service.bench]\nproxy_udp = "127.0.0.1:%s"\n' \
    "$LISTEN_IP" "$1" $((IDLE + 1000)) $ECHO > "$WORK/tcpmuxd.toml"
}
nginx_config() { # PORT
  cat > "$WORK/nginx.conf" <<CFG
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
master_process off;  # one process: its CPU is all of nginx's
worker_processes 1;
worker_rlimit_nofile $((2 * IDLE + 1000));
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections $((2 * IDLE + 1000)); }
stream {
  server {
    listen $LISTEN_IP:$1 udp;
    proxy_pass 127.0.0.1:$ECHO;
    proxy_timeout 60s;
  }
}
CFG
}
sslh_config() { # PORT
  cat > "$WORK/sslh-$1.cfg" <<CFG
foreground: true;
udp_max_connections: $((IDLE + 1000));
listen: ( { host: "$LISTEN_IP"; port: "$1"; is_udp: true; } );
protocols: ( { name: "anyprot"; host: "127.0.0.1"; port: "$ECHO"; is_udp: true; } );
CFG
}

# start FRONT: starts it, sets PID; every front's port answers a datagram.
start() {
  case $1 in
    tcpmuxd) tcpmuxd_config $TCPMUXD
      RUST_LOG=warn "${TCPMUXD_BIN:-target/release/tcpmuxd}" --config "$WORK/tcpmuxd.toml" 2>"$WORK/tcpmuxd.err" & PID=$! ;;
    nginx) nginx_config $NGINX
      nginx -p "$WORK" -c "$WORK/nginx.conf" -g 'daemon off;' & PID=$! ;;
    c-floor) "$WORK/udp_relay" $FLOOR $ECHO & PID=$! ;;
    c-uring) "$WORK/udp_uring" $URING $ECHO & PID=$! ;;
    sslh-select|sslh-ev) local port=$SELECT; [ "$1" = sslh-ev ] && port=$EV
      sslh_config $port
      "$SSLH_DIR/$1" -F"$WORK/sslh-$port.cfg" >/dev/null 2>&1 & PID=$! ;;
  esac
  PIDS+=("$PID")
  $BENCH udp --connect "127.0.0.1:$(port "$1")" --flows 1 --duration 0.3 --label probe >/dev/null \
    || { echo "$1 never answered on udp/$(port "$1")" >&2; exit 1; }
}
port() { case $1 in tcpmuxd) echo $TCPMUXD ;; c-floor) echo $FLOOR ;; c-uring) echo $URING ;; nginx) echo $NGINX ;; sslh-select) echo $SELECT ;; sslh-ev) echo $EV ;; esac; }

FRONTS="tcpmuxd"
# The C relays bind 127.0.0.1 only: no wildcard rows for them.
if [ "$LISTEN_IP" = 127.0.0.1 ]; then
  FRONTS="$FRONTS c-floor"
  if [ -n "$HAVE_URING" ]; then FRONTS="$FRONTS c-uring"; else echo "# no c-uring rows: bench/c/udp_uring.c needs liburing-dev"; fi
fi
if have_nginx_stream; then FRONTS="$FRONTS nginx"; else echo "# nginx with its stream module is not installed: no nginx rows"; fi
if [ -n "${SSLH_DIR:-}" ] && [ -x "$SSLH_DIR/sslh-select" ]; then
  FRONTS="$FRONTS sslh-select"
  [ -x "$SSLH_DIR/sslh-ev" ] && FRONTS="$FRONTS sslh-ev"
else
  echo "# SSLH_DIR does not hold an sslh >= 2.0 build: no sslh rows (see the head of this script)"
fi
declare -A PID_OF
for front in $FRONTS; do start "$front"; PID_OF[$front]=$PID; done

echo "# $(nproc) cores, $(uname -r), $SECS s per row; the echo backend is tcpmux-bench udp-echo"
# One row with the front's CPU per relayed datagram appended:
#   row FRONT LABEL udp-ARGS...
row() {
  local front=$1 label=$2 pid=${PID_OF[$1]} before after line n
  shift 2
  before=$(cpu_ticks "$pid")
  # A front that fails a row (no reply at all) gets a row saying so; the run goes on.
  line=$($BENCH udp --connect "127.0.0.1:$(port "$front")" --duration "$SECS" --label "$label, $front" "$@" 2>&1) \
    || { echo "$label, $front: FAILED: $line"; return 0; }
  after=$(cpu_ticks "$pid")
  n=$(sed -E 's/.*\(([0-9]+) in .*/\1/' <<<"$line")
  echo "$line, front CPU $(( (after - before) * 1000000000 / $(getconf CLK_TCK) / (2 * (n > 0 ? n : 1)) )) ns/datagram"
}
for round in $(seq "$ROUNDS"); do
  for front in $FRONTS; do row "$front" "round $round, rr $FLOWS flows" --flows "$FLOWS" --size 64; done
  for front in $FRONTS; do row "$front" "round $round, bulk 1 flow x 32" --flows 1 --window 32 --size 1200; done
done

echo "## memory per idle flow: $IDLE flows, one datagram each, answered, held"
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
for front in $FRONTS; do
  [ "$front" = sslh-select ] && { echo "sslh-select: left out (select(2) holds at most 1,024 descriptors)"; continue; }
  stop_pid "${PID_OF[$front]}"; start "$front"; PID_OF[$front]=$PID
  before=$(rss "$PID")
  $BENCH udp-idle --connect "127.0.0.1:$(port "$front")" --flows "$IDLE" --hold 3 > "$WORK/idle.out" & bench=$!
  for _ in $(seq 300); do grep -q holding "$WORK/idle.out" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  during=$(rss "$PID"); fds=$(ls "/proc/$PID/fd" | wc -l)
  wait $bench || { echo "$front: udp-idle failed" >&2; cat "$WORK/idle.out" >&2; exit 1; }
  printf '%-12s %6d fds  rest %7d KiB  held %7d KiB  %6d bytes per flow  (%s)\n' "$front" "$fds" "$before" "$during" \
    $(( (during - before) * 1024 / IDLE )) "$(sed -E 's/^holding ([0-9]+ flows \([0-9]+ answered\)).*/\1/' "$WORK/idle.out")"
done
