#!/usr/bin/env python3
"""Drain benchmark: the host side of --detail alone, without Frida or a target.

Run: .venv/bin/python scripts/bench_drain.py [--gb N] [--out DIR] [--tsc] [--direct]
This script plays the producer: it fills one thread's index and detail rings (in an ordinary
buffer laid out as the shared region) with valid records, a pass's worth at a time, and times
only Drain.drain_once(), the code that runs in `ada trace --detail`: walk and check the records,
convert timestamps (--tsc), write both lanes with their checksums (detail.atf through the page
cache, or with --direct straight to the disk as `ada trace --detail-io direct` does). It prints the drain's
throughput in detail GB/s and records/s, and what that means in calls/s of a target (two
records per call), to compare with the empty-hook rate that scripts/bench_trace.py measures.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atf import format as F  # noqa: E402
from atf.writer import SessionWriter  # noqa: E402
from tracer.detail import AlwaysDetail  # noqa: E402
from tracer.drain import Drain  # noqa: E402
from tracer.rings import (H_CLOCK_BASE_NS, H_CLOCK_BASE_TICKS, H_CLOCK_PAIR_NS,  # noqa: E402
                          H_CLOCK_PAIR_TICKS, H_CLOCK_TICKS, H_REGISTERED, HEADER_SIZE,
                          S_DETAIL_HEAD, S_HEAD, S_STATE, S_TID, SLOT_SIZE, RegionGeometry,
                          RingReader)

RECORD = 124 + 128  # a function record with the default 128-byte stack window
TID = 4242


def records(n: int, first_seq: int, first_ts: int) -> np.ndarray:
    """n detail records as the hot path writes them (revision 1, function call/return)."""
    rec = np.zeros((n, RECORD), dtype=np.uint8)
    u32 = rec[:, :24].view("<u4")
    rec[:, 0:4].view("<u4")[:, 0] = RECORD
    rec[:, 4:6].view("<u2")[:, 0] = np.where(np.arange(n) % 2 == 0, F.DETAIL_FUNCTION_CALL,
                                              F.DETAIL_FUNCTION_RETURN)
    u32[:, 2] = first_seq + np.arange(n, dtype=np.uint32)
    u32[:, 3] = TID
    rec[:, 16:24].view("<u8")[:, 0] = first_ts + 100 * np.arange(n, dtype=np.uint64)
    rec[:, 120:122].view("<u2")[:, 0] = 128
    return rec.reshape(-1)


def index_events(n: int, first_seq: int, first_ts: int) -> np.ndarray:
    ev = np.zeros(n, dtype=F.INDEX_EVENT)
    ev["timestamp_ns"] = first_ts + 100 * np.arange(n, dtype=np.uint64)
    ev["function_id"] = 1
    ev["thread_id"] = TID
    ev["event_kind"] = np.where(np.arange(n) % 2 == 0, F.EVENT_CALL, F.EVENT_RETURN)
    ev["detail_seq"] = first_seq + np.arange(n, dtype=np.uint32)
    return ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0, help="detail bytes to push (default 2 GB)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the session goes (default: a temporary directory on disk)")
    ap.add_argument("--tsc", action="store_true", help="raw-tick timestamps, converted")
    ap.add_argument("--direct", action="store_true",
                    help="detail.atf straight to the disk (O_DIRECT) from the start")
    ap.add_argument("--pass-kb", type=int, default=1024,
                    help="detail produced between two drain passes (default 1024 KB)")
    args = ap.parse_args()

    geometry = RegionGeometry(1, 1 << 15, 4 << 20)
    buf = np.zeros(geometry.size, dtype=np.uint8)
    u32, u64 = buf[:HEADER_SIZE + SLOT_SIZE].view("<u4"), buf[:HEADER_SIZE + SLOT_SIZE].view("<u8")
    u32[H_REGISTERED[0] // 4] = 1
    u32[(HEADER_SIZE + S_STATE) // 4] = 1
    u32[(HEADER_SIZE + S_TID) // 4] = TID
    if args.tsc:
        u32[H_CLOCK_TICKS[0] // 4] = 1
        u64[H_CLOCK_BASE_TICKS[0] // 8], u64[H_CLOCK_BASE_NS[0] // 8] = 0, 0
        u64[H_CLOCK_PAIR_TICKS[0] // 8], u64[H_CLOCK_PAIR_NS[0] // 8] = 10 ** 9, 4 * 10 ** 8
    rings = RingReader(buf, geometry)
    base = Path(tempfile.mkdtemp(prefix="ada-bench-drain-", dir=args.out))
    session = SessionWriter(base, 1, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                            clock_type=F.CLOCK_BOOTTIME,
                            direct_detail=(lambda: True) if args.direct else None)
    drain = Drain(rings, session, AlwaysDetail())
    per_pass = max(2, (args.pass_kb << 10) // RECORD // 2 * 2)
    total = int(args.gb * 1e9) // RECORD // per_pass * per_pass
    detail_ring = buf[geometry.detail_rings_offset:geometry.detail_rings_offset + (4 << 20)]
    index_ring = buf[geometry.index_rings_offset:geometry.detail_rings_offset].view(F.INDEX_EVENT)
    template = records(per_pass, 0, 10 ** 9)
    busy = 0.0
    seq = 0
    try:
        while seq < total:
            # Producer: the next pass's records, as the hot path would have written them.
            d_head = seq * RECORD
            pos = d_head % len(detail_ring)
            chunk = records(per_pass, seq, 10 ** 9 + 100 * seq) if seq else template
            first = min(len(chunk), len(detail_ring) - pos)
            detail_ring[pos:pos + first] = chunk[:first]
            detail_ring[:len(chunk) - first] = chunk[first:]
            ev = index_events(per_pass, seq, 10 ** 9 + 100 * seq)
            ipos = seq % len(index_ring)
            ifirst = min(per_pass, len(index_ring) - ipos)
            index_ring[ipos:ipos + ifirst] = ev[:ifirst]
            index_ring[:per_pass - ifirst] = ev[ifirst:]
            seq += per_pass
            u64[(HEADER_SIZE + S_DETAIL_HEAD) // 8] = seq * RECORD
            u64[(HEADER_SIZE + S_HEAD) // 8] = seq
            t = time.perf_counter()
            drain.drain_once()
            busy += time.perf_counter() - t
        t = time.perf_counter()
        drain.drain_once()  # the records held back for their index events
        drain.detail.finish(drain.writers, 0)
        session.finalize()
        busy += time.perf_counter() - t
        written = drain.writers[0].detail_count
        if written != total:
            raise SystemExit(f"drain wrote {written} detail records, expected {total}")
        gbs = total * RECORD / busy / 1e9
        how = (" with TSC conversion" if args.tsc else "") + \
            (", detail.atf direct (O_DIRECT)" if drain.writers[0].detail_direct_from else "")
        print(f"drain, --detail path{how}: "
              f"{total:,} records ({total * RECORD / 1e9:.2f} GB) in {busy:.2f} s of drain time "
              f"({per_pass:,} records a pass)")
        print(f"  {gbs:.2f} GB/s of detail = {total / busy / 1e6:.2f} M records/s = "
              f"{total / busy / 2e6:.2f} M calls/s of a target (2 records a call)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
