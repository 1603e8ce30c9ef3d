#!/usr/bin/env bash
# Cost curves (Performance IV, item 4): how tcpmuxd's costs grow with the size
# of its work. Four sweeps, each size on a fresh daemon:
#   services: 10, 1,000, 100,000 configured names: --check-config and start
#     time, RSS, connections/s and CPU per connection for a name found and one
#     refused, and a reload under load (its time, and clients refused meanwhile);
#   SNI names: 10, 1,000, 100,000 `sni` entries (half exact, half wildcard)
#     on a detecting listener, passed through to a backend: connections/s and
#     CPU per connection for an exact and a wildcard name;
#   live sessions: 1,000, 10,000, 100,000 idle echo sessions: RSS per session,
#     `tcpmux admin show sessions`, /status.json and `stats` latency, and the
#     short-connection rate of the other clients meanwhile;
#   pool members: 10, 1,000 (listed, each `balance`; and from SRV records
#     served by dnsmasq): connections/s and CPU per connection, and the
#     daemon's CPU per second for health checks every second on each member.
# Prints markdown tables, and writes scale.svg (cost per connection at each
# size against the smallest, one line per workload) to OUT (default
# bench/results). As root (descriptors for 100,000 sessions), about 6 minutes.
#   bench/scale.sh [SECONDS] [LARGEST_SESSIONS]
# SECTIONS="services sni sessions pools" (the default) picks the sweeps;
# TCPMUXD_BIN (default target/release/tcpmuxd) runs another build, for a
# before/after in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
SESSIONS_MAX=${2:-100000}
OUT=${OUT:-bench/results}
CLIENTS=4
SECTIONS=${SECTIONS:-services sni sessions pools}
section() { [[ " $SECTIONS " == *" $1 "* ]]; }
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench -p tcpmux-cli
. bench/lib.sh
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
BENCH=target/release/tcpmux-bench
DAEMON=${TCPMUXD_BIN:-target/release/tcpmuxd}
BASE=${BASE_PORT:-27600}
PORT=$BASE SRC=$((BASE + 10)) METRICS=$((BASE + 5)) DNS=$((BASE + 6)) POOL=$((BASE + 2000))
CURVES="$WORK/curves.tsv"   # workload size us-per-connection
: > "$CURVES"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# start_daemon CONFIG: starts tcpmuxd (reload lines logged), sets DPID and
# START_MS (until the port answers).
start_daemon() {
  local t0; t0=$(now_ms)
  RUST_LOG=warn,tcpmuxd::server=info $DAEMON --config "$1" 2> "$WORK/daemon.log" & DPID=$!
  PIDS+=("$DPID")
  wait_port "$PORT"
  START_MS=$(( $(now_ms) - t0 ))
}
# rate WORKLOAD SIZE COMMAND...: runs a `short` command with the daemon's
# CPU per connection; prints "rate/s, N us" and records the curve point.
rate() {
  local workload=$1 size=$2 line; shift 2
  line=$(with_cpu "$DPID" "$@")
  local per_s us
  per_s=$(sed -E 's/^[^:]*: ([0-9]+) .*/\1/' <<<"$line")
  us=$(sed -E 's/.*server CPU ([0-9]+) us.*/\1/' <<<"$line")
  echo "$workload	$size	$us" >> "$CURVES"
  echo "$per_s/s, $us us"
}
short() { $BENCH short --connect "127.0.0.1:$PORT" --connections $CLIENTS --duration "$SECS" "$@"; }

echo "# $(date -u +%F), $(nproc) cores, $(uname -r); $SECS s per row, $CLIENTS clients"

