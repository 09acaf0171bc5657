#!/usr/bin/env python3
"""Recording benchmark: the call rate of a small hooked function, measured in one run.

Run: .venv/bin/python scripts/bench_trace.py [--calls N] [--long-calls N]
Prints, for one thread calling small() in a loop (the target times its own loop):
  uninstrumented rate; the rate under an empty CModule onEnter/onLeave hook (the floor Frida
  sets); the rate under `ada trace` (index lane) with events lost; a long run (>= 30 s) to show
  the drain keeps up; and the 2-thread rate. Targets (recording issue): ada >= 0.75x the empty
  hook, zero events lost over >= 20 M calls, the drain keeping up for >= 30 s.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import frida

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import atf  # noqa: E402

EMPTY_HOOK = """
const cm = new CModule(`
#include <gum/guminterceptor.h>
void onEnter (GumInvocationContext * ic) { }
void onLeave (GumInvocationContext * ic) { }
`);
Interceptor.attach(Process.mainModule.getExportByName('small'), cm);
"""


def build(tmp: Path) -> Path:
    exe = tmp / "bench_target"
    subprocess.run(["gcc", "-O2", "-rdynamic", "-pthread", "-o", str(exe),
                    str(ROOT / "scripts" / "bench_target.c")], check=True)
    return exe


def parse_rate(text: str) -> tuple[float, float]:
    m = re.search(r"BENCH calls=(\d+) threads=\d+ seconds=([\d.]+) rate=([\d.]+)", text)
    if not m:
        raise RuntimeError(f"no BENCH line in output:\n{text[-2000:]}")
    return float(m.group(3)), float(m.group(2))


def uninstrumented(exe: Path, calls: int, threads: int = 1) -> float:
    out = subprocess.run([str(exe), str(calls), str(threads)], capture_output=True, text=True,
                         check=True)
    return parse_rate(out.stdout)[0]


def empty_hook(exe: Path, calls: int, threads: int = 1) -> float:
    device = frida.get_local_device()
    lines: list[str] = []
    device.on("output", lambda pid, fd, data: lines.append(data.decode()))
    pid = device.spawn([str(exe), str(calls), str(threads)], stdio="pipe")
    session = device.attach(pid)
    done = []
    session.on("detached", lambda *a: done.append(1))
    script = session.create_script(EMPTY_HOOK)
    script.load()
    device.resume(pid)
    while not done:
        time.sleep(0.05)
    time.sleep(0.1)
    return parse_rate("".join(lines))[0]


def ada(exe: Path, calls: int, out_dir: Path, threads: int = 1) -> tuple[float, int, int, float]:
    """(call rate, events expected, events recorded, loop seconds) under ada trace."""
    proc = subprocess.run([sys.executable, "-m", "tracer", "trace", "-q", "-o", str(out_dir),
                           "-f", str(exe), str(calls), str(threads), "-i", "bench_target!small"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    rate, seconds = parse_rate(proc.stdout)
    session = atf.open_session(proc.stdout.strip().splitlines()[-1])
    recorded = session.event_count
    shutil.rmtree(session.path.parent)
    return rate, 2 * calls * threads, recorded, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000_000, help="calls per run (default 20M)")
    ap.add_argument("--long-calls", type=int, default=100_000_000,
                    help="calls of the long run, sized to last >= 30 s (default 100M; 0 skips)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ada-bench-trace-"))
    try:
        exe = build(tmp)
        n = args.calls
        base = uninstrumented(exe, n)
        floor = empty_hook(exe, n)
        rate, want, got, secs = ada(exe, n, tmp / "t")
        print(f"one thread, {n:,} calls of small()")
        print(f"  uninstrumented          : {base / 1e6:8.2f} M calls/s")
        print(f"  empty CModule hook      : {floor / 1e6:8.2f} M calls/s   (Frida's floor)")
        print(f"  ada trace (index lane)  : {rate / 1e6:8.2f} M calls/s   "
              f"= {rate / floor:.2f}x empty hook (target >= 0.75)")
        print(f"    events expected {want:,}, recorded {got:,}, lost {want - got:,}")
        if args.long_calls:
            rate_l, want_l, got_l, secs_l = ada(exe, args.long_calls, tmp / "t")
            print(f"  long run, {args.long_calls:,} calls: {secs_l:.1f} s at "
                  f"{rate_l / 1e6:.2f} M calls/s ({rate_l / floor:.2f}x empty hook), events "
                  f"expected {want_l:,}, recorded {got_l:,}, lost {want_l - got_l:,}")
        half = n // 2
        base2 = uninstrumented(exe, half, 2)
        floor2 = empty_hook(exe, half, 2)
        rate2, want2, got2, _ = ada(exe, half, tmp / "t", threads=2)
        print(f"two threads, {2 * half:,} calls in all")
        print(f"  uninstrumented          : {base2 / 1e6:8.2f} M calls/s")
        print(f"  empty CModule hook      : {floor2 / 1e6:8.2f} M calls/s")
        print(f"  ada trace (index lane)  : {rate2 / 1e6:8.2f} M calls/s   "
              f"= {rate2 / floor2:.2f}x empty hook; lost {want2 - got2:,}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
