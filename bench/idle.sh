#!/usr/bin/env bash
# Memory per idle client, five kinds: connections that never send a name
# (un-negotiated), echo sessions that named `echo`, got `+` and then send
# nothing (established), the same inside TLS on a `tls` listener (a full
# TLS 1.3 handshake each), and on a listener with `detect = true` clients that
# sent 3,000 bytes of a 16 KB ClientHello or 1,000 bytes of an HTTP head and
# stall. For each, a fresh tcpmuxd's RSS at rest, with N clients held, and
# after they have left. BEFORE=<older tcpmuxd binary> adds the same rows for
# it, in the same run.   bench/idle.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
PORT=${PORT:-27200}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
ulimit -n "$(ulimit -Hn)"  # as high as allowed; each side needs N descriptors
printf 'listen = ["127.0.0.1:%s"]\nnegotiation_timeout = "60s"\nmax_connections = %s\n' "$PORT" $((N + 100)) > "$WORK/t.toml"
printf 'listen = [{ address = "127.0.0.1:%s", detect = true }]\nnegotiation_timeout = "60s"\nmax_connections = %s\n' "$PORT" $((N + 100)) > "$WORK/detect.toml"
localhost_cert
printf 'listen = [{ address = "127.0.0.1:%s", tls = { cert = "%s", key = "%s" } }]\nnegotiation_timeout = "60s"\nmax_connections = %s\n' \
  "$PORT" "$WORK/cert.pem" "$WORK/key.pem" $((N + 100)) > "$WORK/tls.toml"
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
measure() { # measure LABEL BINARY CONFIG [tcpmux-bench idle ARGS...]
  local label=$1 binary=$2 config=$3; shift 3
  RUST_LOG=warn "$binary" --config "$WORK/$config.toml" 2>/dev/null & local daemon=$!
  PIDS+=("$daemon")
  wait_port "$PORT"
  sleep 0.3
  local before during after fds
  before=$(rss "$daemon")
  target/release/tcpmux-bench idle --connect "127.0.0.1:$PORT" --connections "$N" --hold 3 "$@" > "$WORK/bench.out" &
  local bench=$!
  for _ in $(seq 200); do grep -q holding "$WORK/bench.out" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  during=$(rss "$daemon"); fds=$(ls "/proc/$daemon/fd" | wc -l)
  wait $bench
  sleep 1
  after=$(rss "$daemon")
  printf '%-46s %6d fds  rest %7d KiB  held %7d KiB  after %7d KiB  %6d bytes each\n' \
    "$label" "$fds" "$before" "$during" "$after" $(( (during - before) * 1024 / N ))
  grep -h "still answered" "$WORK/bench.out" | sed 's/^/    /' || true
  stop_pid "$daemon"
}
echo "# $N idle clients per row; RSS of the daemon (VmRSS)"
row() { # row LABEL CONFIG [ARGS...]: this tree's daemon, then BEFORE's
  local label=$1; shift
  measure "tcpmuxd, $label" target/release/tcpmuxd "$@"
  if [ -n "${BEFORE:-}" ]; then measure "before, $label" "$BEFORE" "$@"; fi
}
row "un-negotiated" t
row "established echo" t --service echo
row "established echo over TLS" tls --service echo --tls-ca "$WORK/ca.pem"
row "detecting, 3,000 B of a ClientHello" detect --partial client-hello
row "detecting, 1,000 B of an HTTP head" detect --partial http-head
