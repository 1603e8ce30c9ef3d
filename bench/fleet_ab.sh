#!/usr/bin/env bash
# Does a fleet cost a connection anything? Short connections to the built-in
# daytime through one tcpmuxd binary run twice, alone and with `cluster`
# (a one-member etcd on loopback, the membership refreshed, a watch open),
# rounds alternating, each row with the daemon's CPU per connection. The
# connection path never reads etcd, so the rows should differ by noise only.
#   bench/fleet_ab.sh                ROUNDS=4 SECS=4 CLIENTS=8 (defaults)
# Needs etcd (etcd-server). Loopback only; every process it starts is
# stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p tcpmux-bench -p tcpmuxd
. bench/lib.sh
command -v etcd >/dev/null || { echo "bench/fleet_ab.sh needs etcd (etcd-server)" >&2; exit 2; }
DAEMON=target/release/tcpmuxd BENCH=target/release/tcpmux-bench
CLIENTS=${CLIENTS:-8} SECS=${SECS:-4}
BASE=${BASE_PORT:-27960}
ETCD_CLIENT=$BASE ETCD_PEER=$((BASE + 1)) ALONE=$((BASE + 2)) FLEET=$((BASE + 3))
etcd --name m0 --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "m0=http://127.0.0.1:$ETCD_PEER" --log-level error >/dev/null 2>&1 & PIDS+=($!)
wait_port $ETCD_CLIENT
head -c 32 /dev/urandom > "$WORK/cluster.key"
chmod 600 "$WORK/cluster.key"
printf 'listen = ["127.0.0.1:%s"]\n' $ALONE > "$WORK/alone.toml"
printf 'listen = ["127.0.0.1:%s"]\ncluster = { etcd = ["http://127.0.0.1:%s"], node = "bench", secret = "%s" }\n' \
  $FLEET $ETCD_CLIENT "$WORK/cluster.key" > "$WORK/fleet.toml"
RUST_LOG=${LOG:-warn} $DAEMON --config "$WORK/alone.toml" 2>/dev/null & PIDS+=($!); ALONE_PID=$!
RUST_LOG=${LOG:-warn} $DAEMON --config "$WORK/fleet.toml" 2>/dev/null & PIDS+=($!); FLEET_PID=$!
wait_port $ALONE; wait_port $FLEET
echo "# $(nproc) cores, $(uname -r); daytime, $CLIENTS clients, $SECS s per row"
# Which goes first alternates, so that a drift in the machine is not read
# as a difference.
for round in $(seq "${ROUNDS:-4}"); do
  if [ $((round % 2)) = 1 ]; then
    short_with_cpu $ALONE $ALONE_PID daytime "round $round, alone"
    short_with_cpu $FLEET $FLEET_PID daytime "round $round, with cluster"
  else
    short_with_cpu $FLEET $FLEET_PID daytime "round $round, with cluster"
    short_with_cpu $ALONE $ALONE_PID daytime "round $round, alone"
  fi
done
