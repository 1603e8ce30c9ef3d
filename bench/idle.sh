#!/usr/bin/env bash
# Memory per idle client: tcpmuxd's RSS with N connections that never send a
# name, against its RSS at rest.   bench/idle.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
PORT=${PORT:-27200}
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
ulimit -n "$(ulimit -Hn)"  # as high as allowed; each side needs N descriptors
WORK=$(mktemp -d)
printf 'listen = ["127.0.0.1:%s"]\nnegotiation_timeout = "60s"\nmax_connections = %s\n' "$PORT" $((N + 100)) > "$WORK/t.toml"
RUST_LOG=warn target/release/tcpmuxd --config "$WORK/t.toml" & DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 0.5
rss() { awk '/VmRSS/ {print $2}' "/proc/$DAEMON/status"; }
BEFORE=$(rss)
target/release/tcpmux-bench idle --connect 127.0.0.1:$PORT --connections "$N" --hold 3 &
BENCH=$!
sleep 2
DURING=$(rss)
FDS=$(ls "/proc/$DAEMON/fd" | wc -l)
wait $BENCH
echo "idle clients: $N, daemon fds: $FDS, RSS at rest: $BEFORE KiB, with clients: $DURING KiB, per client: $(( (DURING - BEFORE) * 1024 / N )) bytes"
