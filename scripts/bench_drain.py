#!/usr/bin/env python3
"""Drain benchmark: the host side of --detail alone, without Frida or a target.

Run: .venv/bin/python scripts/bench_drain.py [--gb N] [--out DIR] [--tsc] [--direct]
     .venv/bin/python scripts/bench_drain.py --index-only [--events N] [--pass-events N] [--tsc]
                                                                                 [--direct]
                                                                                 (no --detail)
This script plays the producer (tests/fake_region.py's FakeAgent): it fills one thread's
index and detail rings (in an ordinary buffer laid out as the shared region) with valid records,
a pass's worth at a time, and times only Drain.drain_once(), the code that runs in `ada trace
--detail`: walk and check the records, convert timestamps (--tsc), write both lanes with their
checksums (detail.atf through the page cache, or with --direct straight to the disk as `ada
trace --detail-io direct` does). It prints the drain's throughput in detail GB/s and records/s,
and what that means in calls/s of a target (two records per call), to compare with the
empty-hook rate that scripts/bench_trace.py measures.
The live benchmark swings with this VM's load; this one isolates the drain's own cost.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ada.atf.format import ARCH_X86_64, CLOCK_BOOTTIME, OS_LINUX
from ada.atf.writer import SessionWriter
from ada.tracer.record.detail_sinks import AlwaysDetailSink
from ada.tracer.record.drain import Drain
from ada.tracer.record.rings import RegionGeometry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_region import (RECORD_FIXED, FakeAgent, detail_records,  # noqa: E402
                         index_events)

STACK = 128  # the default stack window
RECORD = RECORD_FIXED + STACK
TID = 4242


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0, help="detail bytes to push (default 2 GB)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the session goes (default: a temporary directory on disk)")
    ap.add_argument("--tsc", action="store_true", help="raw-tick timestamps, converted")
    ap.add_argument("--direct", action="store_true",
                    help="detail.atf (with --index-only: index.atf) straight to the disk "
                         "(O_DIRECT) from the start, as `ada trace` does once the page cache "
                         "is under pressure")
    ap.add_argument("--pass-kb", type=int, default=1024,
                    help="detail produced between two drain passes (default 1024 KB)")
    ap.add_argument("--index-only", action="store_true",
                    help="no detail: the index lane alone, a 1 MiB ring (ada's default) drained "
                         "at half full, as `ada trace` without --detail runs")
    ap.add_argument("--events", type=int, default=40_000_000,
                    help="with --index-only: index events to push (default 40 M: 20 M calls)")
    ap.add_argument("--pass-events", type=int, default=None,
                    help="with --index-only: events a pass finds (default half the ring, as "
                         "the producer's wake; flat out, `ada trace` finds about 3,500: what a "
                         "pass costs beyond its events then counts)")
    args = ap.parse_args()
    if args.index_only:
        index_only(args)
        return

    agent = FakeAgent(RegionGeometry(1, 1 << 15, 4 << 20))
    slot = agent.register(TID)
    if args.tsc:
        agent.clock_ticks(base=(0, 0), pair=(10 ** 9, 4 * 10 ** 8))
    base = Path(tempfile.mkdtemp(prefix="ada-bench-drain-", dir=args.out))
    session = SessionWriter(base, 1, arch=ARCH_X86_64, os_id=OS_LINUX,
                            clock_type=CLOCK_BOOTTIME,
                            detail_go_direct=(lambda lane_bytes: True) if args.direct else None)
    drain = Drain(agent.reader, session, AlwaysDetailSink())
    per_pass = max(2, (args.pass_kb << 10) // RECORD // 2 * 2)
    total = int(args.gb * 1e9) // RECORD // per_pass * per_pass
    busy = 0.0
    seq = 0
    try:
        while seq < total:
            # Producer: the next pass's records, as the hot path would have written them.
            ts = 10 ** 9 + 100 * seq
            agent.emit_detail(slot, detail_records(per_pass, tid=TID, first_seq=seq, first_ts=ts,
                                                   stack_bytes=STACK))
            agent.emit(slot, index_events(per_pass, tid=TID, first_ts=ts,
                                          detail_seqs=seq + np.arange(per_pass)))
            seq += per_pass
            t = time.perf_counter()
            drain.drain_once()
            busy += time.perf_counter() - t
        t = time.perf_counter()
        drain.drain_once()  # the records held back for their index events
        drain.sink.finish(drain.thread_writers, 0)
        session.finalize()
        busy += time.perf_counter() - t
        written = drain.thread_writers[0].detail_count
        if written != total:
            raise SystemExit(f"drain wrote {written} detail records, expected {total}")
        gbs = total * RECORD / busy / 1e9
        how = (" with TSC conversion" if args.tsc else "") + \
            (", detail.atf direct (O_DIRECT)" if drain.thread_writers[0].detail_direct_from else "")
        print(f"drain, --detail path{how}: "
              f"{total:,} records ({total * RECORD / 1e9:.2f} GB) in {busy:.2f} s of drain time "
              f"({per_pass:,} records a pass)")
        print(f"  {gbs:.2f} GB/s of detail = {total / busy / 1e6:.2f} M records/s = "
              f"{total / busy / 2e6:.2f} M calls/s of a target (2 records a call)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def index_only(args: argparse.Namespace) -> None:
    """The drain of `ada trace` without --detail: what it costs per event, on its own."""
    ring = 1 << 15  # events: --ring-kb 1024
    agent = FakeAgent(RegionGeometry(1, ring, 0))
    slot = agent.register(TID)
    if args.tsc:
        agent.clock_ticks(base=(0, 0), pair=(10 ** 9, 4 * 10 ** 8))
    base = Path(tempfile.mkdtemp(prefix="ada-bench-drain-", dir=args.out))
    session = SessionWriter(base, 1, arch=ARCH_X86_64, os_id=OS_LINUX,
                            clock_type=CLOCK_BOOTTIME,
                            index_go_direct=(lambda lane_bytes: True) if args.direct else None)
    drain = Drain(agent.reader, session, None)
    per_pass = args.pass_events or ring // 2  # the producer wakes the drain at half full
    if not 0 < per_pass <= ring:
        raise SystemExit(f"--pass-events {per_pass}: must be 1 to {ring:,} (the ring)")
    total = args.events // per_pass * per_pass
    chunk = index_events(per_pass, tid=TID, first_ts=10 ** 9)
    busy = 0.0
    try:
        for done in range(0, total, per_pass):
            chunk["timestamp_ns"] = 10 ** 9 + 50 * (done + np.arange(per_pass, dtype=np.uint64))
            agent.emit(slot, chunk)
            t = time.perf_counter()
            drain.drain_once()
            busy += time.perf_counter() - t
        t = time.perf_counter()
        session.finalize()
        busy += time.perf_counter() - t
        written = drain.thread_writers[0].index_count
        if written != total:
            raise SystemExit(f"drain wrote {written} index events, expected {total}")
        print(f"drain, index lane only{' with TSC conversion' if args.tsc else ''}"
              f"{', straight to the disk' if args.direct else ''}: "
              f"{total:,} events ({total * 32 / 1e9:.2f} GB) in {busy:.2f} s of drain time "
              f"({per_pass:,} events a pass)")
        print(f"  {total * 32 / busy / 1e9:.2f} GB/s = {total / busy / 1e6:.2f} M events/s = "
              f"{total / busy / 2e6:.2f} M calls/s of a target (2 events a call)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
