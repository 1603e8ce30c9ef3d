#!/usr/bin/env bash
# Builds the Debian package, installs it, checks what a sysadmin would, and
# removes it again. Needs root (dpkg) and cargo-deb. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --quiet
command -v man >/dev/null 2>&1 || apt-get install -y -qq man-db >/dev/null
command -v useradd >/dev/null 2>&1 || apt-get install -y -qq passwd >/dev/null

cargo build --release --locked --workspace --quiet
deb=$(cargo deb -p tcpmuxd --no-build --strip --quiet)
echo "package: $deb ($(du -h "$deb" | cut -f1))"
fail() { echo "check-package: $*" >&2; exit 1; }
new_user=$(getent passwd tcpmuxd >/dev/null && echo no || echo yes)
dpkg -i "$deb" >/dev/null 2>"$deb.stderr" || { cat "$deb.stderr" >&2; fail "dpkg -i failed"; }
# A fresh install (the user made now) says nothing but errors.
if [ "$new_user" = yes ] && grep -i "warning" "$deb.stderr" >&2; then
    fail "the install printed a warning"
fi
rm -f "$deb.stderr"
tcpmuxd --check-config /etc/tcpmuxd/tcpmuxd.toml || fail "the shipped configuration does not pass --check-config"
man -w tcpmuxd >/dev/null || fail "man tcpmuxd not found"
man -w 5 tcpmuxd.toml >/dev/null || fail "man tcpmuxd.toml not found"
man -w tcpmux >/dev/null || fail "man tcpmux not found"
getent passwd tcpmuxd >/dev/null || fail "no tcpmuxd user"
[ -f /usr/share/bash-completion/completions/tcpmuxd ] || fail "no bash completion"
[ -f /lib/systemd/system/tcpmuxd.service ] || fail "no systemd unit"
tcpmux --version >/dev/null || fail "tcpmux does not run"
tcpmux-bench --version >/dev/null || fail "tcpmux-bench does not run"

# Enabled as `systemctl enable tcpmuxd` would (without a running systemd).
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -sf /lib/systemd/system/tcpmuxd.service /etc/systemd/system/multi-user.target.wants/tcpmuxd.service

dpkg -r tcpmux >/dev/null
[ ! -e /usr/bin/tcpmuxd ] || fail "tcpmuxd still installed after dpkg -r"
[ -f /etc/tcpmuxd/tcpmuxd.toml ] || fail "dpkg -r removed the configuration (a conffile stays until purge)"
dpkg -P tcpmux >/dev/null
[ ! -e /etc/tcpmuxd/tcpmuxd.toml ] || fail "dpkg -P left the configuration"
[ ! -L /etc/systemd/system/multi-user.target.wants/tcpmuxd.service ] || fail "dpkg -P left the unit enabled (a dangling link)"
echo "check-package: installed, checked and removed cleanly"
