#!/usr/bin/env python3
"""Paired benchmark: this checkout's recording against an older commit's, on the same machine,
alternating, so that a change's per-call cost is told from the machine's drift.

Run: .venv/bin/python scripts/bench_pair.py COMMIT [--pairs N] [--calls N] [--threads N]
[--engine inline|frida] [--transport auto|shm|rpc]
Each pair runs `ada trace` of scripts/bench_target.c (the loop bench_trace.py times) with
COMMIT's ada and with this checkout's, in turns (the first of a pair alternates), then
uftrace on the -pg build, whose rate says what state the machine was in. COMMIT's ada runs
from a temporary git worktree put first on PYTHONPATH, removed at the end. Prints each pair
(rates, the target's waits for the drain, the drain's wakes), each side's median, and the
median of the per-pair ratios: on a shared machine single runs swing by 20 % and more, so
only the paired ratio over many pairs says anything, and a cost well under the spread
cannot be seen at all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_trace import ada, build, find_uftrace, uftrace

ROOT = Path(__file__).resolve().parents[1]


def old_checkout(commit: str, tmp: Path) -> Path:
    """A directory to put first on PYTHONPATH so that `import ada` is COMMIT's ada."""
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree),
                    commit], check=True)
    path = tmp / "path"
    path.mkdir()
    (path / "ada").symlink_to(tree)  # the repository is the package `ada`
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commit", help="the older commit to compare against")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--calls", type=int, default=10_000_000, help="calls per run, all threads")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engine", default="inline", choices=("inline", "frida"))
    ap.add_argument("--transport", default="auto", choices=("auto", "shm", "rpc"))
    a = ap.parse_args()
    os.environ.pop("PYTHONPATH", None)  # "new" is this checkout, as installed
    tmp = Path(tempfile.mkdtemp(prefix="ada-bench-pair-"))
    try:
        old = old_checkout(a.commit, tmp)
        exe = build(tmp)
        tool, how = find_uftrace()
        exe_pg = build(tmp, "-pg", name="bench_target_pg") if tool else None
        per = a.calls // a.threads
        print(f"{a.pairs} pairs, {a.engine} engine, {a.transport} transport, {a.threads} "
              f"thread(s), {per:,} calls of "
              f"small() a thread; old = {a.commit}, new = this checkout; uftrace: {how}")
        rates: dict[str, list[float]] = {"old": [], "new": [], "uftrace": []}
        for k in range(a.pairs):
            order = ("old", "new") if k % 2 == 0 else ("new", "old")
            row = {}
            for side in order:
                row[side] = ada(exe, per, tmp / "out", a.threads,
                                ("--hook-engine", a.engine, "--transport", a.transport),
                                env={"PYTHONPATH": str(old)} if side == "old" else None)
                rates[side].append(row[side].rate)
            line = "; ".join(f"{side} {r.rate / 1e6:6.2f} M calls/s (waited {r.wait_ms:,.0f} ms, "
                             f"{r.waits} waits, {r.drain_wakes} wakes)" for side, r in row.items())
            if tool:
                u, _ = uftrace(tool, exe_pg, per, a.threads, tmp)
                rates["uftrace"].append(u)
                line += f"; uftrace {u / 1e6:.2f}"
            print(f"  pair {k + 1:2}: {line}", flush=True)
        for side, values in rates.items():
            if values:
                print(f"  {side:<8} median {statistics.median(values) / 1e6:6.2f} M calls/s "
                      f"(min {min(values) / 1e6:.2f}, max {max(values) / 1e6:.2f})")
        ratios = [n / o for o, n in zip(rates["old"], rates["new"])]
        print(f"  new / old, per pair: {' '.join(f'{r:.2f}' for r in ratios)}")
        print(f"  new / old, median of the pairs: {statistics.median(ratios):.3f}; "
              f"new faster in {sum(r > 1 for r in ratios)} of {len(ratios)}")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(tmp / "tree")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
