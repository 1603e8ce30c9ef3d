#!/usr/bin/env bash
# The hardening figures (issue "Hardening II"), each measured on the daemon:
#   1. exec stderr: peak RSS growth while a program echoes 200 MiB with no newline
#      to stderr;
#   5. control-socket flood: descriptors held while uid 65534 opens 1,500
#      silent connections to the handoff socket (daemon limited to 1,024),
#      and whether TCP echo is served meanwhile (needs root for setpriv);
#   8. proxy loop: descriptors held after one client sends 'loop' 3,000 times
#      to a proxy pointed at the daemon's own --listen address;
#  10. rate limiter: the daemon's CPU time per connection for 40,000 short
#      connections from 20,000 source addresses, with connection_rate_per_ip
#      = 1 and without, and the ratio.
# From the issue "One packet must never stop the daemon":
#  p4. memory per stalled client on a detect = true listener: 2,000 clients
#      that sent 3,000 bytes of a 16 KB ClientHello, or 1,000 bytes of an HTTP
#      head, and stall;
#  p5. a plain echo client's latency (p99) beside a tls listener: alone,
#      during a flood of full handshakes (8 clients, tls-short), and during a
#      burst of 2,000 ClientHellos at once; with the handshake rate. The echo
#      client runs at SCHED_FIFO when it may (root), so that what it measures
#      is the daemon, not its wait for the load generator's core (NO_FIFO=1:
#      at the load's priority, as before).
#   bench/harden.sh            # this tree's tcpmuxd
#   SECTIONS="p4 p5" bench/harden.sh                 # some sections only
#   TCPMUXD=/path/to/other/tcpmuxd bench/harden.sh   # another build (e.g. an
#                                                    # older one), same tools
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE_PORT:-27600}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench -p tcpmux-cli
. bench/lib.sh
DAEMON=${TCPMUXD:-target/release/tcpmuxd}
SECTIONS=${SECTIONS:-1 5 8 10 p4 p5}
want() { case " $SECTIONS " in *" $1 "*) return 0;; *) return 1;; esac; }
ulimit -n "$(ulimit -Hn)"  # p4 and p5 hold 2,000 clients
BENCH=target/release/tcpmux-bench
echo "# $(nproc) cores, $(uname -r), daemon: $DAEMON"

# Peak resident memory: a buffer freed by the time we look still counts.
peak_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
# utime + stime of a process, in clock ticks.
start() { # start PORT CONFIG [ARGS...]: the daemon, its PID in $DPID
  local port=$1 config=$2; shift 2
  printf '%s' "$config" > "$WORK/$port.toml"
  RUST_LOG=warn ${WRAP:-} "$DAEMON" --config "$WORK/$port.toml" --listen "127.0.0.1:$port" "$@" \
    2> "$WORK/$port.log" & DPID=$!; PIDS+=($DPID)
  wait_port "$port"
}
start_file() { # start_file PORT CONFIG: the daemon on the config's own listen
  printf '%s' "$2" > "$WORK/$1.toml"
  RUST_LOG=warn ${DAEMON_WRAP:-} "$DAEMON" --config "$WORK/$1.toml" 2> "$WORK/$1.log" & DPID=$!; PIDS+=($DPID)
  wait_port "$1"
}

if want 1; then
# 1. exec stderr.
P=$BASE
start $P $'[service.spill]\nexec = ["/bin/sh", "-c", "cat >&2"]\n'
echo warm | target/release/tcpmux --port $P spill >/dev/null
before=$(peak_kib $DPID)
head -c $((200 << 20)) /dev/zero | target/release/tcpmux --port $P spill >/dev/null
sleep 0.5
after=$(peak_kib $DPID)
echo "1. exec stderr, 200 MiB without a newline: peak RSS $before -> $after KiB (grew $(( (after - before) / 1024 )) MiB)"
kill $DPID
fi

if want 5; then
# 5. control-socket flood.
P=$((BASE + 1))
chmod 755 "$WORK"  # uid 65534 must reach the socket
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && command -v prlimit >/dev/null; then
  WRAP="prlimit --nofile=1024:1024" start $P \
    "handoff_socket = \"$WORK/handoff.sock\""$'\n[service.app]\nhandoff = { uid = [0] }\n'
  idle_fds=$(fds $DPID)
  prlimit --nofile=4096:4096 setpriv --reuid=65534 --regid=65534 --clear-groups \
    $BENCH idle-unix --path "$WORK/handoff.sock" --connections 1500 --hold 3 > "$WORK/flood.out" &
  FLOOD=$!; PIDS+=($FLOOD)
  sleep 1
  during=$(fds $DPID)
  echo_ok=$( (printf 'ping\n' | timeout 5 target/release/tcpmux --port $P echo) 2>/dev/null || true)
  wait $FLOOD || true
  echo "5. control flood, 1,500 from uid 65534: descriptors $idle_fds -> $during of 1024; TCP echo meanwhile: ${echo_ok:-FAILED}; $(cat "$WORK/flood.out")"
  kill $DPID
