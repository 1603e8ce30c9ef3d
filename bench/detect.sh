#!/usr/bin/env bash
# Protocol detection against sslh, the tool people use for it, in one run:
# new connections per second for clients whose first bytes are an SSH banner,
# a TLS ClientHello (routed by SNI), an OpenVPN (TCP) hard reset, an XMPP
# stream header or a SOCKS5 greeting, and one-connection throughput for SSH
# and TLS, on the same backends (tcpmux-bench source: N bytes, then EOF).
#   bench/detect.sh [SECONDS] [CLIENTS] [BYTES]
# Needs sslh (Debian's package: sslh-fork as `sslh`, and sslh-select).
# Loopback only; every process started here is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-5}
CLIENTS=${2:-8}
BYTES=${3:-2000000000}
BASE=${BASE_PORT:-27800}
SMALL=$BASE BIG=$((BASE + 1)) FRONT=$((BASE + 2))
command -v sslh >/dev/null || { echo "bench/detect.sh: sslh is not installed (apt-get install sslh)" >&2; exit 1; }
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh
B=target/release/tcpmux-bench
echo "# $(nproc) cores, $(uname -r), $(sslh -V 2>&1 | head -n 1), $CLIENTS clients, $SECONDS_EACH s each"

$B source --listen 127.0.0.1:$SMALL --bytes 64 --tasks >/dev/null & PIDS+=($!)
$B source --listen 127.0.0.1:$BIG --bytes "$BYTES" >/dev/null & PIDS+=($!)
wait_port $SMALL; wait_port $BIG

start_front() { # start_front KIND BACKEND_PORT: the front on $FRONT, PID in $FPID
  case $1 in
    tcpmuxd)
      cat > "$WORK/t.toml" <<CFG
listen = [{ address = "127.0.0.1:$FRONT", detect = true, ssh = "ssh", openvpn = "ssh", xmpp = "ssh", socks = "ssh" }]
[service.ssh]
proxy = "127.0.0.1:$2"
[service.tls]
proxy = "127.0.0.1:$2"
sni = ["bench.example"]
CFG
      RUST_LOG=warn target/release/tcpmuxd --config "$WORK/t.toml" & FPID=$! ;;
    sslh-*) bin=$1; [ "$1" = sslh-fork ] && bin=sslh  # Debian's sslh is sslh-fork
      $bin -f -p 127.0.0.1:$FRONT --ssh 127.0.0.1:$2 --tls 127.0.0.1:$2 \
        --openvpn 127.0.0.1:$2 --xmpp 127.0.0.1:$2 --socks5 127.0.0.1:$2 >/dev/null 2>&1 & FPID=$! ;;
  esac
  PIDS+=($FPID)
  wait_port $FRONT
}
stop_front() { kill $FPID; wait $FPID 2>/dev/null || true; }

declare -A RATE MBS
FRONTS="tcpmuxd sslh-fork"
command -v sslh-select >/dev/null && FRONTS="$FRONTS sslh-select"
for front in $FRONTS; do
  start_front $front $SMALL
  for probe in ssh tls:bench.example openvpn xmpp socks5; do
    line=$($B short --connect 127.0.0.1:$FRONT --probe $probe --connections $CLIENTS --duration "$SECONDS_EACH" --label "$front ${probe%%:*}")
    echo "$line"
    RATE[$front,${probe%%:*}]=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "connections/s") print $(i-1) }' <<< "$line")
  done
  stop_front
  start_front $front $BIG
  for probe in ssh tls:bench.example; do
    line=$($B bulk --connect 127.0.0.1:$FRONT --probe $probe --expect "$BYTES" --repeat 3 --label "$front ${probe%%:*}")
    echo "$line"
    MBS[$front,${probe%%:*}]=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "MB/s") { print $(i-1); exit } }' <<< "$line")
  done
  stop_front
done

echo
echo "| front | ssh conn/s | tls conn/s | openvpn conn/s | xmpp conn/s | socks5 conn/s | ssh MB/s (1 conn) | tls MB/s (1 conn) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for front in $FRONTS; do
  echo "| $front | ${RATE[$front,ssh]} | ${RATE[$front,tls]} | ${RATE[$front,openvpn]} | ${RATE[$front,xmpp]} | ${RATE[$front,socks5]} | ${MBS[$front,ssh]} | ${MBS[$front,tls]} |"
done
for kind in ssh tls; do
  best_rate=0 best_mbs=0
  for front in $FRONTS; do
    [ "$front" = tcpmuxd ] && continue
    best_rate=$(awk -v a="$best_rate" -v b="${RATE[$front,$kind]}" 'BEGIN { print (b > a) ? b : a }')
    best_mbs=$(awk -v a="$best_mbs" -v b="${MBS[$front,$kind]}" 'BEGIN { print (b > a) ? b : a }')
  done
  awk -v k=$kind -v r="${RATE[tcpmuxd,$kind]}" -v br="$best_rate" -v m="${MBS[tcpmuxd,$kind]}" -v bm="$best_mbs" \
    'BEGIN { printf "%s: tcpmuxd %.2fx the better sslh on connections/s, %.2fx on one-connection MB/s\n", k, r / br, m / bm }'
done
for kind in openvpn xmpp socks5; do
  best_rate=0
  for front in $FRONTS; do
    [ "$front" = tcpmuxd ] && continue
    best_rate=$(awk -v a="$best_rate" -v b="${RATE[$front,$kind]}" 'BEGIN { print (b > a) ? b : a }')
  done
  awk -v k=$kind -v r="${RATE[tcpmuxd,$kind]}" -v br="$best_rate" \
    'BEGIN { printf "%s: tcpmuxd %.2fx the better sslh on connections/s\n", k, r / br }'
done
