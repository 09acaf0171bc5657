"""How often ada's thread hold cuts a program's sleep short (EINTR), against a program made
to meet the race: its two threads each spin 200 us on a CPU and then sleep 1 ms, over and over
(tests/targets/cut_sleeps.c, `flicker`).

    python scripts/hold_race_probe.py [--runs 20] [--engine inline|frida]

The hold signals only threads it sees on a CPU; one that goes to sleep between that look and
the signal wakes with EINTR (poll, nanosleep and the like are not restarted after a handler).
Each run is one `ada trace -p PID -i cut_sleeps!work --duration 0.2` (two holds at least:
the hook written, then put back). Prints, per run and in all, the EINTRs the program saw, the
count ada's manifest gives (thread_hold.system_calls_cut_short) and the holds; exits 1 when
the two counts differ. Run it from an old checkout (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--engine", default="inline", choices=["inline", "frida"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hold_race_"))
    exe = work / "cut_sleeps"
    subprocess.run(["gcc", "-O1", "-g", "-rdynamic", "-pthread", "-o", str(exe),
                    str(ROOT / "tests" / "targets" / "cut_sleeps.c")], check=True)
    proc = subprocess.Popen([str(exe), "flicker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    counted = holds = 0
    try:
        for run in range(args.runs):
            out = work / f"run{run}"
            r = subprocess.run([sys.executable, "-m", "ada", "trace", "-q", "-o",
                                str(out), "--hook-engine", args.engine, "-p", str(proc.pid),
                                "-i", "cut_sleeps!work", "--duration", "0.2"],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                sys.exit(f"run {run + 1}: ada failed: {r.stderr.strip()[-300:]}")
            manifest = json.loads(next(out.glob("session_*/pid_*/manifest.json")).read_text())
            hold = manifest.get("thread_hold") or {}
            counted = hold.get("system_calls_cut_short", 0)  # ada's count is per recording
            holds += hold.get("holds", 0)
            print(f"run {run + 1}: holds {hold.get('holds')} cut short (ada) {counted}",
                  flush=True)
            time.sleep(0.05)
    finally:
        proc.stdin.write("end\n")
        proc.stdin.flush()
        line = proc.stdout.readline().split()
        proc.wait(timeout=30)
    seen = int(line[1])
    total = sum(json.loads(p.read_text()).get("thread_hold", {}).get("system_calls_cut_short", 0)
                for p in work.glob("run*/session_*/pid_*/manifest.json"))
    print(f"{args.runs} recordings, {holds} holds, engine {args.engine}: the program saw "
          f"{seen} EINTR, ada counted {total} ({seen / max(holds, 1):.3f} per hold)")
    sys.exit(0 if total == seen else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
