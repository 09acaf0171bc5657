#!/usr/bin/env bash
# The test command of the README: makes .venv (once), installs ada with its test
# extra, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
exec "$VENV/bin/python" -m pytest "$@"
