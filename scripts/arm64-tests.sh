#!/usr/bin/env bash
# The arm64 test subset, run inside the guest of scripts/arm64.sh (its default command): the
# end-to-end recording tests (each with the engines that exist on arm64) and the reading
# commands on what they recorded. The format and analysis tests are the same code on every
# machine and run on the host. Extra arguments go to pytest (-k, -x, a narrower list).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -m)" = aarch64 ] || { echo "arm64-tests.sh runs inside scripts/arm64.sh's guest" >&2; exit 2; }
TESTS=(tests/test_registers.py tests/test_trace.py tests/test_detail.py tests/test_tail_calls.py
       tests/test_endings.py tests/test_children.py tests/test_modules.py tests/test_clock.py
       tests/test_devices.py tests/test_debuginfo.py tests/test_exports.py tests/test_resources.py)
if [ $# -gt 0 ] && [[ $1 != -* ]]; then TESTS=(); fi   # an explicit list replaces the subset
exec python -m pytest -p no:cacheprovider -q --timeout 900 "${TESTS[@]}" "$@"
