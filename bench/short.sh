#!/usr/bin/env bash
# Short connections per second (connect, request, whole answer, close) in one
# run, for the two kinds of service a superserver runs:
# - built in, no process per connection: tcpmuxd's daytime through TCPMUX,
#   against xinetd's and openbsd-inetd's internal daytime on a port of its own;
# - a program per connection: the same one-line script exec'd by tcpmuxd and by
#   xinetd (both through TCPMUX), and by openbsd-inetd on a port of its own,
#   with the ceiling for that program here (exec-ceiling: spawn and reap, no
#   network). EXEC=static runs bench/c/when.c, linked static, instead.
# openbsd-inetd serves no TCPMUX at all (OpenBSD removed it from inetd; its
# binary has no tcpmux code), so its rows are the dedicated-port setup a
# sysadmin would use instead.
#   bench/short.sh [SECONDS] [CLIENTS]
# Needs xinetd; openbsd-inetd is used if installed, else unpacked from Debian's
# package into target/peers/ (it conflicts with xinetd as a package, not as a
# program), else skipped. Ports sit below the ephemeral range (32768+), where a
# client retrying a dead port can connect to itself and keep the port busy.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-5}
CLIENTS=${2:-8}
BASE=${BASE_PORT:-27400}
MUX=$BASE XI=$((BASE + 1)) XI_DAY=$((BASE + 2)) OI_EXEC=$((BASE + 3))
# openbsd-inetd finds internal services by their name, so its daytime is on 13.
OI_DAY=13
command -v xinetd >/dev/null || { echo "bench/short.sh: xinetd is not installed" >&2; exit 1; }
cargo build --release --quiet -p tcpmuxd -p tcpmux-bench
. bench/lib.sh

openbsd_inetd() {
  if [ -n "${OPENBSD_INETD:-}" ]; then echo "$OPENBSD_INETD"; return; fi
  if dpkg -s openbsd-inetd >/dev/null 2>&1; then echo /usr/sbin/inetd; return; fi
  local root=target/peers/openbsd-inetd
  if [ ! -x $root/usr/sbin/inetd ] && command -v apt-get >/dev/null; then
    mkdir -p $root
    (cd "$WORK" && apt-get download -qq openbsd-inetd >/dev/null 2>&1 && dpkg-deb -x openbsd-inetd_*.deb "$OLDPWD/$root") || true
  fi
  [ -x $root/usr/sbin/inetd ] && echo $root/usr/sbin/inetd
}

# The program every superserver runs: one short line, like daytime.
cat > "$WORK/when" <<'SH'
#!/bin/sh
exec /bin/date -u
SH
chmod +x "$WORK/when"
# EXEC=static: bench/c/when.c instead, linked static: the superservers' own
# cost with the shell's and the loader's taken out.
if [ "${EXEC:-script}" = static ]; then cc -O2 -static -o "$WORK/when" bench/c/when.c; fi
# The ceiling for any superserver running this program per connection:
# spawning and reaping it, with no network and no server (bench/c/spawn.c).
cc -O2 -o "$WORK/spawn" bench/c/spawn.c
cat > "$WORK/tcpmuxd.toml" <<CFG
listen = ["127.0.0.1:$MUX"]
[service.when]
exec = ["$WORK/when"]
CFG
RUST_LOG=warn ${TCPMUXD:-target/release/tcpmuxd} --config "$WORK/tcpmuxd.toml" & PIDS+=($!)
# xinetd: its internal tcpmux dispatcher on an unlisted port with the program
# as a TCPMUXPLUS service (xinetd sends the '+', as tcpmuxd's reply = "server"),
# and its internal daytime on a port of its own.
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
service daytime
{
    type = INTERNAL UNLISTED
    id = daytime-stream
    socket_type = stream
    protocol = tcp
    port = $XI_DAY
    bind = 127.0.0.1
    wait = no
    user = root
}
CFG
xinetd -dontfork -f "$WORK/xinetd.conf" -pidfile "$WORK/xinetd.pid" >/dev/null 2>&1 & PIDS+=($!)
OI=$(openbsd_inetd || true)
if [ -n "$OI" ] && [[ $(ldd "$OI" 2>&1) != *"not found"* ]]; then
  # nowait.N and -R: no "looping service" shutdown at these rates.
  cat > "$WORK/inetd.conf" <<CFG
127.0.0.1:daytime stream tcp nowait.100000000 root internal
127.0.0.1:$OI_EXEC stream tcp nowait.100000000 root $WORK/when when
CFG
  "$OI" -i -q 1024 -R 100000000 "$WORK/inetd.conf" >/dev/null 2>&1 & PIDS+=($!)
else
  echo "openbsd-inetd: not measured (${OI:-not installed and not unpackable}${OI:+: missing libraries, apt-get install libwrap0})" >&2
  OI=
fi
sleep 1
B=target/release/tcpmux-bench
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1"; [ -z "${2:-}" ] || printf '%s\r\n' "$2" >&3; head -c 40 <&3 | tr -d '\r\n\0') 2>/dev/null || true; }
measure() { # label port [service]
  $B short --connect "127.0.0.1:$2" ${3:+--service "$3"} --connections "$CLIENTS" --duration "$SECONDS_EACH" --label "$1" --json
}
echo "# $(nproc) cores, $CLIENTS clients, $SECONDS_EACH s each"
{
  measure tcpmuxd-builtin $MUX daytime
  measure tcpmuxd-exec $MUX when
  "$WORK/spawn" "$WORK/when" "$SECONDS_EACH" "$CLIENTS" exec-ceiling
  probe=$(answers $XI when)
  if [[ $probe == +* ]]; then measure xinetd-exec $XI when; else echo "xinetd tcpmux: not measured; it answered: ${probe:-nothing}" >&2; fi
  probe=$(answers $XI_DAY)
  if [ -n "$probe" ]; then measure xinetd-internal $XI_DAY; else echo "xinetd daytime: not measured; no answer" >&2; fi
  if [ -n "$OI" ]; then
    for pair in "openbsd-inetd-internal $OI_DAY" "openbsd-inetd-exec $OI_EXEC"; do
      set -- $pair
      if [ -n "$(answers "$2")" ]; then measure "$1" "$2"; else echo "$1: not measured; no answer on port $2" >&2; fi
    done
  fi
} > "$WORK/short.json"
python3 - "$WORK/short.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate = {r["label"]: r["per_second"] for r in rows}
refs = [r for r in ("exec-ceiling", "xinetd-exec", "openbsd-inetd-exec", "xinetd-internal", "openbsd-inetd-internal") if r in rate]
print("| target | connections/s | p50 us | p99 us | p99.9 us | failed | " + " | ".join(f"vs {r}" for r in refs) + " |")
print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(refs))
for r in rows:
    ratios = " | ".join(f"{r['per_second']/rate[ref]:.1f}x" for ref in refs)
    print(f"| {r['label']} | {r['per_second']:.0f} | {r['p50_us']} | {r['p99_us']} | {r['p999_us']} | {r['failed']} | {ratios} |")
PY
