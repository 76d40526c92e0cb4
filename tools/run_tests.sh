#!/usr/bin/env bash
# make test's pytest runs. As root: every test in one run. As another user: the tests marked `root` (pods run as
# they declare themselves through tools/pod_runner.py: bubblewrap, network namespaces, setpriv) in a second run
# through `sudo -n`, the rest as that user. Each run ends with tests/leaks.py's check that no process is left.
#   tools/run_tests.sh PYTHON [PYTEST ARGS...]
set -uo pipefail
py=$1
shift

run() {
  "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; return 1; fi
  return "$rc"
}

if [ "$(id -u)" -eq 0 ]; then
  run "$py" -m pytest "$@"
  exit
fi
if ! sudo -n true 2>/dev/null; then
  echo "make test: the tests marked root (tools/pod_runner.py) need root or passwordless sudo (sudo -n true failed)" >&2
  exit 1
fi
run "$py" -m pytest -m "not root" "$@"
user_rc=$?
echo "make test: the tests marked root, through sudo -n"
# No cache or bytecode written as root into the user's checkout.
run sudo -n env "PATH=$PATH" PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -p no:cacheprovider -m root "$@"
root_rc=$?
[ "$user_rc" -eq 0 ] && [ "$root_rc" -eq 0 ]
