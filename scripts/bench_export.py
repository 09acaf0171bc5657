#!/usr/bin/env python3
"""Export and query benchmark: `ada export` in every format on a synthetic session of 8 M index
events (4 threads), and `ada query` on 40 M (a count of events, a group-by over calls, the ten
slowest calls), each as the user runs it (a subprocess, its time end to end; the median of
--runs runs, their spread shown), next to `ada verify` on the same files in the same run.

Targets (issue 15): perfetto at least 5 M events/s, parquet at least 10 M events/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from bench_analysis import build, launcher, timed

launcher()  # before the sessions are built here: children's peaks are their own

import ada.atf as atf  # noqa: E402

QUERIES = [
    ("count events", "SELECT count(*) FROM events"),
    ("group-by over calls", "SELECT name, count(*), sum(self_ns) FROM calls GROUP BY name"),
    ("10 slowest calls", "SELECT name, tid, start_ns, duration_ns FROM calls "
                         "ORDER BY duration_ns DESC LIMIT 10"),
]
TARGETS = {"perfetto": 5, "parquet": 10}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export-events", type=int, default=8_000_000)
    p.add_argument("--query-events", type=int, default=40_000_000)
    p.add_argument("--runs", type=int, default=3, help="runs of each command (the median)")
    args = p.parse_args()

    def median(*command: object) -> tuple[float, float, str]:
        runs = [timed(*command) for _ in range(max(1, args.runs))]
        times = sorted(t for t, _ in runs)
        spread = f" (runs {times[0]:.2f}-{times[-1]:.2f} s)" if len(times) > 1 else ""
        return statistics.median(times), max(m for _, m in runs), spread
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        path = build(Path(tmp) / "export", 4, args.export_events // 4)
        n = atf.open_session(path).event_count()
        print(f"session: {n:,} index events, 4 threads")
        dt, _ = timed("verify", path)
        print(f"  ada verify (same files)   : {dt:.2f} s = {n / dt / 1e6:.1f} M events/s")
        for fmt in ("perfetto", "chrome", "folded", "speedscope", "parquet"):
            out = Path(tmp) / f"out.{fmt}"
            dt, mb, spread = median("export", path, "-f", fmt, "-o", out)
            size = sum(f.stat().st_size for f in out.iterdir()) if out.is_dir() \
                else out.stat().st_size
            target = f" (target >= {TARGETS[fmt]} M/s)" if fmt in TARGETS else ""
            print(f"  ada export -f {fmt:<11}: {dt:.2f} s = {n / dt / 1e6:.1f} M events/s; "
                  f"{size / 1e6:,.0f} MB written, peak {mb:,.0f} MB{target}{spread}")
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        shutil.rmtree(Path(tmp) / "export")
        path = build(Path(tmp) / "query", 4, args.query_events // 4)
        n = atf.open_session(path).event_count()
        print(f"session: {n:,} index events, 4 threads")
        dt, _ = timed("verify", path)
        print(f"  ada verify (same files)   : {dt:.2f} s")
        for what, sql in QUERIES:
            dt, mb, spread = median("query", path, sql)
            print(f"  ada query, {what:<20}: {dt:.2f} s end to end, peak {mb:,.0f} MB{spread}")


if __name__ == "__main__":
    main()
