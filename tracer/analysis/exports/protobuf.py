"""Protocol buffers' wire format, written directly: a few bytes-level helpers for the handful
of small messages (descriptors, interned names), and a vectorised writer for the millions of
TrackEvent packets (a varint is written as a pass per byte position over whole arrays).

https://protobuf.dev/programming-guides/encoding/: a field is a tag varint (number << 3 | wire
type) then a varint (type 0) or a length varint and bytes (type 2).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

VARINT, LEN = 0, 2


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def uint(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value)


def message(number: int, *parts: bytes | Iterable[bytes]) -> bytes:
    body = b"".join(p if isinstance(p, bytes) else b"".join(p) for p in parts)
    return tag(number, LEN) + varint(len(body)) + body


def string(number: int, text: str) -> bytes:
    return message(number, text.encode("utf-8", "replace"))


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each uint64 takes as a varint (1 to 10): one comparison per size the values'
    range spans (none when they all take the same)."""
    v = values.astype(np.uint64, copy=False)
    if len(v) == 0:
        return np.zeros(0, dtype=np.int64)
    low, high = len(varint(int(v.min()))), len(varint(int(v.max())))
    size = np.full(len(v), low, dtype=np.int64)
    for k in range(low, high):
        size += v >= np.uint64(1 << (7 * k))
    return size


Group = tuple[np.ndarray, bytes, list[tuple[np.ndarray, int, int]]]


def rows_of_bytes(n: int, groups: list[Group]) -> np.ndarray:
    """Messages that differ only in a few varints, back to back, as bytes.

    Each group is (its rows: message numbers, its bytes with room left for the varints, the
    varints: (a value per row, position in the message, size in bytes)): within a group every
    message has the same layout. Built as a matrix of a row per message and a column per
    byte, a column written at once for a whole group, then read row by row without the
    padding."""
    width = max((len(t) for _, t, _ in groups), default=0)
    if width > 255:
        raise ValueError(f"a message of {width} bytes: too long for this writer")
    matrix = np.zeros((n, width), dtype=np.uint8)
    length = np.zeros(n, dtype=np.uint8)
    for rows, template, varints in groups:
        block = np.zeros((len(rows), width), dtype=np.uint8)
        block[:, :len(template)] = np.frombuffer(template, dtype=np.uint8)
        for values, at, size in varints:
            v = values.astype(np.uint64, copy=False)
            for k in range(size):
                byte = (v >> np.uint64(7 * k)) & np.uint64(0x7F)
                block[:, at + k] = byte | np.uint64(0x80) if k + 1 < size else byte
        matrix[rows] = block
        length[rows] = len(template)
    return matrix[np.arange(width, dtype=np.uint8) < length[:, None]]