# --- 1. Services -------------------------------------------------------------
services_config() { # N
  printf 'listen = ["127.0.0.1:%s"]\n' "$PORT"
  seq 1 "$1" | awk '{ printf "[service.s%d]\nbuiltin = \"daytime\"\n", $1 }'
}
if section services; then
echo; echo "## Services: N configured names (builtin daytime each)"
echo; echo "| services | --check-config | start | RSS | name found | name refused | reload under load | refused during it |"
echo "|---|---|---|---|---|---|---|---|"
for n in 10 1000 100000; do
  services_config "$n" > "$WORK/s.toml"
  t0=$(now_ms); $DAEMON --check-config "$WORK/s.toml" > /dev/null; check=$(( $(now_ms) - t0 ))
  start_daemon "$WORK/s.toml"
  rss=$(rss_kib "$DPID")
  found=$(rate "service found" "$n" short --service "s$((n / 2 + 1))" --label found)
  refused=$(rate "service refused" "$n" short --service nosuch --refused --label refused)
  # A reload while clients keep connecting: none may be refused.
  short --service "s$((n / 2 + 1))" --label during > "$WORK/during.out" & load=$!
  sleep 0.5
  t0=$(now_ms); kill -HUP "$DPID"
  until grep -q "configuration reloaded" "$WORK/daemon.log"; do sleep 0.01; done
  reload="$(( $(now_ms) - t0 )) ms ($(grep -o 'ms=[0-9]*' "$WORK/daemon.log" | tail -1 | cut -d= -f2) ms in the daemon)"
  wait "$load"
  failed=$(sed -E 's/.*, ([0-9]+) failed.*/\1/' "$WORK/during.out")
  echo "| $n | $check ms | $START_MS ms | $((rss / 1024)) MiB | $found | $refused | $reload | $failed |"
  stop_pid "$DPID"
done
fi

# --- 2. SNI names --------------------------------------------------------------
# N names over min(N, 1000) passthrough services: even i exact hI.scale.test,
# odd i a wildcard *.wI.scale.test.
sni_config() { # N
  local services=$(( $1 < 1000 ? $1 : 1000 ))
  printf 'listen = [{ address = "127.0.0.1:%s", detect = true }]\n' "$PORT"
  awk -v n="$1" -v k="$services" -v src="$SRC" 'BEGIN {
    for (i = 1; i <= n; i++) names[i % k] = names[i % k] sprintf("%s\"%s\"", (names[i % k] == "" ? "" : ", "), (i % 2 == 0 ? "h" i ".scale.test" : "*.w" i ".scale.test"))
    for (s = 0; s < k; s++) printf "[service.t%d]\nproxy = \"127.0.0.1:%s\"\nsni = [%s]\n", s, src, names[s]
  }'
}
if section sni; then
$BENCH source --listen "127.0.0.1:$SRC" --bytes 16 --tasks > /dev/null & PIDS+=($!)
wait_port "$SRC"
echo; echo "## SNI names: N \`sni\` entries on a detecting listener, passed through (16-byte answer)"
echo; echo "| sni names | start | exact name | wildcard name |"
echo "|---|---|---|---|"
for n in 10 1000 100000; do
  sni_config "$n" > "$WORK/sni.toml"
  start_daemon "$WORK/sni.toml"
  exact=$(rate "sni exact" "$n" short --probe "tls:h$(( (n / 2) & ~1 )).scale.test" --label exact)
  wild=$(rate "sni wildcard" "$n" short --probe "tls:x.w$(( (n / 2) | 1 )).scale.test" --label wildcard)
  echo "| $n | $START_MS ms | $exact | $wild |"
  stop_pid "$DPID"
done
fi

