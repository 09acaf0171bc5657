"""Parquet files written directly: the Thrift footer, zstd pages, and the encodings of ada's
columns, vectorised with numpy so a column chunk of a million rows costs a few passes over it.

The layout is Apache Parquet's (https://github.com/apache/parquet-format: parquet.thrift and
Encodings.md): "PAR1", each row group's column chunks (an optional dictionary page, then one
DATA_PAGE_V2), the FileMetaData in Thrift's compact protocol, its length, "PAR1". Three ways
to hand a column chunk over, each with its encoding:

- `Values`: integers as DELTA_BINARY_PACKED (sequences and timestamps shrink to a byte or two
  per row, so zstd has little left to do), booleans PLAIN (a bit each), strings PLAIN;
- `Dictionary`: indices into a small list of values (names, kinds) as RLE_DICTIONARY;
- `Constant`: one value for every row of the chunk (a thread's number), a run of one index;
- `Consecutive`: row numbers, DELTA_BINARY_PACKED with nothing to pack.

Nulls are a mask (True: present). A chunk's pages are encoded and compressed by `encode`, which
touches no file and can run on any thread; `ParquetWriter` lays the results out in order.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import BinaryIO, Sequence

import numpy as np
import zstandard

from ... import __version__
from .protobuf import varint

MAGIC = b"PAR1"
CREATED_BY = f"ada version {__version__}"

# parquet.thrift enums
BOOLEAN, INT32, INT64, BYTE_ARRAY = 0, 1, 2, 6
REQUIRED, OPTIONAL = 0, 1
UTF8, UINT_32, UINT_64, INT_32, INT_64 = 0, 13, 14, 17, 18
PLAIN, RLE, DELTA_BINARY_PACKED, RLE_DICTIONARY = 0, 3, 5, 8
ZSTD = 6
DATA_PAGE_V2, DICTIONARY_PAGE = 3, 2

# Thrift compact protocol field types
T_TRUE, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_BINARY, T_LIST, T_STRUCT = 1, 2, 3, 4, 5, 6, 8, 9, 12


def _zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


_SMALL = [bytes([i]) for i in range(128)]  # varints of one byte
_HEADS = {(delta, kind): bytes([delta << 4 | kind]) for delta in range(1, 16)
          for kind in range(1, 13)}


def _integer(value: int) -> bytes:
    z = _zigzag(value) & ((1 << 64) - 1)
    return _SMALL[z] if z < 128 else varint(z)


def _thrift_value(kind: int, value: object) -> bytes:
    if kind in (T_I16, T_I32, T_I64):
        return _integer(int(value))
    if kind == T_STRUCT:
        return bytes(value)
    if kind in (T_TRUE, T_FALSE):
        return b""
    if kind == T_BYTE:
        return bytes([int(value) & 0xFF])
    if kind == T_BINARY:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return varint(len(data)) + data
    if kind == T_LIST:
        element, items = value
        head = bytes([len(items) << 4 | element]) if len(items) < 15 else \
            bytes([0xF0 | element]) + varint(len(items))
        return head + b"".join(_thrift_value(element, item) for item in items)
    raise ValueError(f"thrift type {kind}")


def struct(*fields: tuple[int, int, object]) -> bytes:
    """A Thrift struct in the compact protocol: (field id, type, value) in ascending id order,
    None values left out; a bool field is T_TRUE with a bool value."""
    out, last = [], 0
    for number, kind, value in fields:
        if value is None:
            continue
        if kind == T_TRUE and not value:
            kind = T_FALSE
        delta = number - last
        out.append(_HEADS[delta, kind] if 0 < delta <= 15 else
                   bytes([kind]) + varint(_zigzag(number)))
        out.append(_thrift_value(kind, value))
        last = number
    out.append(b"\x00")
    return b"".join(out)


# ---- the column types ada writes ----

@dataclass(frozen=True)
class Type:
    physical: int
    converted: int | None
    logical: bytes | None  # the LogicalType union, encoded
    dtype: str | None      # numpy dtype of the values (None: strings)


def _int_type(bits: int, signed: bool) -> bytes:
    return struct((10, T_STRUCT, struct((1, T_BYTE, bits), (2, T_TRUE, signed))))


TYPES = {
    "u32": Type(INT32, UINT_32, _int_type(32, False), "<u4"),
    "u64": Type(INT64, UINT_64, _int_type(64, False), "<u8"),
    "i32": Type(INT32, INT_32, _int_type(32, True), "<i4"),
    "i64": Type(INT64, INT_64, _int_type(64, True), "<i8"),
    "bool": Type(BOOLEAN, None, None, "?"),
    "str": Type(BYTE_ARRAY, UTF8, struct((1, T_STRUCT, struct())), None),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str            # a key of TYPES
    optional: bool = False

    def schema(self) -> bytes:
        t = TYPES[self.type]
        return struct((1, T_I32, t.physical), (3, T_I32, OPTIONAL if self.optional else REQUIRED),
                      (4, T_BINARY, self.name), (6, T_I32, t.converted),
                      (10, T_STRUCT, t.logical))


@dataclass
class Values:
    """A value per row (`mask` False: null; the value there is ignored)."""
    values: np.ndarray | Sequence[str]
    mask: np.ndarray | None = None


@dataclass
class Dictionary:
    """Row i holds dictionary[indices[i]] (`mask` False: null)."""
    indices: np.ndarray
    dictionary: np.ndarray | Sequence[str]
    mask: np.ndarray | None = None


@dataclass
class Constant:
    """The same value in every row."""
    value: object
    rows: int


@dataclass
class Consecutive:
    """start, start + 1, ... (row numbers)."""
    start: int
    rows: int


ColumnData = Values | Dictionary | Constant | Consecutive


@dataclass
class Chunk:
    """A column chunk encoded and compressed, waiting for its place in the file."""
    pages: bytes
    dictionary_length: int   # bytes of the dictionary page at the start of `pages` (0: none)
    encodings: list[int]
    rows: int
    uncompressed: int
    statistics: bytes


# ---- encodings ----

def bit_packed(values: np.ndarray, width: int) -> bytes:
    """One bit-packed run of the RLE/bit-packing hybrid: values < 2**width, width 1, 2, 4, 8,
    16 or 32; the last group of 8 padded with zeros (readers know how many values there are)."""
    n = len(values)
    groups = -(-n // 8)
    v = np.zeros(groups * 8, dtype=f"<u{max(1, width // 8)}")
    v[:n] = values
    if width >= 8:
        body = v.tobytes()
    else:
        per = 8 // width
        parts = v.reshape(-1, per)
        packed = parts[:, 0].copy()
        for i in range(1, per):
            packed |= parts[:, i] << np.uint8(i * width)
        body = packed.tobytes()
    return varint(groups << 1 | 1) + body


def _index_width(count: int) -> int:
    """The bit width for indices below `count`, rounded up to one bit_packed writes."""
    need = max(1, int(count - 1).bit_length())
    return next(w for w in (1, 2, 4, 8, 16, 32) if w >= need)


def levels(mask: np.ndarray) -> bytes:
    """Definition levels (0: null, 1: present) in the hybrid encoding, without a length (a
    V2 page keeps their size in its header): runs when there are few, else one bit per row."""
    n = len(mask)
    if n == 0:
        return b""
    change = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    if len(change) * 4 < n // 8:  # fewer than a run per 32 rows: a few bytes each
        starts = np.r_[0, change].tolist()
        ends = starts[1:] + [n]
        return b"".join(_rle_run(int(mask[a]), b - a, 1) for a, b in zip(starts, ends))
    return varint(-(-n // 8) << 1 | 1) + np.packbits(mask, bitorder="little").tobytes()


SEGMENT_BLOCKS = 64  # blocks of 128 deltas laid out alike (one min delta, one width)


def delta_binary_packed(values: np.ndarray) -> bytes:
    """DELTA_BINARY_PACKED of int32 or int64 values (unsigned ones as their bits): blocks of
    128 deltas in 4 miniblocks of 32. The encoder may pick any min delta not above a block's
    deltas and any width that holds what is left, so each segment of SEGMENT_BLOCKS blocks
    takes one min delta and a width of 0, 8, 16, 32 or 64 bits (zstd removes what the
    rounding wastes): consecutive segments alike are then one matrix of a row per block,
    written with strided copies."""
    size = values.dtype.itemsize
    signed, unsigned = np.dtype(f"<i{size}"), np.dtype(f"<u{size}")
    v = np.ascontiguousarray(values).view(signed)
    n = len(v)
    head = varint(128) + varint(4) + varint(n) + varint(_zigzag(int(v[0])) if n else 0)
    if n < 2:
        return head
    m = n - 1  # deltas
    span = SEGMENT_BLOCKS * 128
    segments = -(-m // span)
    deltas = np.empty(segments * span, dtype=signed)
    np.subtract(v[1:], v[:-1], out=deltas[:m])  # wraps around, as the decoder's sums do
    deltas[m:] = deltas[m - 1]  # padding that moves neither a minimum nor a maximum
    low = deltas.reshape(segments, span).min(axis=1)
    adj = deltas.view(unsigned).reshape(segments, span)
    adj -= low.view(unsigned)[:, None]
    adj.reshape(-1)[m:] = 0
    # Per segment (a few dozen per column chunk: plain Python is quicker than numpy here):
    # its min delta as a varint, and a width of 0, 1, 2, 4 or 8 bytes, which a cast then
    # takes from every value at once.
    minimum = [varint(_zigzag(x) & ((1 << 64) - 1)) for x in low.tolist()]
    width = [0 if h == 0 else 1 if h < (1 << 8) else 2 if h < (1 << 16) else
             4 if h < (1 << 32) else 8 for h in adj.max(axis=1).tolist()]
    blocks_needed = -(-m // 128)
    parts = [np.frombuffer(head, dtype=np.uint8)]
    s = 0
    while s < segments:
        vs, w = len(minimum[s]), width[s]
        e = s + 1
        while e < segments and len(minimum[e]) == vs and width[e] == w:
            e += 1
        lead = vs + 4
        blocks = min((e - s) * SEGMENT_BLOCKS, blocks_needed - s * SEGMENT_BLOCKS)
        matrix = np.empty((blocks, lead + 128 * w), dtype=np.uint8)
        mins = np.frombuffer(b"".join(minimum[s:e]), dtype=np.uint8).reshape(e - s, vs)
        matrix[:, :vs] = np.repeat(mins, SEGMENT_BLOCKS, axis=0)[:blocks]
        matrix[:, vs:lead] = w * 8
        if w:  # the low w bytes of each value, little-endian: w * 8 bits packed
            np.copyto(matrix[:, lead:].view(f"<u{w}"),
                      adj[s:e].reshape(-1, 128)[:blocks], casting="unsafe")
        parts.append(matrix.reshape(-1))
        s = e
    # The last block ends after its last miniblock with a value; the widths of the others, 0.
    used = -(-(m - (blocks_needed - 1) * 128) // 32)
    if used < 4:
        last = parts[-1][len(parts[-1]) - (lead + 128 * w):]
        last[vs + used:lead] = 0
        parts[-1] = parts[-1][:len(parts[-1]) - 32 * w * (4 - used)]
    return b"".join(p.tobytes() for p in parts)


def _plain(values: np.ndarray | Sequence[str], kind: str) -> bytes:
    if kind == "str":
        encoded = [str(s).encode("utf-8", "replace") for s in values]
        return b"".join(len(e).to_bytes(4, "little") + e for e in encoded)
    if kind == "bool":
        return np.packbits(np.asarray(values, dtype=bool), bitorder="little").tobytes()
    return np.ascontiguousarray(values, dtype=TYPES[kind].dtype).tobytes()


# ---- pages ----

_local = threading.local()


def _compress(data: bytes, level: int) -> bytes:
    compressors = getattr(_local, "compressors", None)
    if compressors is None:
        compressors = _local.compressors = {}
    if level not in compressors:
        compressors[level] = zstandard.ZstdCompressor(level=level)
    return compressors[level].compress(data)


def _page(page_type: int, field: int, fields: bytes, levels_data: bytes, body: bytes,
          level: int) -> tuple[bytes, int]:
    """A page: its PageHeader (`fields`, the page type's own header, as field `field`), the
    levels as they are, the body compressed; with its size uncompressed (header included)."""
    compressed = _compress(body, level)
    header = struct((1, T_I32, page_type), (2, T_I32, len(levels_data) + len(body)),
                    (3, T_I32, len(levels_data) + len(compressed)), (field, T_STRUCT, fields))
    return header + levels_data + compressed, len(header) + len(levels_data) + len(body)


def _statistics(kind: str, nulls: int, low: object = None, high: object = None) -> bytes:
    """null_count, and min and max (when given) as PLAIN bytes: FileMetaData.column_orders
    says they follow the columns' types (unsigned for the unsigned ones)."""
    if low is None or TYPES[kind].dtype in (None, "?"):
        return struct((3, T_I64, nulls))
    dtype = TYPES[kind].dtype
    return struct((3, T_I64, nulls), (5, T_BINARY, np.asarray(high, dtype=dtype).tobytes()),
                  (6, T_BINARY, np.asarray(low, dtype=dtype).tobytes()))


def _rle_run(value: int, rows: int, width: int) -> bytes:
    """One run of the RLE/bit-packing hybrid: `value` `rows` times."""
    return varint(rows << 1) + value.to_bytes(-(-width // 8), "little")


def _sequence(start: int, rows: int) -> bytes:
    """DELTA_BINARY_PACKED of start, start + 1, ...: every block a min delta of 1 and widths 0."""
    head = varint(128) + varint(4) + varint(rows) + varint(_zigzag(start) if rows else 0)
    return head + b"\x02\x00\x00\x00\x00" * (-(-(rows - 1) // 128) if rows > 1 else 0)


def encode(column: Column, data: ColumnData, level: int = 1) -> Chunk:
    """A column chunk's pages: the dictionary page (if any) and one DATA_PAGE_V2."""
    kind = column.type
    dtype = TYPES[kind].dtype
    mask = getattr(data, "mask", None)
    if mask is not None and not column.optional:
        raise ValueError(f"{column.name}: nulls in a column that cannot have them")
    rows = data.rows if isinstance(data, (Constant, Consecutive)) else \
        len(data.indices if isinstance(data, Dictionary) else data.values)
    present = mask if mask is not None and not mask.all() else None
    nulls = 0 if present is None else int(rows - np.count_nonzero(present))
    level_bytes = b"" if not column.optional else _rle_run(1, rows, 1) if present is None \
        else levels(present)
    pages: list[bytes] = []
    uncompressed = 0
    low = high = None
    dictionary: np.ndarray | Sequence[str] | None = None
    if isinstance(data, Constant):
        dictionary = np.array([data.value], dtype=dtype) if dtype else [str(data.value)]
        body = bytes([1]) + _rle_run(0, rows, 1)
    elif isinstance(data, Dictionary):
        dictionary = data.dictionary
        width = _index_width(len(dictionary))
        body = bytes([width]) + bit_packed(
            data.indices if present is None else data.indices[present], width)
    elif isinstance(data, Consecutive):
        body, encoding, encodings = _sequence(data.start, rows), DELTA_BINARY_PACKED, \
            [RLE, DELTA_BINARY_PACKED]
        low, high = (data.start, data.start + rows - 1) if rows else (None, None)
    else:
        values = data.values
        if present is not None:
            values = np.asarray(values)[present]  # before the cast: nulls may be None
        if dtype in (None, "?"):
            body, encoding = _plain(values, kind), PLAIN
        else:
            values = np.asarray(values, dtype=dtype)
            body, encoding = delta_binary_packed(values), DELTA_BINARY_PACKED
            if len(values):
                low, high = values.min(), values.max()
        encodings = [RLE, encoding]
    if dictionary is not None:
        plain = _plain(dictionary, kind)
        page, size = _page(DICTIONARY_PAGE, 7, struct((1, T_I32, len(dictionary)),
                                                      (2, T_I32, PLAIN)), b"", plain, level)
        pages.append(page)
        uncompressed += size
        encoding, encodings = RLE_DICTIONARY, [PLAIN, RLE, RLE_DICTIONARY]
        if dtype and len(dictionary):  # bounds of the values, if not always the very ones
            low, high = np.min(dictionary), np.max(dictionary)
    page, size = _page(DATA_PAGE_V2, 8, struct(
        (1, T_I32, rows), (2, T_I32, nulls), (3, T_I32, rows), (4, T_I32, encoding),
        (5, T_I32, len(level_bytes)), (6, T_I32, 0)), level_bytes, body, level)
    pages.append(page)
    uncompressed += size
    return Chunk(b"".join(pages), len(pages[0]) if len(pages) > 1 else 0, encodings, rows,
                 uncompressed, _statistics(kind, nulls, low, high))


class ParquetWriter:
    """A Parquet file of `columns`, written a row group at a time (each a Chunk per column, in
    the columns' order, from `encode`), its footer by `close`."""

    def __init__(self, path: str, columns: list[Column]) -> None:
        self.columns = columns
        self.file: BinaryIO = open(path, "wb")
        self.file.write(MAGIC)
        self.groups: list[bytes] = []
        self.rows = 0

    def write(self, chunks: list[Chunk]) -> None:
        rows = chunks[0].rows if chunks else 0
        if len(chunks) != len(self.columns) or any(c.rows != rows for c in chunks):
            raise ValueError("a row group needs a chunk per column, all of one length")
        if rows == 0:
            return
        start = self.file.tell()
        metas = []
        for column, chunk in zip(self.columns, chunks):
            at = self.file.tell()
            self.file.write(chunk.pages)
            metas.append(struct((2, T_I64, 0), (3, T_STRUCT, struct(
                (1, T_I32, TYPES[column.type].physical), (2, T_LIST, (T_I32, chunk.encodings)),
                (3, T_LIST, (T_BINARY, [column.name])), (4, T_I32, ZSTD), (5, T_I64, rows),
                (6, T_I64, chunk.uncompressed), (7, T_I64, len(chunk.pages)),
                (9, T_I64, at + chunk.dictionary_length),
                (11, T_I64, at if chunk.dictionary_length else None),
                (12, T_STRUCT, chunk.statistics)))))
        self.groups.append(struct(
            (1, T_LIST, (T_STRUCT, metas)), (2, T_I64, sum(c.uncompressed for c in chunks)),
            (3, T_I64, rows), (5, T_I64, start), (6, T_I64, self.file.tell() - start),
            (7, T_I16, len(self.groups) if len(self.groups) < (1 << 15) else None)))
        self.rows += rows

    def close(self) -> None:
        schema = [struct((4, T_BINARY, "schema"), (5, T_I32, len(self.columns)))] + \
            [c.schema() for c in self.columns]
        type_order = struct((1, T_STRUCT, struct()))
        footer = struct((1, T_I32, 1), (2, T_LIST, (T_STRUCT, schema)), (3, T_I64, self.rows),
                        (4, T_LIST, (T_STRUCT, self.groups)), (6, T_BINARY, CREATED_BY),
                        (7, T_LIST, (T_STRUCT, [type_order] * len(self.columns))))
        self.file.write(footer + len(footer).to_bytes(4, "little") + MAGIC)
        self.file.close()

    def __enter__(self) -> "ParquetWriter":
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.close()
        else:
            self.file.close()
