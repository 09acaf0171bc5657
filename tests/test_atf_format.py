"""The dtypes of atf.format against the byte tables of docs/format.md (via the struct oracle)."""

import struct

import numpy as np
import pytest

import atf_oracle as O
from ada.atf import format as F


@pytest.mark.parametrize("dtype,size", [
    (F.INDEX_HEADER_R1, 64), (F.INDEX_HEADER_R2, 64), (F.INDEX_EVENT, 32),
    (F.INDEX_EVENT_R2, 32), (F.INDEX_FOOTER, 64), (F.DETAIL_HEADER, 64),
    (F.DETAIL_EVENT_HEADER_R1, 24), (F.DETAIL_EVENT_HEADER_R2, 24),
    (F.FUNCTION_PAYLOAD, 100), (F.FUNCTION_RECORD_R1, 124), (F.DETAIL_FOOTER, 64)])
def test_structure_sizes(dtype, size):
    assert dtype.itemsize == size


def test_index_header_r1_fields_match_the_table():
    raw = O.index_header_r1(thread_id=0x11223344, arch=2, os_id=1, flags=1, clock=1, count=77,
                            footer_offset=0x1234, t0=5, t1=9)
    h = np.frombuffer(raw, F.INDEX_HEADER_R1)[0]
    assert bytes(h["magic"]) == b"ATI2"
    assert (h["endian"], h["version"], h["arch"], h["os"]) == (1, 1, 2, 1)
    assert (h["flags"], h["thread_id"], h["clock_type"]) == (1, 0x11223344, 1)
    assert (h["event_size"], h["event_count"], h["events_offset"]) == (32, 77, 64)
    assert (h["footer_offset"], h["time_start_ns"], h["time_end_ns"]) == (0x1234, 5, 9)


def test_index_header_r2_has_u64_count_at_24():
    raw = O.index_header_r2(count=(1 << 40) + 3)
    h = np.frombuffer(raw, F.INDEX_HEADER_R2)[0]
    assert h["event_size"] == 32 and h["event_count"] == (1 << 40) + 3 and h["version"] == 2


def test_index_event_layouts():
    e = np.frombuffer(O.index_event_r1(1, 2, 3, 2, 5, 6), F.INDEX_EVENT)[0]
    assert tuple(int(e[n]) for n in F.INDEX_EVENT_FIELDS) == (1, 2, 3, 2, 5, 6)
    e2 = np.frombuffer(O.index_event_r2(1, 2, 3, 9), F.INDEX_EVENT_R2)[0]
    assert (e2["timestamp_ns"], e2["function_id"], e2["event_kind"], e2["detail_seq"]) == (1, 2, 3, 9)


def test_detail_structures():
    h = np.frombuffer(O.detail_header(thread_id=4, count=5, length=6, s0=7, s1=8),
                      F.DETAIL_HEADER)[0]
    assert (h["events_offset"], h["event_count"], h["bytes_length"]) == (64, 5, 6)
    assert (h["index_seq_start"], h["index_seq_end"], h["thread_id"]) == (7, 8, 4)
    rec = O.function_record_r1(3, 4, 5, 6, [10, 11, 12, 13, 14, 15, 16, 17], 18, 19, 20, b"xy")
    r = np.frombuffer(rec[:124], F.FUNCTION_RECORD_R1)[0]
    assert (r["total_length"], r["event_type"], r["index_seq"], r["thread_id"]) == (126, 3, 3, 4)
    assert (r["timestamp"], r["function_id"]) == (5, 6)
    assert list(r["regs"]) == list(range(10, 18))
    assert (r["lr"], r["fp"], r["sp"], r["stack_size"]) == (18, 19, 20, 2)
    f = np.frombuffer(O.detail_footer(b"abc", 1, 2, 3), F.DETAIL_FOOTER)[0]
    assert (f["event_count"], f["bytes_length"], f["time_start_ns"], f["time_end_ns"]) == (1, 3, 2, 3)


def test_function_id_packing():
    assert F.function_id(1, 3) == 0x100000003
    assert F.split_function_id(0x200000005) == (2, 5)
    assert struct.pack("<Q", F.function_id(0, 7))[:4] == b"\x07\0\0\0"


@pytest.mark.parametrize("offsets", [[5], [0, 40, 80, 120], [3, 50, 61, 200]],
                         ids=["one", "evenly-spaced", "irregular"])
def test_scatter_writes_what_gather_reads_and_nothing_else(offsets):
    from ada.atf.records import gather, scatter
    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 300, dtype=np.uint8)
    before = buf.copy()
    offsets = np.array(offsets, dtype=np.int64)
    values = rng.integers(0, 2**63, len(offsets), dtype=np.uint64)
    scatter(buf, offsets, 16, values)
    assert gather(buf, offsets, 16, "<u8").tolist() == values.tolist()
    for i, off in enumerate(offsets):
        assert bytes(buf[off + 16:off + 24]) == struct.pack("<Q", int(values[i]))
    touched = np.zeros(len(buf), dtype=bool)
    for off in offsets:
        touched[off + 16:off + 24] = True
    assert np.array_equal(buf[~touched], before[~touched])
