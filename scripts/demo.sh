#!/usr/bin/env bash
# The README's first command: install ada into .venv, build a small C program, record it
# with `ada trace --detail` (arguments and return values, named from its debug information
# by replay), then show `ada info`, `ada report`, the start of `ada replay`, `ada graph`,
# `ada query`, an export for Perfetto and `ada verify`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
mkdir -p build
gcc -O1 -g -rdynamic -o build/demo scripts/demo.c
session=$("$VENV/bin/ada" trace --detail -o build/ada_traces -f build/demo -i 'demo!checksum' \
          -i 'demo!parse_digit' -i 'demo!fib' | tail -n 1)
echo "== ada info $session"
"$VENV/bin/ada" info "$session"
echo "== ada report $session"
"$VENV/bin/ada" report "$session"
echo "== ada replay $session -D 3 (first lines)"
"$VENV/bin/ada" replay "$session" -D 3 | head -n 12
echo "== ada graph $session -D 3"
"$VENV/bin/ada" graph "$session" -D 3
echo "== ada query $session \"SELECT ... FROM calls ...\" (SQL, by DuckDB)"
"$VENV/bin/ada" query "$session" "SELECT name, count(*) AS calls, sum(self_ns) AS self_ns, \
max(duration_ns) AS max_ns FROM calls GROUP BY name ORDER BY self_ns DESC"
echo "== ada export $session -f perfetto (open the file at ui.perfetto.dev, or add --open)"
"$VENV/bin/ada" export "$session" -f perfetto -o build/demo.pftrace
echo "== ada verify $session"
"$VENV/bin/ada" verify "$session"
