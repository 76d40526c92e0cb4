#!/usr/bin/env bash
# Source on a GPU host that lacks bubblewrap and iproute2 (the lent two-H100 host, Ubuntu 24.04, has neither) before
# `bench/layouts.py --pods` or `bench/run.py --pods`:
#     source bench/host-tools.sh DEBS_DIR
# DEBS_DIR holds Debian 12 .debs fetched where apt works:
#     apt-get download bubblewrap iproute2 libbpf1 libelf1 libmnl0 libxtables12 libcap2-bin
# They are unpacked (dpkg-deb -x, no install) under /tmp/host-tools, and `ip` and `bwrap` go on PATH as wrappers
# that find the unpacked libraries; the host's own are used where it has them. setpriv (util-linux) must be there.
debs=${1:?usage: source bench/host-tools.sh DEBS_DIR}
root=/tmp/host-tools
if [ ! -d "$root/usr" ]; then
  mkdir -p "$root"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$root" || { echo "host-tools: cannot unpack $deb" >&2; return 1; }; done
fi
libs=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu
mkdir -p "$root/wrappers"
for tool in bin/ip usr/bin/bwrap; do
  [ -x "$root/$tool" ] || { echo "host-tools: $tool is not in $debs" >&2; return 1; }
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$root/$tool" > "$root/wrappers/${tool##*/}"
  chmod +x "$root/wrappers/${tool##*/}"
done
command -v ip >/dev/null && command -v bwrap >/dev/null || export PATH="$PATH:$root/wrappers"
command -v setpriv >/dev/null || echo "host-tools: no setpriv on this host (util-linux)" >&2
