"""The host's view of the ring region, on synthetic regions (no Frida needed)."""

import numpy as np

import atf_oracle as O
from ada.tracer.record.rings import RegionGeometry, RingReader


def test_detail_pieces_split_whole_records_across_the_wrap():
    g = RegionGeometry(max_threads=1, index_capacity=16, detail_capacity=1024)
    buf = np.zeros(g.size, dtype=np.uint8)
    ring = buf[g.detail_rings_offset:g.detail_rings_offset + 1024]
    records = [O.function_record_r1(i, 1, i, 1, [i], 0, 0, 0, bytes([i]) * (8 + i % 3))
               for i in range(40)]
    stream = b"".join(records)
    reader = RingReader(buf, g)
    start = 0
    # Batches of at most 7 records (< 1024 bytes): a producer never has more than the ring
    # outstanding.
    for lo, hi in ((0, 6), (6, 13), (13, 19), (19, 24), (24, 31), (31, 37), (37, 40)):
        data = b"".join(records[lo:hi])
        assert len(data) <= 1024
        for k, byte in enumerate(data):  # the producer writes modulo the ring size
            ring[(start + k) % 1024] = byte
        pieces = reader.detail_pieces(0, start, start + len(data))
        assert b"".join(p.tobytes() for p in pieces) == data
        for p in pieces:  # each piece is whole records, back to back
            walked = 0
            while walked < len(p):
                walked += int(p[walked:walked + 4].view("<u4")[0])
            assert walked == len(p)
        start += len(data)
    assert start == len(stream) and start > 2 * 1024  # wrapped more than once
