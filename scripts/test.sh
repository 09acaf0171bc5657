#!/usr/bin/env bash
# The test command of the README: makes .venv (once), installs ada with its test
# extra, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
# g++ builds the C++ test target (exceptions through hooked functions); Debian's gcc lacks it.
if ! command -v g++ >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing g++ (apt-get) for the C++ test target" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi
exec "$VENV/bin/python" -m pytest "$@"
