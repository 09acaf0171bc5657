"""ada's Parquet writer (tracer/analysis/exports/parquet_file.py) read back by two independent
readers, pyarrow (Arrow's C++ reader, strict about the format) and DuckDB: every value of every
kind of column, with nulls, at the sizes where the encodings change shape (one value, a block
of 128 deltas and one more, a segment of 8192 and one more), with deltas that wrap around."""

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from ada.tracer.analysis.exports.parquet_file import (Column, Consecutive, Constant, Dictionary,
                                                      ParquetWriter, Values,
                                                      delta_binary_packed, encode)

SIZES = [1, 2, 3, 33, 128, 129, 130, 8193, 8194, 20_000]


def write(path, columns, groups):
    """A file of `columns`, a row group per list of column data in `groups`."""
    with ParquetWriter(str(path), columns) as out:
        for data in groups:
            out.write([encode(c, d) for c, d in zip(columns, data)])


def cases(n, rng):
    """(column, its data, the values a reader must see) for a table of n rows."""
    ts = np.cumsum(rng.integers(0, 300, n, dtype=np.uint64)) + np.uint64(10**15)
    ts[n // 2:] += np.uint64(10**12)  # a gap: a segment far wider than the others
    u64 = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)  # deltas wrap
    i64 = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)
    u32 = rng.integers(0, 2**32 - 1, n, dtype=np.uint64, endpoint=True).astype(np.uint32)
    i32 = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64, endpoint=True).astype(np.int32)
    some = rng.random(n) < 0.7
    few = np.ones(n, dtype=bool)
    few[n // 3:n // 3 + 5] = False
    pick = rng.integers(0, 5, n)
    words = ["alpha", "", "gamma δ", "e", "x" * 300]
    ids = np.array([5, 2**40, 7, 2**64 - 1, 9], dtype=np.uint64)
    text = np.array([f"row {i}" for i in range(n)], dtype=object)
    flags = rng.random(n) < 0.2

    def nulls(values, mask):
        return [v if m else None for v, m in zip(values, mask)]
    return [
        (Column("ts", "u64"), Values(ts), ts.tolist()),
        (Column("u64", "u64"), Values(u64), u64.tolist()),
        (Column("i64", "i64", True), Values(i64, some), nulls(i64.tolist(), some)),
        (Column("u32", "u32"), Values(u32), u32.tolist()),
        (Column("i32", "i32", True), Values(i32, few), nulls(i32.tolist(), few)),
        (Column("flags", "bool"), Values(flags), flags.tolist()),
        (Column("word", "str", True), Dictionary(pick, words, some),
         nulls([words[k] for k in pick], some)),
        (Column("id", "u64"), Dictionary(pick, ids), [int(ids[k]) for k in pick]),
        (Column("text", "str", True), Values(text, few), nulls(text.tolist(), few)),
        (Column("tid", "u64"), Constant(2**63 + 11, n), [2**63 + 11] * n),
        (Column("row", "u64"), Consecutive(2**40, n), list(range(2**40, 2**40 + n))),
        (Column("none", "u32", True), Values(u32, np.zeros(n, dtype=bool)), [None] * n),
    ]


@pytest.mark.parametrize("n", SIZES)
def test_every_kind_of_column_reads_back_in_pyarrow_and_duckdb(tmp_path, n):
    rng = np.random.default_rng(n)
    table = cases(n, rng)
    columns = [c for c, _, _ in table]
    path = tmp_path / "t.parquet"
    write(path, columns, [[d for _, d, _ in table]])
    got = pq.read_table(path)
    assert got.num_rows == n
    for column, _, want in table:
        assert got[column.name].to_pylist() == want, column.name
    rows = duckdb.sql(f"SELECT * FROM '{path}'").fetchall()
    assert [list(r) for r in rows] == [list(r) for r in zip(*(w for _, _, w in table))]


def test_row_groups_types_and_statistics(tmp_path):
    """Row groups as written; the types readers see (unsigned stays unsigned, names are
    text); min and max in the footer that bound each row group, nulls counted."""
    rng = np.random.default_rng(1)
    ts = np.cumsum(rng.integers(1, 1000, 30_000, dtype=np.uint64))
    mask = rng.random(30_000) < 0.5
    columns = [Column("ts", "u64"), Column("v", "i64", True), Column("name", "str", True),
               Column("seq", "u32")]
    groups = [[Values(ts[a:b]), Values(ts[a:b].astype(np.int64) - 10**6, mask[a:b]),
               Dictionary(np.arange(b - a) % 2, ["a", "b"], mask[a:b]), Consecutive(a, b - a)]
              for a, b in ((0, 10_000), (10_000, 25_000), (25_000, 30_000))]
    write(tmp_path / "t.parquet", columns, groups)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    assert meta.num_row_groups == 3 and meta.num_rows == 30_000
    schema = pq.read_schema(tmp_path / "t.parquet")
    assert [str(t) for t in schema.types] == ["uint64", "int64", "string", "uint32"]
    assert not schema.field("ts").nullable and schema.field("v").nullable
    for g, (a, b) in enumerate(((0, 10_000), (10_000, 25_000), (25_000, 30_000))):
        group = meta.row_group(g)
        assert group.num_rows == b - a
        stats = group.column(0).statistics
        assert (stats.min, stats.max, stats.null_count) == (ts[a], ts[b - 1], 0)
        stats = group.column(1).statistics
        present = ts[a:b][mask[a:b]].astype(np.int64) - 10**6
        assert (stats.min, stats.max) == (present.min(), present.max())
        assert stats.null_count == int((~mask[a:b]).sum())
        assert group.column(3).statistics.min == a and group.column(3).statistics.max == b - 1
        assert group.column(0).compression == "ZSTD"
    # DuckDB uses the statistics to skip row groups: the answer must not change.
    picked = duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 't.parquet'}' "
                        f"WHERE ts > {int(ts[20_000])}").fetchall()[0][0]
    assert picked == 30_000 - 20_001


