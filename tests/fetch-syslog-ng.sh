#!/usr/bin/env bash
# Unpacks syslog-ng (syslog-ng-core, syslog-ng-mod-rdkafka and the libraries they need that
# the system lacks) into a cache directory, for tests/clients/test_syslog.py and perf/syslog.py.
#
# Why not apt-get install: Debian's syslog-ng conflicts with rsyslog, which the other syslog
# tests need installed. So the .debs are fetched with `apt-get download` and unpacked with
# `dpkg -x`; the tests run `usr/sbin/syslog-ng` from there in the foreground, with
# LD_LIBRARY_PATH and --module-path pointing into the tree (see syslog_ng_env in the test).
#
# Idempotent: a tree whose stamp names the same package versions is kept as it is.
# Usage: tests/fetch-syslog-ng.sh [DIR]   (default: $STRATA_SYSLOG_NG_ROOT or
#        ${XDG_CACHE_HOME:-~/.cache}/strata-ci/syslog-ng); prints the tree's path last.
set -euo pipefail
dir="${1:-${STRATA_SYSLOG_NG_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/strata-ci/syslog-ng}}"
packages=(syslog-ng-core syslog-ng-mod-rdkafka)
# syslog-ng-core's and syslog-ng-mod-rdkafka's library dependencies (Debian 12); those the
# system already has are used from the system.
libraries=(libivykis0 libnet1 libpcre3 libwrap0 librdkafka1 libjson-c5 libcap2)

version_of() { apt-cache policy "$1" | awk '/Candidate:/ {print $2}'; }
if ! apt-cache policy syslog-ng-core | grep -q 'Candidate: [0-9]'; then
    apt-get update -qq
fi
want=""
for p in "${packages[@]}"; do want+="$p=$(version_of "$p") "; done
if [[ -x "$dir/root/usr/sbin/syslog-ng" && -f "$dir/stamp" && "$(cat "$dir/stamp")" == "$want" ]]; then
    echo "syslog-ng present in $dir/root"
    echo "$dir/root"
    exit 0
fi

rm -rf "$dir/debs" "$dir/root"
mkdir -p "$dir/debs" "$dir/root"
fetch=("${packages[@]}")
for lib in "${libraries[@]}"; do
    dpkg-query -W -f='${Status}' "$lib" 2>/dev/null | grep -q 'install ok installed' || fetch+=("$lib")
done
# apt-get download writes into the current directory; as root it warns that the _apt user
# cannot write there, which is harmless.
(cd "$dir/debs" && apt-get download -q "${fetch[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
[[ -x "$dir/root/usr/sbin/syslog-ng" ]] || { echo "syslog-ng did not unpack into $dir/root" >&2; exit 1; }
echo "$want" > "$dir/stamp"
echo "syslog-ng unpacked into $dir/root (${fetch[*]})"
echo "$dir/root"
