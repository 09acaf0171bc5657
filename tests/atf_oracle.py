"""An independent encoder of ATF v2 files, written from docs/format.md with struct.

Tests use it as an oracle: files built here do not go through atf.format or
atf.writer, so a wrong offset in the library cannot hide itself.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

NONE32 = 0xFFFFFFFF
NONE64 = 0xFFFFFFFFFFFFFFFF


def index_header_r1(*, thread_id=1, arch=1, os_id=4, flags=0, clock=3, count=0,
                    footer_offset=0, t0=0, t1=0, version=1, magic=b"ATI2", endian=1,
                    event_size=32, events_offset=64) -> bytes:
    return struct.pack("<4sBBBBII B7x II QQQQ", magic, endian, version, arch, os_id, flags,
                       thread_id, clock, event_size, count, events_offset, footer_offset, t0, t1)


def index_header_r2(*, thread_id=1, arch=1, os_id=4, flags=0, clock=3, count=0,
                    footer_offset=0, t0=0, t1=0) -> bytes:
    return struct.pack("<4sBBBBII B3x I Q QQQQ", b"ATI2", 1, 2, arch, os_id, flags, thread_id,
                       clock, 32, count, 64, footer_offset, t0, t1)


def index_event_r1(ts, fid, tid, kind, depth, dseq=NONE32) -> bytes:
    return struct.pack("<QQIIII", ts, fid, tid, kind, depth, dseq)


def index_event_r2(ts, fid, kind, dseq=NONE64) -> bytes:
    return struct.pack("<QQQB7x", ts, fid, dseq, kind)


def index_footer(events: bytes, count: int, t0: int, t1: int, checksum: int | None = None) -> bytes:
    crc = crc32c.crc32c(events) if checksum is None else checksum
    return struct.pack("<4sIQQQQ24x", b"2ITA", crc, count, t0, t1, len(events))


def index_file_r1(events: list[tuple], *, thread_id=1, flags=0, finalize=True,
                  arch=1) -> bytes:
    body = b"".join(index_event_r1(*e) for e in events)
    if not finalize:
        return index_header_r1(thread_id=thread_id, flags=flags, arch=arch) + body
    t0 = events[0][0] if events else 0
    t1 = events[-1][0] if events else 0
    n = len(events)
    return (index_header_r1(thread_id=thread_id, flags=flags, count=n, footer_offset=64 + len(body),
                            t0=t0, t1=t1, arch=arch)
            + body + index_footer(body, n, t0, t1))


def index_file_r2(events: list[tuple], *, thread_id=1, flags=0) -> bytes:
    body = b"".join(index_event_r2(*e) for e in events)
    t0 = events[0][0] if events else 0
    t1 = events[-1][0] if events else 0
    return (index_header_r2(thread_id=thread_id, flags=flags, count=len(events),
                            footer_offset=64 + len(body), t0=t0, t1=t1)
            + body + index_footer(body, len(events), t0, t1))


def detail_header(*, thread_id=1, arch=1, os_id=4, version=1, count=0, length=0, s0=0,
                  s1=0) -> bytes:
    return struct.pack("<4sBBBBIII QQQQQ I", b"ATD2", 1, version, arch, os_id, 0, thread_id, 0,
                       64, count, length, s0, s1, 0)


def function_record_r1(index_seq, tid, ts, fid, regs, lr, fp, sp, stack=b"", call=True,
                       flags=0) -> bytes:
    regs = list(regs) + [0] * (8 - len(regs))
    payload = struct.pack("<Q8QQQQHH", fid, *regs, lr, fp, sp, len(stack), 0) + stack
    return struct.pack("<IHHIIQ", 24 + len(payload), 3 if call else 4, flags, index_seq, tid,
                       ts) + payload


def function_record_r2(index_seq, ts, fid, regs, lr, fp, sp, stack=b"", call=True) -> bytes:
    regs = list(regs) + [0] * (8 - len(regs))
    payload = struct.pack("<Q8QQQQHH", fid, *regs, lr, fp, sp, len(stack), 0) + stack
    return struct.pack("<IHHQQ", 24 + len(payload), 3 if call else 4, 0, index_seq, ts) + payload


def detail_footer(events: bytes, count: int, t0: int, t1: int) -> bytes:
    return struct.pack("<4sIQQQQ24x", b"2DTA", crc32c.crc32c(events), count, len(events), t0, t1)


def detail_file(records: list[bytes], timestamps: list[int], index_seqs: list[int], *,
                thread_id=1, version=1, arch=1, finalize=True) -> bytes:
    body = b"".join(records)
    if not finalize:
        return detail_header(thread_id=thread_id, version=version, arch=arch) + body
    n = len(records)
    return (detail_header(thread_id=thread_id, version=version, arch=arch, count=n,
                          length=len(body), s0=min(index_seqs, default=0),
                          s1=max(index_seqs, default=0))
            + body + detail_footer(body, n, timestamps[0] if n else 0,
                                   timestamps[-1] if n else 0))


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