def test_an_empty_file_has_its_columns(tmp_path):
    columns = [Column("a", "u64"), Column("b", "str", True)]
    write(tmp_path / "e.parquet", columns, [])
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 0 and table.column_names == ["a", "b"]
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'e.parquet'}'").fetchall() == [(0,)]


def test_bad_chunks_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot have them"):
        encode(Column("a", "u64"), Values(np.arange(3, dtype=np.uint64),
                                          np.array([True, False, True])))
    with ParquetWriter(str(tmp_path / "x.parquet"), [Column("a", "u64"), Column("b", "u64")]) as w:
        with pytest.raises(ValueError, match="a chunk per column"):
            w.write([encode(Column("a", "u64"), Constant(1, 3)),
                     encode(Column("b", "u64"), Constant(1, 4))])


def test_delta_encoding_bytes_as_the_format_has_them():
    """DELTA_BINARY_PACKED laid out byte for byte (Encodings.md): the header, then a block
    per 128 deltas ([min delta][4 widths][miniblocks of 32]); the last block stops after its
    last miniblock with a value, and the unused widths are 0."""
    values = np.cumsum(np.r_[1000, np.full(129, 7), 300]).astype(np.int64)  # 131 values
    data = delta_binary_packed(values)
    head = bytes([0x80, 0x01, 4, 131, 0x01, 0xD0, 0x0F])  # 128, 4, 131, zigzag(1000)
    assert data[:len(head)] == head
    block = data[len(head):]
    # 130 deltas: min 7 (zigzag 14); 300 - 7 needs 9 bits: 2 bytes (16 bits) each
    assert block[0] == 14 and list(block[1:5]) == [16, 16, 16, 16]
    first = 5 + 4 * 32 * 2
    assert block[first] == 14 and list(block[first + 1:first + 5]) == [16, 0, 0, 0]
    assert len(block) == first + 5 + 32 * 2  # one miniblock for the last 2 deltas
    low = np.frombuffer(block[first + 5:first + 9], dtype="<u2")
    assert low.tolist() == [0, 300 - 7]