# --- 3. Live sessions ----------------------------------------------------------
# Idle echo sessions from 8 source addresses (127.0.1.1-8): one address has
# about 28,000 ephemeral ports toward one port.
sessions_config() {
  printf 'listen = ["127.0.0.1:%s"]\nmax_connections = 250000\nnegotiation_timeout = "600s"\n' "$PORT"
  printf 'admin_socket = "%s/admin.sock"\nmetrics_listen = "127.0.0.1:%s"\n' "$WORK" "$METRICS"
}
ms_of() { local t0; t0=$(now_ms); "$@" > /dev/null; echo "$(( $(now_ms) - t0 )) ms"; }
if section sessions; then
echo; echo "## Live sessions: N idle echo sessions held"
echo; echo "| sessions | RSS per session | show sessions | /status.json | stats | other clients meanwhile |"
echo "|---|---|---|---|---|---|"
sessions_config > "$WORK/live.toml"
# Each side needs a descriptor per session: the largest size is what this
# machine's hard limit allows (a container without CAP_SYS_RESOURCE may not
# raise it), said in the table.
largest=$(( $(ulimit -n) - 500 ))
[ "$largest" -lt "$SESSIONS_MAX" ] || largest=$SESSIONS_MAX
sizes=$(printf '%s\n' 1000 10000 "$largest" | awk -v max="$largest" '$1 <= max' | sort -nu)
for n in $sizes; do
  if [ "$n" = "$largest" ] && [ "$n" -lt "$SESSIONS_MAX" ]; then
    echo "| ($SESSIONS_MAX would need more descriptors than ulimit -n $(ulimit -n) allows here) | | | | | |"
  fi
  start_daemon "$WORK/live.toml"
  sleep 0.3
  before=$(rss_kib "$DPID")
  holders=()
  for h in 1 2 3 4 5 6 7 8; do
    $BENCH idle --connect "127.0.0.1:$PORT" --source "127.0.1.$h" --connections $(( (n + 7) / 8 )) --service echo \
      --hold 600 > "$WORK/idle$h.out" 2>&1 & holders+=($!); PIDS+=($!)
  done
  for h in 1 2 3 4 5 6 7 8; do
    for _ in $(seq 1800); do grep -q holding "$WORK/idle$h.out" && break; sleep 0.1; done
    grep -q holding "$WORK/idle$h.out" || { echo "idle clients never held: $(cat "$WORK/idle$h.out")" >&2; exit 1; }
  done
  sleep 1
  per=$(( ($(rss_kib "$DPID") - before) * 1024 / n ))
  show=$(ms_of target/release/tcpmux admin --socket "$WORK/admin.sock" show sessions)
  status="$(curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$METRICS/status.json" | awk '{ printf "%.1f", $1 * 1000 }') ms"
  stats=$($BENCH short --connect "127.0.0.1:$PORT" --service stats --connections 1 --duration 1 --label stats \
    | sed -E 's/.*latency p50 ([0-9]+) us, p99 ([0-9]+) us.*/p50 \1 us, p99 \2 us/')
  others=$(rate "short, N sessions held" "$n" short --service daytime --label others)
  echo "| $n | $per bytes | $show | $status | $stats | $others |"
  for h in "${holders[@]}"; do kill "$h" 2>/dev/null || true; done
  stop_pid "$DPID"
done
fi

