"""Walking and gathering length-prefixed detail records without a Python loop per record.

Detail events are variable length, so finding event N needs the offsets of all
events before it. Our recorder writes runs of equal-length records (the stack
window has a fixed size), so the walk checks whole runs at once with a strided
numpy view and only steps record by record where lengths change.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .format import (DETAIL_EVENT_HEADER_SIZE, DETAIL_FUNCTION_CALL, DETAIL_FUNCTION_RETURN,
                     FUNCTION_RECORD_FIXED_SIZE, MAX_STACK_BYTES, MAX_STRINGS_SIZE, REVISION_1,
                     detail_event_header_dtype)

_FIRST_RUN = 64
_MAX_RUN = 1 << 20


class Walk(NamedTuple):
    offsets: np.ndarray  # int64 offset of each complete, well-formed record
    end: int  # offset just past the last accepted record
    problem: str | None  # why the walk stopped before `limit`, or None
    problem_offset: int | None
    stride: int  # the common record length when all are equal, else 0


def walk_records(buf: np.ndarray, start: int, limit: int, revision: int = REVISION_1,
                 max_count: int | None = None) -> Walk:
    """Offsets of back-to-back detail records in buf[start:limit].

    Stops at the first record that does not fit or is malformed (crash
    recovery), or after max_count records. `buf` is a uint8 array.
    """
    limit = min(limit, len(buf))
    header_dtype = detail_event_header_dtype(revision)
    uniform = _uniform_walk(buf, start, limit, header_dtype, max_count)
    if uniform is not None:
        return uniform
    pieces: list[np.ndarray] = []
    lengths_seen: set[int] = set()
    found = 0
    pos = start
    run = _FIRST_RUN
    problem = None
    while pos < limit and (max_count is None or found < max_count):
        if limit - pos < DETAIL_EVENT_HEADER_SIZE:
            problem = (f"{limit - pos} trailing bytes, less than a "
                       f"{DETAIL_EVENT_HEADER_SIZE}-byte detail event header")
            break
        length = int(buf[pos:pos + 4].view("<u4")[0])
        if length < DETAIL_EVENT_HEADER_SIZE:
            problem = (f"total_length {length} is smaller than the "
                       f"{DETAIL_EVENT_HEADER_SIZE}-byte event header")
            break
        if length > limit - pos:
            problem = f"record of total_length {length} runs past the end ({limit - pos} bytes left)"
            break
        count = min((limit - pos) // length, run)
        if max_count is not None:
            count = min(count, max_count - found)
        lengths = np.ndarray((count,), dtype="<u4", buffer=buf, offset=pos, strides=(length,))
        mismatch = np.flatnonzero(lengths != length)
        good = count if len(mismatch) == 0 else int(mismatch[0])
        pieces.append(pos + length * np.arange(good, dtype=np.int64))
        lengths_seen.add(length)
        found += good
        pos += good * length
        run = min(run * 2, _MAX_RUN) if good == count else _FIRST_RUN
    offsets = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    stride = lengths_seen.pop() if len(lengths_seen) == 1 else 0
    if problem is None and len(offsets):
        bad, problem = _first_malformed(buf, offsets, header_dtype, stride)
        if bad is not None:
            pos = int(offsets[bad])
            offsets = offsets[:bad]
    problem_offset = pos if problem is not None else None
    return Walk(offsets, pos, problem, problem_offset, stride)


def _uniform_walk(buf: np.ndarray, start: int, limit: int, header_dtype: np.dtype,
                  max_count: int | None) -> Walk | None:
    """The common case in one vectorized check: records of one length filling the range."""
    size = limit - start
    if size < DETAIL_EVENT_HEADER_SIZE:
        return None
    length = int(buf[start:start + 4].view("<u4")[0])
    if length < DETAIL_EVENT_HEADER_SIZE or size % length:
        return None
    n = size // length
    if max_count is not None and n > max_count:
        return None
    lengths = np.ndarray((n,), dtype="<u4", buffer=buf, offset=start, strides=(length,))
    if not bool(np.all(lengths == length)):
        return None
    offsets = start + length * np.arange(n, dtype=np.int64)
    bad, problem = _first_malformed(buf, offsets, header_dtype, length)
    if bad is not None:
        return None  # let the general walk find and report it
    return Walk(offsets, limit, None, None, length)


def _first_malformed(buf: np.ndarray, offsets: np.ndarray, header_dtype: np.dtype,
                     stride: int) -> tuple[int | None, str | None]:
    """First function record whose length disagrees with its stack_size and strings_size."""
    types = gather(buf, offsets, header_dtype.fields["event_type"][1], "<u2", stride)
    is_function = (types == DETAIL_FUNCTION_CALL) | (types == DETAIL_FUNCTION_RETURN)
    if not is_function.any():
        return None, None
    if stride and is_function.all():
        # One length for all: one stack_size check covers every record.
        stack = gather(buf, offsets, DETAIL_EVENT_HEADER_SIZE + 96, "<u2", stride)
        strings = gather(buf, offsets, DETAIL_EVENT_HEADER_SIZE + 98, "<u2", stride)
        if stride >= FUNCTION_RECORD_FIXED_SIZE and not strings.any() and \
                bool(np.all(stack == stride - FUNCTION_RECORD_FIXED_SIZE)) and \
                stride - FUNCTION_RECORD_FIXED_SIZE <= MAX_STACK_BYTES:
            return None, None
    lengths = gather(buf, offsets, 0, "<u4", stride)
    short = is_function & (lengths < FUNCTION_RECORD_FIXED_SIZE)
    stack = np.zeros(len(offsets), dtype=np.int64)
    strings = np.zeros(len(offsets), dtype=np.int64)
    ok_len = is_function & ~short
    stack[ok_len] = gather(buf, offsets[ok_len], DETAIL_EVENT_HEADER_SIZE + 96, "<u2")
    strings[ok_len] = gather(buf, offsets[ok_len], DETAIL_EVENT_HEADER_SIZE + 98, "<u2")
    wrong = ok_len & ((stack > MAX_STACK_BYTES) | (strings > MAX_STRINGS_SIZE)
                      | (lengths != FUNCTION_RECORD_FIXED_SIZE + stack + strings))
    bad = np.flatnonzero(short | wrong)
    if len(bad) == 0:
        return None, None
    i = int(bad[0])
    if short[i]:
        return i, (f"function record of total_length {int(lengths[i])} is shorter than "
                   f"{FUNCTION_RECORD_FIXED_SIZE} bytes")
    return i, (f"function record of total_length {int(lengths[i])} does not match its "
               f"stack_size {int(stack[i])} and strings_size {int(strings[i])} (expected "
               f"{FUNCTION_RECORD_FIXED_SIZE} + stack_size + strings_size, at most "
               f"{MAX_STACK_BYTES} and {MAX_STRINGS_SIZE})")


def gather(buf: np.ndarray, offsets: np.ndarray, field_offset: int, dtype: str,
           stride: int = 0) -> np.ndarray:
    """The little-endian integer at offsets[i] + field_offset for every i, as an array.

    `stride`, when the caller knows the offsets are evenly spaced by it, skips the check.
    """
    dt = np.dtype(dtype)
    n = len(offsets)
    if n == 0:
        return np.zeros(0, dtype=dt)
    first = int(offsets[0]) + field_offset
    if n == 1:
        return buf[first:first + dt.itemsize].view(dt).copy()
    stride = stride or _even_stride(offsets)
    if stride:
        return np.ndarray((n,), dtype=dt, buffer=buf, offset=first, strides=(stride,)).copy()
    out = np.empty(n, dtype=dt)
    lanes = np.arange(dt.itemsize, dtype=np.int64)
    step = 1 << 20
    for lo in range(0, n, step):
        sel = offsets[lo:lo + step, None] + (field_offset + lanes)
        out[lo:lo + step] = buf[sel].view(dt).reshape(-1)
    return out


def scatter(buf: np.ndarray, offsets: np.ndarray, field_offset: int, values: np.ndarray,
            stride: int = 0) -> None:
    """gather's inverse: write values[i] (little-endian) at offsets[i] + field_offset."""
    n = len(offsets)
    if n == 0:
        return
    values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
    size = values.dtype.itemsize
    if n > 1:
        stride = stride or _even_stride(offsets)
    if stride or n == 1:
        np.ndarray((n,), dtype=values.dtype, buffer=buf, offset=int(offsets[0]) + field_offset,
                   strides=(stride or size,))[:] = values
        return
    lanes = np.arange(size, dtype=np.int64)
    buf[offsets[:, None] + (field_offset + lanes)] = values.view(np.uint8).reshape(n, size)


def _even_stride(offsets: np.ndarray) -> int:
    """The common step of two or more increasing offsets when they are evenly spaced, else 0."""
    n = len(offsets)
    stride = int(offsets[1] - offsets[0])
    if stride > 0 and int(offsets[-1] - offsets[0]) == stride * (n - 1) and \
            bool(np.all(np.diff(offsets) == stride)):
        return stride
    return 0
