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
#   bench/harden.sh            # this tree's tcpmuxd
#   TCPMUXD=/path/to/other/tcpmuxd bench/harden.sh   # another build (e.g. an
#                                                    # older one), same tools
# Loopback only; every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE_PORT:-27600}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench -p tcpmux
. bench/lib.sh
DAEMON=${TCPMUXD:-target/release/tcpmuxd}
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
