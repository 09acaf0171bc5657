#!/usr/bin/env bash
# The test command of the README: makes .venv (once), installs ada with its test
# extra, then runs pytest in ADA_TEST_WORKERS processes (pytest-xdist; default 2, 0 for one
# process; a -n among the arguments wins). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
# g++ builds the C++ test target (exceptions through hooked functions); Debian's gcc lacks it.
# sqlite3 (its shell and library) is the real program the reading commands are checked on.
# chromium is the real browser the pages people look at are checked in (tests/browser.py).
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing ${missing[*]} (apt-get) for the tests" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The suite starts `python -m ada` several hundred times. Where bytecode is not kept
# (PYTHONDONTWRITEBYTECODE), each start compiles ada's modules afresh: 0.2-0.4 s apiece here.
# The bytecode is kept in the venv instead, which leaves the checkout as clean.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$VENV/pycache"
# Two workers: most of a test is waiting on real processes (Frida's attach, gcc, the target),
# so two share two cores well (16-19 minutes in one process here, about 10 in two).
workers=(-n "${ADA_TEST_WORKERS:-2}")
for arg in "$@"; do
    case $arg in -n|-n*|--numprocesses|--numprocesses=*) workers=() ;; esac
done
exec "$VENV/bin/python" -m pytest "${workers[@]}" "$@"
