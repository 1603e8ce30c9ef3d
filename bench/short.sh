#!/usr/bin/env bash
# Short connections per second (connect, name, whole answer, close) in one run:
# tcpmuxd's built-in daytime and an exec'd program, against xinetd's TCPMUX
# serving the same program. Needs xinetd (apt-get install xinetd).
#   bench/short.sh [SECONDS] [CLIENTS]
set -euo pipefail
# Ports sit below the ephemeral range (32768+), where a client retrying a dead
# port can connect to itself and keep the port busy.
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-5}
CLIENTS=${2:-8}
BASE=${BASE_PORT:-27400}
MUX=$BASE XI=$((BASE + 1))
command -v xinetd >/dev/null || { echo "bench/short.sh: xinetd is not installed" >&2; exit 1; }
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
WORK=$(mktemp -d)
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
# The program both inetds run: one short line, like daytime.
cat > "$WORK/when" <<'SH'
#!/bin/sh
exec /bin/date -u
SH
chmod +x "$WORK/when"
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
[service.when]
exec = ["$WORK/when"]
CFG
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/tcpmuxd.toml" & PIDS+=($!)
# xinetd: its internal tcpmux dispatcher on an unlisted port, and the program as
# a TCPMUXPLUS service (xinetd sends the '+', as tcpmuxd's reply = "server").
cat > "$WORK/xinetd.conf" <<CFG
defaults
{
    instances = UNLIMITED
    cps = 100000 1
    log_type = FILE $WORK/xinetd.log
}
service tcpmux
{
    type = INTERNAL UNLISTED
    id = tcpmux-server
    socket_type = stream
    protocol = tcp
    port = $XI
    bind = 127.0.0.1
    wait = no
    user = root
}
service when
{
    type = TCPMUXPLUS UNLISTED
    socket_type = stream
    protocol = tcp
    wait = no
    user = root
    server = $WORK/when
}
CFG
xinetd -dontfork -f "$WORK/xinetd.conf" -pidfile "$WORK/xinetd.pid" >/dev/null 2>&1 & PIDS+=($!)
sleep 1
B=target/release/tcpmux-bench
echo "# $(nproc) cores, $CLIENTS clients, $SECONDS_EACH s each"
{
  $B short --connect 127.0.0.1:$MUX --service daytime --connections "$CLIENTS" --duration "$SECONDS_EACH" --label tcpmuxd-builtin --json
  $B short --connect 127.0.0.1:$MUX --service when --connections "$CLIENTS" --duration "$SECONDS_EACH" --label tcpmuxd-exec --json
  probe=$(exec 3<>/dev/tcp/127.0.0.1/$XI; printf 'when\r\n' >&3; head -c 40 <&3 | tr -d '\r\n\0' || true)
  if [[ $probe == +* ]]; then
    $B short --connect 127.0.0.1:$XI --service when --connections "$CLIENTS" --duration "$SECONDS_EACH" --label xinetd-exec --json
  else
    echo "xinetd: not measured; its tcpmux answered: ${probe:-nothing}" >&2
  fi
} > "$WORK/short.json"
python3 - "$WORK/short.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {r["label"]: r["per_second"] for r in rows}
ref = base.get("xinetd-exec")
print("| target | connections/s | p50 us | p99 us | p99.9 us | failed | vs xinetd |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    ratio = f"{r['per_second']/ref:.1f}x" if ref else "-"
    print(f"| {r['label']} | {r['per_second']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['p999_us']:.0f} | {r['failed']} | {ratio} |")
PY
