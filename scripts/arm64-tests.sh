#!/usr/bin/env bash
# The arm64 test subset, run inside the guest of scripts/arm64.sh (its default command): the
# end-to-end recording tests (each with the engines that exist on arm64) and the reading
# commands on what they recorded, then a few of them again as on Android: no /dev/shm, the hot
# path compiled by TinyCC. The format and analysis tests are the same code on every machine and
# run on the host. Arguments (a narrower list of tests, -k, -x) go to pytest and skip the
# Android-like pass. Two pytest workers by default, one a guest CPU (ADA_TEST_WORKERS, as in
# scripts/test.sh): most of a test's time is one CPU busy (a Python start, an injection, a
# compile), so two at once ran test_endings and test_children in 593 s against 920 s.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -m)" = aarch64 ] || { echo "arm64-tests.sh runs inside scripts/arm64.sh's guest" >&2; exit 2; }
pytest=(python -m pytest -p no:cacheprovider -v -rfE --timeout 900 --durations 25)
# A recording whose test names no toolchain does as ada does by default: gcc -O2, run by ada in
# the guest once per source and kept in its cache (tracer/record/hot_path_build.py), so the
# guest's minute of compiling is not paid at each recording; the Android-like pass is TinyCC's.
workers=(-n "${ADA_TEST_WORKERS:-2}")
for arg in "$@"; do
    case $arg in -n|-n*|--numprocesses|--numprocesses=*) workers=() ;; esac
done
if [ $# -gt 0 ]; then
    exec "${pytest[@]}" "${workers[@]}" "$@"
fi
status=0
"${pytest[@]}" "${workers[@]}" tests/test_registers.py tests/test_trace.py tests/test_detail.py \
    tests/test_tail_calls.py tests/test_inline.py tests/test_endings.py tests/test_children.py \
    tests/test_modules.py tests/test_clock.py tests/test_devices.py tests/test_debuginfo.py \
    tests/test_exports.py tests/test_resources.py tests/test_hot_path_build.py || status=$?
echo "arm64: as on Android: /dev/shm removed, TinyCC"
umount /dev/shm && rmdir /dev/shm
ADA_TESTS_TOOLCHAIN=internal "${pytest[@]}" "${workers[@]}" \
    -k "internal or exact_count_one_thread or every_event_survives_the_end and shm" \
    tests/test_registers.py tests/test_trace.py tests/test_endings.py || status=$?
exit $status