# --- 4. Pool members -----------------------------------------------------------
# N members on consecutive ports of one backend process; listed, or from N
# SRV records served by dnsmasq.
if section pools; then
$BENCH source --listen "127.0.0.1:$POOL" --bytes 16 --ports 1000 > /dev/null & PIDS+=($!)
wait_port $((POOL + 999))
pool_config() { # N BALANCE [srv]
  printf 'listen = ["127.0.0.1:%s"]\nresolvers = ["127.0.0.1:%s"]\n[service.pool]\nbalance = "%s"\n' "$PORT" "$DNS" "$2"
  if [ "${3:-}" = srv ]; then echo 'proxy = "srv:_pool._tcp.scale.test"'
  else seq 0 $(( $1 - 1 )) | awk -v p="$POOL" 'BEGIN { printf "proxy = [" } { printf "%s\"127.0.0.1:%d\"", (NR > 1 ? ", " : ""), p + $1 } END { print "]" }'
  fi
}
start_dns() { # N: SRV records for N members
  # One target host, N ports: with a host per record dnsmasq's 50 KB answer
  # breaks (its compression pointers cannot reach past 16 KB).
  { echo "host-record=pool.scale.test,127.0.0.1"
    seq 0 $(( $1 - 1 )) | awk -v p="$POOL" '{ printf "srv-host=_pool._tcp.scale.test,pool.scale.test,%d,0,1\n", p + $1 }'
  } > "$WORK/dnsmasq.conf"
  dnsmasq --keep-in-foreground --no-resolv --no-hosts --port="$DNS" --listen-address=127.0.0.1 \
    --bind-interfaces --conf-file="$WORK/dnsmasq.conf" --pid-file= 2>/dev/null & DNSPID=$!
  PIDS+=("$DNSPID")
  # Up before the daemon asks: a first lookup that fails waits dns_min_ttl.
  for _ in $(seq 100); do
    dig +short +tries=1 +time=1 -p "$DNS" @127.0.0.1 SRV _pool._tcp.scale.test 2>/dev/null | grep -q . && return 0
    sleep 0.05
  done
  echo "dnsmasq never answered on $DNS" >&2; exit 1
}
echo; echo "## Pool members: N backends of one service (16-byte answer)"
echo; echo "| members | first | round-robin | least-connections | random-two | source | srv: (first) | health checks every 1 s |"
echo "|---|---|---|---|---|---|---|---|"
for n in 10 1000; do
  row="| $n"
  for balance in first round-robin least-connections random-two source; do
    pool_config "$n" "$balance" > "$WORK/pool.toml"
    start_daemon "$WORK/pool.toml"
    row="$row | $(rate "pool $balance" "$n" short --service pool --label "$balance")"
    stop_pid "$DPID"
  done
  if command -v dnsmasq > /dev/null; then
    start_dns "$n"
    pool_config "$n" first srv > "$WORK/pool.toml"
    start_daemon "$WORK/pool.toml"
    row="$row | $(rate "pool srv" "$n" short --service pool --label srv)"
    stop_pid "$DPID"; stop_pid "$DNSPID"
  else
    row="$row | (no dnsmasq)"
  fi
  { pool_config "$n" round-robin; echo 'health_check = { interval = "1s", timeout = "1s" }'; } > "$WORK/pool.toml"
  start_daemon "$WORK/pool.toml"
  sleep 2  # the first round of checks
  c0=$(cpu_ticks "$DPID"); sleep 5; c1=$(cpu_ticks "$DPID")
  row="$row | $(( (c1 - c0) * 1000 / $(getconf CLK_TCK) / 5 )) ms of CPU per second |"
  stop_pid "$DPID"
  echo "$row"
done
fi

# --- The plot ------------------------------------------------------------------
mkdir -p "$OUT"
awk -F'\t' '
  { key = $1; if (!(key in first)) { first[key] = $3; order[++k] = key }
    pts[key] = pts[key] sprintf("%s %s ", $2, ($3 > 0 && first[key] > 0) ? $3 / first[key] : 1) }
  END {
    w = 640; h = 360; l = 60; r = 200; t = 20; b = 40
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", w, h
    printf "<text x=\"%d\" y=\"14\">CPU per connection against the smallest size (1.0 = flat)</text>\n", l
    ymax = 2
    for (e = 1; e <= 5; e++) { x = l + (e - 1) / 4 * (w - l - r); printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">1e%d</text>\n", x, h - b + 15, e }
    for (y = 0; y <= ymax; y += 0.5) { py = h - b - y / ymax * (h - t - b); printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", l, w - r, py, py, l - 5, py + 4, y }
    split("#1b6ca8 #d1495b #66a182 #edae49 #00798c #8e6c8a #30638e #a05195 #444 #e07a5f #3d405b #81b29a", colors, " ")
    for (i = 1; i <= k; i++) {
      n = split(pts[order[i]], v, " "); path = ""
      for (j = 1; j < n; j += 2) { x = l + (log(v[j]) / log(10) - 1) / 4 * (w - l - r); y = v[j + 1] > ymax ? ymax : v[j + 1]
        path = path sprintf("%s%.1f,%.1f ", (j == 1 ? "M" : "L"), x, h - b - y / ymax * (h - t - b)) }
      printf "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", path, colors[(i - 1) % 12 + 1]
      printf "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", w - r + 8, t + 14 * i, colors[(i - 1) % 12 + 1], order[i]
    }
    print "</svg>"
  }' "$CURVES" > "$OUT/scale.svg"
echo; echo "Plot: $OUT/scale.svg"
