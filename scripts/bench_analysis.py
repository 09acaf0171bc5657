#!/usr/bin/env python3
"""Reading benchmark: a synthetic session of THREADS x EVENTS index events; `ada report`,
`ada replay`, `ada dump` and `ada verify` as the user runs them (subprocesses, output to
/dev/null), each with its time, rate and peak memory; then one thread's calls table in this
process.

Targets (issue 14): report at least 20 M events/s end to end with at most about twice the index
size in memory; replay and dump at least 1 M lines/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ada.atf as atf
from ada.atf import format as F
from ada.atf.writer import SessionWriter
from ada.tracer.analysis import calls as C

# One unit: a(){ b(); c(){ d(); } b(); } -- 10 events, 5 calls, depths 0..2.
UNIT_FID = [0, 1, 1, 2, 3, 3, 2, 1, 1, 0]
UNIT_KIND = [1, 1, 2, 1, 1, 2, 2, 1, 2, 2]
UNIT_DEPTH = [0, 1, 1, 1, 2, 2, 1, 1, 1, 0]


def build(directory: Path, threads: int, events: int) -> Path:
    units = events // len(UNIT_FID)
    writer = SessionWriter(directory, 1, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                           clock_type=F.CLOCK_BOOTTIME)
    rng = np.random.default_rng(1)
    for t in range(threads):
        ev = np.zeros(units * len(UNIT_FID), dtype=F.INDEX_EVENT)
        ev["timestamp_ns"] = np.cumsum(rng.integers(5, 200, len(ev), dtype=np.uint64))
        ev["function_id"] = np.tile(np.array(UNIT_FID, dtype=np.uint64), units)
        ev["event_kind"] = np.tile(np.array(UNIT_KIND, dtype=np.uint32), units)
        ev["call_depth"] = np.tile(np.array(UNIT_DEPTH, dtype=np.uint32), units)
        ev["thread_id"], ev["detail_seq"] = 1000 + t, F.NO_DETAIL_SEQ
        w = writer.add_thread(1000 + t)
        w.append_index(ev)
        del ev
    writer.finalize()
    writer.write_manifest({"threads": [{"id": i} for i in range(threads)],
                           "symbols": [{"function_id": f"0x{i:016x}", "name": n}
                                       for i, n in enumerate("abcd")]})
    return writer.path


def timed(*args: object) -> tuple[float, float]:
    """Seconds and peak resident MB of `ada ARGS` with stdout to /dev/null."""
    with open(os.devnull, "w") as null:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "ada", *map(str, args)], stdout=null)
        _, status, usage = os.wait4(p.pid, 0)
        elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"ada {' '.join(map(str, args))} failed ({status})")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--events", type=int, default=10_000_000, help="index events per thread")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        path = build(Path(tmp), args.threads, args.events)
        s = atf.open_session(path)
        n = s.event_count()
        index_mb = n * F.INDEX_EVENT_SIZE / 1e6
        print(f"session: {args.threads} threads x {args.events:,} events = {n:,} index events "
              f"({index_mb:,.0f} MB of index)")
        dt, mb = timed("report", path)
        print(f"  ada report              : {dt:.2f} s = {n / dt / 1e6:.1f} M events/s end to end; "
              f"peak {mb:,.0f} MB = {mb / index_mb:.2f}x the index (target >= 20 M/s, <= ~2x)")
        lines = n // 10 * 6 + 1  # per unit: a { b(); c { d(); } b(); }: 6 lines
        dt, mb = timed("replay", path)
        print(f"  ada replay > /dev/null  : {dt:.2f} s = {lines / dt / 1e6:.2f} M lines/s; "
              f"peak {mb:,.0f} MB (target >= 1 M lines/s)")
        dt, mb = timed("dump", path)
        print(f"  ada dump > /dev/null    : {dt:.2f} s = {n / dt / 1e6:.2f} M lines/s; "
              f"peak {mb:,.0f} MB (target >= 1 M lines/s)")
        dt, mb = timed("verify", path)
        print(f"  ada verify (same files) : {dt:.2f} s = {n / dt / 1e6:.1f} M events/s; "
              f"peak {mb:,.0f} MB")
        # Last: a child's peak memory counts what this process held when it forked.
        t0 = time.perf_counter()
        calls = C.thread_calls(s.threads[0])
        dt = time.perf_counter() - t0
        print(f"  calls table, one thread (in process): {len(calls):,} calls in {dt:.2f} s = "
              f"{len(s.threads[0]) / dt / 1e6:.1f} M events/s")


if __name__ == "__main__":
    main()
