"""Regenerates the committed fixture corpus under tests/data/ from tests/atf_oracle.py.

Run by hand (python tests/data/make_corpus.py) when the corpus changes; the
tests read the committed files and check them against CORPUS_FACTS below.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import atf_oracle as O  # noqa: E402

# What each fixture holds, the expectations tests compare the readers against.
CORPUS_FACTS = {
    "r1_session": {"threads": {0: 6, 1: 4}, "detail": {0: 2}},
    "r1_recovered": {"threads": {0: 3}},
    "r2_session": {"threads": {0: 6}, "depths": [0, 1, 1, 0, 0, 0], "detail": {0: 1}},
    "no_manifest": {"threads": {0: 2, 3: 2}},
}


def thread0_r1() -> tuple[list[tuple], list[bytes]]:
    ev = [(1000, 0x1, 501, 1, 0, O.NONE32), (1100, 0x2, 501, 1, 1, 0),
          (1200, 0x2, 501, 2, 1, 1), (1300, 0x1, 501, 2, 0, O.NONE32),
          (1400, 0x100000003, 501, 1, 0, O.NONE32), (1500, 0x100000003, 501, 2, 0, O.NONE32)]
    det = [O.function_record_r1(1, 501, 1100, 0x2, [7, 8], 0x401000, 0x7ff0, 0x7fe0,
                                bytes(range(16))),
           O.function_record_r1(2, 501, 1200, 0x2, [0, 0, 0, 0, 0, 0, 15], 0x401000, 0x7ff0,
                                0x7fe8, b"\xaa" * 8, call=False)]
    return ev, det


def main() -> None:
    for name in ("r1_session", "r1_recovered", "r2_session", "no_manifest", "corrupt"):
        shutil.rmtree(HERE / name, ignore_errors=True)

    s = HERE / "r1_session" / "pid_501"
    ev, det = thread0_r1()
    O.write(s / "thread_0" / "index.atf", O.index_file_r1(ev, thread_id=501, flags=1))
    O.write(s / "thread_0" / "detail.atf",
            O.detail_file(det, [1100, 1200], [1, 2], thread_id=501))
    ev1 = [(1050, 0x1, 502, 1, 0), (1250, 0x2, 502, 1, 1), (1260, 0x2, 502, 2, 1),
           (1450, 0x1, 502, 2, 0)]
    O.write(s / "thread_1" / "index.atf", O.index_file_r1(ev1, thread_id=502))
    (s / "manifest.json").write_text(json.dumps({
        "format": "ATF v2", "process": {"pid": 501, "name": "fixture"},
        "threads": [{"id": 0, "tid": 501, "index_events": 6, "detail_events": 2,
                     "has_detail": True},
                    {"id": 1, "tid": 502, "index_events": 4, "detail_events": 0,
                     "has_detail": False}],
        "symbols": [{"function_id": "0x%016x" % 1, "name": "main"},
                    {"function_id": "0x%016x" % 2, "name": "work"}]}, indent=1))

    r = HERE / "r1_recovered" / "pid_7"
    ev = [(10, 1, 7, 1, 0), (20, 1, 7, 2, 0), (30, 1, 7, 1, 0)]
    data = O.index_file_r1(ev, thread_id=7, finalize=False) + b"\x01" * 17  # partial event
    O.write(r / "thread_0" / "index.atf", data)
    (r / "manifest.json").write_text(json.dumps({"threads": [{"id": 0}]}))

    r2 = HERE / "r2_session" / "pid_9"
    ev = [(100, 1, 1), (110, 2, 1, 0), (120, 2, 2), (130, 1, 2), (140, 3, 1), (150, 3, 2)]
    O.write(r2 / "thread_0" / "index.atf", O.index_file_r2(
        [e if len(e) == 4 else (*e, O.NONE64) for e in ev], thread_id=9, flags=1))
    O.write(r2 / "thread_0" / "detail.atf", O.detail_file(
        [O.function_record_r2(1, 110, 2, [1, 2, 3], 0xabc, 0x10, 0x20, b"\x11" * 4)],
        [110], [1], thread_id=9, version=2, arch=2))
    (r2 / "manifest.json").write_text(json.dumps({"threads": [{"id": 0}]}))

    n = HERE / "no_manifest" / "pid_3"
    for tid in (0, 3):
        O.write(n / f"thread_{tid}" / "index.atf", O.index_file_r1(
            [(5 + tid, 1, 30 + tid, 1, 0), (9 + tid, 1, 30 + tid, 2, 0)], thread_id=30 + tid))

    c = HERE / "corrupt"
    good = O.index_file_r1([(1, 1, 1, 1, 0), (2, 1, 1, 2, 0)])
    O.write(c / "bad_magic.atf", b"XXXX" + good[4:])
    O.write(c / "big_endian.atf", good[:4] + b"\x02" + good[5:])
    O.write(c / "version9.atf", good[:5] + b"\x09" + good[6:])
    O.write(c / "short_header.atf", good[:40])
    bad_crc = bytearray(good)
    bad_crc[64] ^= 0xFF  # an event byte changes after the checksum was taken
    O.write(c / "bad_crc.atf", bytes(bad_crc))
    absurd = bytearray(good)
    absurd[-56:-48] = (1 << 60).to_bytes(8, "little")  # footer event_count
    O.write(c / "absurd_count.atf", bytes(absurd))
    rec = O.function_record_r1(0, 1, 1, 1, [], 0, 0, 0, b"\x00" * 8)
    bad_len = bytearray(rec)
    bad_len[0:4] = (2 ** 31).to_bytes(4, "little")
    O.write(c / "detail_huge_length.atf", O.detail_file([bytes(bad_len)], [1], [0]))


if __name__ == "__main__":
    main()