else
  echo "5. control flood: skipped (needs root, setpriv and prlimit)"
fi
fi

if want 8; then
# 8. proxy loop, through --listen (the file cannot know the address).
P=$((BASE + 2))
start $P "[service.loop]"$'\n'"proxy = \"127.0.0.1:$P\""$'\n'
idle_fds=$(fds $DPID)
exec 3<>"/dev/tcp/127.0.0.1/$P"
for _ in $(seq 3000); do printf 'loop\r\n'; done >&3
sleep 1
during=$(fds $DPID)
exec 3>&-
echo "8. proxy loop, one client sending 'loop' 3,000 times: descriptors $idle_fds -> $during"
kill $DPID
fi

if want 10; then
# 10. rate limiter with many sources.
for rate in none 1; do
  P=$((BASE + 3))
  config=""
  [ "$rate" = none ] || config="connection_rate_per_ip = $rate"$'\n'
  start $P "$config"
  t0=$(cpu_ticks $DPID)
  line=$($BENCH sources --connect 127.0.0.1:$P --sources 20000 --connections 40000)
  t1=$(cpu_ticks $DPID)
  us=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / 40000 }')
  eval "US_$rate=$us"
  echo "10. rate limit $rate: $us us of daemon CPU per connection ($line)"
  kill $DPID; wait $DPID 2>/dev/null || true
done
awk -v a="$US_1" -v b="$US_none" 'BEGIN { printf "10. ratio with/without the rate limit: %.2fx\n", a / b }'
fi

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

if want p4; then
# p4. stalled clients on a detecting listener.
P=$((BASE + 4))
for partial in client-hello http-head; do
  start_file $P $'listen = [{ address = "127.0.0.1:'$P$'", detect = true }]\nnegotiation_timeout = "60s"\nmax_connections = 5000\n'
  before=$(rss $DPID)
  $BENCH idle --connect "127.0.0.1:$P" --connections 2000 --hold 2 --partial $partial > "$WORK/p4.out" &
  IDLE=$!
  for _ in $(seq 200); do grep -q holding "$WORK/p4.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  held=$(rss $DPID)
  wait $IDLE
  echo "p4. 2,000 stalled after a partial $partial: RSS $before -> $held KiB, $(( (held - before) * 1024 / 2000 )) bytes each"
  stop_pid $DPID
done
fi

if want p5; then
# p5. TLS handshakes beside a plain echo client. The daemon gets the first
# core and the clients the others, so the daemon's threads compete with each
# other, not with the load (on one core, the daemon has that core alone);
# NO_PIN=1 leaves everything free on every core.
CORES=$(nproc)
if [ "$CORES" -gt 1 ] && [ -z "${NO_PIN:-}" ]; then
  DAEMON_WRAP="taskset -c 0"; CLIENT_WRAP="taskset -c 1-$((CORES - 1))"
else
  DAEMON_WRAP=""; CLIENT_WRAP=""
fi
P=$((BASE + 5)) T=$((BASE + 6))
localhost_cert
start_file $P "listen = [\"127.0.0.1:$P\", { address = \"127.0.0.1:$T\", tls = { cert = \"$WORK/cert.pem\", key = \"$WORK/key.pem\" } }]"$'\nmax_connections = 5000\n'
# The load generators saturate the clients' core: at their priority, the
# echo client's own wait for that core (about 2 ms at p99 during the flood)
# would be counted as the daemon's.
PROBE_WRAP=""
if [ -z "${NO_FIFO:-}" ] && chrt -f 10 true 2>/dev/null; then PROBE_WRAP="chrt -f 10"; fi
echo "p5. echo client: ${PROBE_WRAP:-at the same priority as the load}"
# An open loop, one request every 5 ms: a stall delays every request due in it.
probe() { $CLIENT_WRAP $PROBE_WRAP $BENCH rpc --connect "127.0.0.1:$P" --service echo --size 64 --interval-ms 5 --duration "$1" --label "$2"; }
echo "p5. $(probe 3 'echo alone')"
$CLIENT_WRAP $BENCH tls-short --connect "127.0.0.1:$T" --ca "$WORK/ca.pem" --connections 8 --duration 6 --service daytime --label "handshake flood" > "$WORK/flood.out" &
FLOOD=$!
sleep 1
echo "p5. $(probe 4 'echo during the handshake flood')"
wait $FLOOD
echo "p5. $(cat "$WORK/flood.out")"
$CLIENT_WRAP $BENCH tls-burst --connect "127.0.0.1:$T" --ca "$WORK/ca.pem" --connections 2000 > "$WORK/burst.out" &
BURST=$!
echo "p5. $(probe 2 'echo during a burst of 2,000 ClientHellos')"
wait $BURST
echo "p5. burst: $(cat "$WORK/burst.out")"
stop_pid $DPID
DAEMON_WRAP=""
fi
