#!/usr/bin/env python3
"""Reading benchmark on real recorded traces: an SQL engine's shell (sqlite3) with every export of
its library hooked (`-I libsqlite3.so.0`), an insert of ROWS rows, an index and a query, recorded
by `ada trace` at two sizes (ROWS / 10 and ROWS, to show memory does not grow with the trace);
then every reading command as the user runs it (a subprocess, output to /dev/null), each with
its time, rate and peak resident memory; and uftrace's report and replay, in the same run, on
uftrace's own recording of the same program with the row count set so that its trace has as
many events as ada's.

Targets (issue 23), on a trace of 70 M events or more: peak RSS at most 1 GiB for every
command and flat as the trace grows; `ada report` at least 2x uftrace report's events/s;
`ada replay` at least 1.5x uftrace replay's lines/s; perfetto and parquet exports at least
8 M events/s. `--synthetic` runs the former synthetic session (4 threads x EVENTS) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Commands are timed by a small launcher process: a child's peak resident memory (ru_maxrss)
# starts from its parent's at the fork and survives the exec, so children of this process,
# once it holds numpy and session data, would report its memory as theirs.
LAUNCHER_CODE = """
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["stdout"], "wb") as out, open(job["stderr"], "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(job["argv"], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
    print(json.dumps([time.perf_counter() - t0, usage.ru_maxrss, status]), flush=True)
"""
_launcher: subprocess.Popen | None = None


def launcher() -> subprocess.Popen:
    """The launcher, started on first use (call it before loading anything large)."""
    global _launcher
    if _launcher is None:
        _launcher = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER_CODE],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return _launcher


if __name__ == "__main__":
    launcher()  # before numpy and ada are loaded here

import numpy as np  # noqa: E402

import ada.atf as atf
from ada.atf.format import (ARCH_X86_64, CLOCK_BOOTTIME, EVENT_CALL, INDEX_EVENT, NO_DETAIL_SEQ,
                            OS_LINUX)
from ada.atf.writer import SessionWriter

LIBRARY = "libsqlite3.so.0"
WORKLOAD = """CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
INSERT INTO t SELECT x, x * 7 % 1000, 'row ' || x FROM c;
COMMIT;
CREATE INDEX ia ON t(a);
SELECT a, count(*), sum(length(b)) FROM t GROUP BY a ORDER BY 2 DESC, 1 LIMIT 3;
"""
QUERY = "SELECT name, count(*), sum(self_ns) FROM calls GROUP BY name ORDER BY 3 DESC LIMIT 5"


def run(command: list[str], stdout: str = os.devnull) -> tuple[float, float]:
    """Seconds and peak resident MB of a command (which must succeed), run by the launcher."""
    with tempfile.NamedTemporaryFile(suffix=".stderr") as err:
        job = {"argv": [str(c) for c in command], "stdout": stdout, "stderr": err.name}
        p = launcher()
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps(job) + "\n")
        p.stdin.flush()
        elapsed, maxrss_kb, status = json.loads(p.stdout.readline())
        if status != 0:
            message = Path(err.name).read_text(errors="replace")[-2000:]
            raise SystemExit(f"failed ({status}): {' '.join(job['argv'])}\n{message}")
    return elapsed, maxrss_kb / 1024


def ada(*args: object) -> list[str]:
    return [sys.executable, "-m", "ada", *map(str, args)]


def sqlite3() -> str:
    found = shutil.which("sqlite3")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "sqlite3"], capture_output=True)
        found = shutil.which("sqlite3")
    if found is None:
        raise SystemExit("sqlite3 is needed: apt-get install sqlite3")
    return found


def find_uftrace() -> str | None:
    found = shutil.which("uftrace")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "uftrace"], capture_output=True)
        found = shutil.which("uftrace")
    return found


def workload(directory: Path, rows: int) -> Path:
    script = directory / f"workload_{rows}.sql"
    script.write_text(WORKLOAD.format(rows=rows))
    return script


def record(directory: Path, rows: int, engine: str) -> Path:
    """ada's recording of the workload (kept in `directory` and reused)."""
    out = directory / f"ada_{engine}_{rows}"
    found = sorted(out.glob("session_*/pid_*"))
    if found:
        return found[-1]
    t0 = time.perf_counter()
    p = subprocess.run(ada("trace", "-q", "-o", out, "--hook-engine", engine, "-I", LIBRARY,
                           "-f", sqlite3(), ":memory:", f".read {workload(directory, rows)}"),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"ada trace failed:\n{p.stderr[-3000:]}")
    path = Path(p.stdout.strip().splitlines()[-1])
    print(f"  recorded {rows:,} rows with ada ({engine}) in {time.perf_counter() - t0:.1f} s")
    return path


def replay_lines(session: atf.SessionReader) -> int:
    """The lines `ada replay` writes: a line per call, and a second for each call with
    children (a CALL not followed right away by its close)."""
    lines = 1  # the header
    for t in session.threads:
        n = len(t)
        for a in range(0, n, 1 << 22):
            k = t.index.read(a, min(n, a + (1 << 22) + 1))["event_kind"]
            calls = k == EVENT_CALL
            leaf = calls[:-1] & (k[1:] != EVENT_CALL)
            lines += 2 * int(calls[:1 << 22].sum()) - int(leaf[:1 << 22].sum())
    return lines


RUNS = 3  # each command's time is the median of this many runs (--runs)


def median_run(command: list[str]) -> tuple[float, float, str]:
    """The median seconds of RUNS runs, the largest peak memory, and the spread."""
    runs = [run(command) for _ in range(max(1, RUNS))]
    times = sorted(t for t, _ in runs)
    spread = f" (runs {times[0]:.2f}-{times[-1]:.2f} s)" if len(times) > 1 else ""
    return times[len(times) // 2], max(m for _, m in runs), spread


def ada_figures(path: Path, label: str) -> dict[str, float]:
    s = atf.open_session(path)
    n = s.event_count()
    lines = replay_lines(s)
    print(f"{label}: {n:,} events ({n * 32 / 1e9:.2f} GB of index), {len(s.threads)} "
          f"thread(s); replay writes {lines:,} lines")
    cache = path / ".ada-cache"
    shutil.rmtree(cache, ignore_errors=True)
    figures = {"events": n, "lines": lines}
    for name, command, unit in [
            ("report", ada("report", path), "events"),
            ("graph", ada("graph", path), "events"),
            ("replay", ada("replay", path), "lines"),
            ("export perfetto", ada("export", path, "-f", "perfetto", "-o",
                                    path.parent / "bench.pftrace"), "events"),
            ("export parquet", ada("export", path, "-f", "parquet", "-o",
                                   path.parent / "bench_parquet"), "events"),
            ("query (first: makes its files)", ada("query", path, QUERY), "events"),
            ("query (files made)", ada("query", path, QUERY), "events")]:
        if name.startswith("query (first"):
            dt, mb = run(command)  # once: it makes the files the next runs use
            spread = ""
        else:
            dt, mb, spread = median_run(command)
        rate = (lines if unit == "lines" else n) / dt / 1e6
        figures[name] = rate
        figures[name + " MB"] = mb
        print(f"  ada {name:<30}: {dt:6.2f} s = {rate:5.2f} M {unit}/s; peak {mb:,.0f} MB"
              f"{spread}")
    for leftover in (path.parent / "bench.pftrace", path.parent / "bench_parquet", cache):
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else \
            leftover.unlink(missing_ok=True)
    return figures


def uftrace_events(tool: str, data: Path) -> int:
    """Entries and exits in a uftrace recording (its report's calls, twice)."""
    out = subprocess.run([tool, "report", "-d", str(data), "--no-pager"], capture_output=True,
                         text=True).stdout
    calls = 0
    for line in out.splitlines()[2:]:
        parts = line.split()
        if len(parts) >= 6 and parts[4].isdigit():
            calls += int(parts[4])
    return 2 * calls


def uftrace_figures(tool: str, directory: Path, events: int) -> dict[str, float] | None:
    """uftrace records the same program (its functions patched dynamically, and the
    library's calls followed: -P . -l --nest-libcall) with the rows that give it `events`
    events; its report and replay timed as ada's are."""
    def record_uftrace(rows: int) -> Path:
        data = directory / f"uftrace_{rows}"
        if not (data / "info").exists():
            shutil.rmtree(data, ignore_errors=True)
            p = subprocess.run([tool, "record", "-d", str(data), "--force", "-P", ".", "-l",
                                "--nest-libcall", "--no-event", "--no-pager", sqlite3(),
                                ":memory:",
                                f".read {workload(directory, rows)}"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(f"  uftrace record failed: {p.stderr[-500:]}")
                return data
        return data

    probe = 2000
    per_row = uftrace_events(tool, record_uftrace(probe)) / probe
    if per_row <= 0:
        return None
    rows = max(probe, int(events / per_row))
    data = record_uftrace(rows)
    n = uftrace_events(tool, data)
    dt_report, mb_report, spread_report = median_run([tool, "report", "-d", str(data),
                                                      "--no-pager"])
    dt_replay, mb_replay, spread_replay = median_run([tool, "replay", "-d", str(data),
                                                      "--no-pager"])
    lines = int(subprocess.run(f"{tool} replay -d {data} --no-pager | wc -l", shell=True,
                               capture_output=True, text=True).stdout.strip() or 0)
    print(f"uftrace {rows:,} rows: {n:,} events, replay {lines:,} lines")
    print(f"  uftrace report                    : {dt_report:6.2f} s = {n / dt_report / 1e6:5.2f}"
          f" M events/s; peak {mb_report:,.0f} MB{spread_report}")
    print(f"  uftrace replay                    : {dt_replay:6.2f} s = "
          f"{lines / dt_replay / 1e6:5.2f} M lines/s; peak {mb_replay:,.0f} MB{spread_replay}")
    return {"report": n / dt_report / 1e6, "replay": lines / dt_replay / 1e6}


# One unit: a(){ b(); c(){ d(); } b(); } -- 10 events, 5 calls, depths 0..2.
UNIT_FID = [0, 1, 1, 2, 3, 3, 2, 1, 1, 0]
UNIT_KIND = [1, 1, 2, 1, 1, 2, 2, 1, 2, 2]
UNIT_DEPTH = [0, 1, 1, 1, 2, 2, 1, 1, 1, 0]


def build(directory: Path, threads: int, events: int) -> Path:
    """A synthetic session of `threads` x `events` index events (scripts/bench_export.py's
    too)."""
    units = events // len(UNIT_FID)
    writer = SessionWriter(directory, 1, arch=ARCH_X86_64, os_id=OS_LINUX,
                           clock_type=CLOCK_BOOTTIME)
    rng = np.random.default_rng(1)
    for t in range(threads):
        ev = np.zeros(units * len(UNIT_FID), dtype=INDEX_EVENT)
        ev["timestamp_ns"] = np.cumsum(rng.integers(5, 200, len(ev), dtype=np.uint64))
        ev["function_id"] = np.tile(np.array(UNIT_FID, dtype=np.uint64), units)
        ev["event_kind"] = np.tile(np.array(UNIT_KIND, dtype=np.uint32), units)
        ev["call_depth"] = np.tile(np.array(UNIT_DEPTH, dtype=np.uint32), units)
        ev["thread_id"], ev["detail_seq"] = 1000 + t, NO_DETAIL_SEQ
        writer.add_thread(1000 + t).append_index(ev)
        del ev
    writer.finalize()
    writer.write_manifest({"threads": [{"id": i} for i in range(threads)],
                           "symbols": [{"function_id": f"0x{i:016x}", "name": n}
                                       for i, n in enumerate("abcd")]})
    return writer.path


def timed(*args: object) -> tuple[float, float]:
    """Seconds and peak resident MB of `ada ARGS` with stdout to /dev/null."""
    return run(ada(*args))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows inserted (largest trace)")
    p.add_argument("--engine", default="frida", help="ada's hook engine for the recordings")
    p.add_argument("--keep", type=Path, help="keep (and reuse) the recordings in this directory")
    p.add_argument("--no-uftrace", action="store_true", help="leave uftrace out")
    p.add_argument("--runs", type=int, default=3, help="runs of each command (the median)")
    p.add_argument("--synthetic", action="store_true",
                   help="the synthetic session instead of real recordings")
    p.add_argument("--threads", type=int, default=4, help="--synthetic: threads")
    p.add_argument("--events", type=int, default=10_000_000, help="--synthetic: per thread")
    args = p.parse_args()
    global RUNS
    RUNS = args.runs
    if args.synthetic:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
            ada_figures(build(Path(tmp), args.threads, args.events),
                        f"synthetic, {args.threads} threads")
        return
    directory = args.keep or Path(tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp")))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        small = record(directory, args.rows // 10, args.engine)
        large = record(directory, args.rows, args.engine)
        ada_figures(small, f"sqlite3, {args.rows // 10:,} rows ({args.engine})")
        figures = ada_figures(large, f"sqlite3, {args.rows:,} rows ({args.engine})")
        tool = None if args.no_uftrace else find_uftrace()
        rival = uftrace_figures(tool, directory, int(figures["events"])) if tool else None
        peak = max(v for k, v in figures.items() if k.endswith(" MB"))
        print(f"ratios: peak RSS of any command {peak:,.0f} MB (target <= 1024); perfetto "
              f"{figures['export perfetto']:.1f}, parquet {figures['export parquet']:.1f} M "
              "events/s (targets >= 8)")
        if rival:
            print(f"        ada report / uftrace report = "
                  f"{figures['report'] / rival['report']:.2f}x (target >= 2); "
                  f"ada replay / uftrace replay = {figures['replay'] / rival['replay']:.2f}x "
                  "(target >= 1.5)")
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
