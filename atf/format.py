"""Every on-disk structure of ATF v2, declared once as numpy dtypes and constants.

This module is the byte-level specification in code (docs/format.md is the same in
words). Revision 1 is what we write; revision 2 is a variant described by one seed
page that we only read. Other modules parse and write through these declarations
and never spell an offset themselves.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# --- identity --------------------------------------------------------------

INDEX_MAGIC = b"ATI2"
INDEX_FOOTER_MAGIC = b"2ITA"
DETAIL_MAGIC = b"ATD2"
DETAIL_FOOTER_MAGIC = b"2DTA"

ENDIAN_LITTLE = 1
REVISION_1 = 1  # what we write
REVISION_2 = 2  # read only
SUPPORTED_REVISIONS = (REVISION_1, REVISION_2)

HEADER_SIZE = 64
FOOTER_SIZE = 64
INDEX_EVENT_SIZE = 32
DETAIL_EVENT_HEADER_SIZE = 24
FUNCTION_PAYLOAD_SIZE = 100
FUNCTION_RECORD_FIXED_SIZE = DETAIL_EVENT_HEADER_SIZE + FUNCTION_PAYLOAD_SIZE
MAX_STACK_BYTES = 256

INDEX_FLAG_HAS_DETAIL_FILE = 1 << 0

# Detail event flags (the u16 at offset 6 of a detail event header).
# Set when the stack window was cut short because the memory above sp was not
# readable (near the top of a thread's stack): stack_size is then what was
# actually captured, smaller than what was asked for.
DETAIL_FLAG_STACK_TRUNCATED = 1 << 0
DETAIL_FLAG_STRINGS = 1 << 1  # C strings captured at the call follow the stack window
MAX_STRING_BYTES = 64  # bytes of one captured string (STRING_TRUNCATED: it went on)
MAX_STRINGS_SIZE = 8 * (2 + MAX_STRING_BYTES)  # every register slot a string
STRING_TRUNCATED = 0x80  # in a captured string's slot byte

NO_DETAIL_SEQ = 0xFFFFFFFF  # revision 1 sentinel (u32)
NO_DETAIL_SEQ_R2 = 0xFFFFFFFFFFFFFFFF  # revision 2 sentinel (u64)
U32_MAX = 0xFFFFFFFF

# --- enumerations ------------------------------------------------------------

ARCH_X86_64 = 1
ARCH_ARM64 = 2
ARCH_NAMES = {ARCH_X86_64: "x86_64", ARCH_ARM64: "arm64"}

OS_IOS, OS_ANDROID, OS_MACOS, OS_LINUX, OS_WINDOWS = 1, 2, 3, 4, 5
OS_NAMES = {OS_IOS: "ios", OS_ANDROID: "android", OS_MACOS: "macos", OS_LINUX: "linux",
            OS_WINDOWS: "windows"}

CLOCK_MACH_CONTINUOUS, CLOCK_QPC, CLOCK_BOOTTIME = 1, 2, 3
CLOCK_NAMES = {CLOCK_MACH_CONTINUOUS: "mach_continuous", CLOCK_QPC: "qpc",
               CLOCK_BOOTTIME: "boottime"}

EVENT_CALL, EVENT_RETURN, EVENT_EXCEPTION = 1, 2, 3
EVENT_KIND_NAMES = {EVENT_CALL: "CALL", EVENT_RETURN: "RETURN", EVENT_EXCEPTION: "EXCEPTION"}

DETAIL_FUNCTION_CALL, DETAIL_FUNCTION_RETURN = 3, 4
DETAIL_TYPE_NAMES = {DETAIL_FUNCTION_CALL: "FUNCTION_CALL",
                     DETAIL_FUNCTION_RETURN: "FUNCTION_RETURN"}
FUNCTION_DETAIL_TYPES = (DETAIL_FUNCTION_CALL, DETAIL_FUNCTION_RETURN)

# Names of regs[0..7] of the function payload, per arch. On x86_64 a RETURN's
# value is in rax (slot 6) with its upper half in rdx (slot 2).
REGISTER_NAMES = {
    ARCH_ARM64: ("x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"),
    ARCH_X86_64: ("rdi", "rsi", "rdx", "rcx", "r8", "r9", "rax", "r10"),
}
RETURN_VALUE_SLOT = {ARCH_ARM64: 0, ARCH_X86_64: 6}


def packed_dtype(fields: list[tuple[str, str, int]], itemsize: int) -> np.dtype:
    """A little-endian packed dtype from (name, format, offset) triples."""
    return np.dtype({"names": [f[0] for f in fields],
                     "formats": [f[1] for f in fields],
                     "offsets": [f[2] for f in fields],
                     "itemsize": itemsize})


# --- index file ----------------------------------------------------------------

INDEX_HEADER_R1 = packed_dtype([
    ("magic", "S4", 0), ("endian", "u1", 4), ("version", "u1", 5), ("arch", "u1", 6),
    ("os", "u1", 7), ("flags", "<u4", 8), ("thread_id", "<u4", 12),
    ("clock_type", "u1", 16), ("event_size", "<u4", 24), ("event_count", "<u4", 28),
    ("events_offset", "<u8", 32), ("footer_offset", "<u8", 40),
    ("time_start_ns", "<u8", 48), ("time_end_ns", "<u8", 56)], HEADER_SIZE)

INDEX_HEADER_R2 = packed_dtype([
    ("magic", "S4", 0), ("endian", "u1", 4), ("version", "u1", 5), ("arch", "u1", 6),
    ("os", "u1", 7), ("flags", "<u4", 8), ("thread_id", "<u4", 12),
    ("clock_type", "u1", 16), ("event_size", "<u4", 20), ("event_count", "<u8", 24),
    ("events_offset", "<u8", 32), ("footer_offset", "<u8", 40),
    ("time_start_ns", "<u8", 48), ("time_end_ns", "<u8", 56)], HEADER_SIZE)

# Revision 1 index event; also the normalised event every reader hands out.
INDEX_EVENT = packed_dtype([
    ("timestamp_ns", "<u8", 0), ("function_id", "<u8", 8), ("thread_id", "<u4", 16),
    ("event_kind", "<u4", 20), ("call_depth", "<u4", 24), ("detail_seq", "<u4", 28)],
    INDEX_EVENT_SIZE)
INDEX_EVENT_FIELDS = INDEX_EVENT.names

INDEX_EVENT_R2 = packed_dtype([
    ("timestamp_ns", "<u8", 0), ("function_id", "<u8", 8), ("detail_seq", "<u8", 16),
    ("event_kind", "u1", 24)], INDEX_EVENT_SIZE)

INDEX_FOOTER = packed_dtype([
    ("magic", "S4", 0), ("checksum", "<u4", 4), ("event_count", "<u8", 8),
    ("time_start_ns", "<u8", 16), ("time_end_ns", "<u8", 24),
    ("bytes_written", "<u8", 32)], FOOTER_SIZE)

# --- detail file -----------------------------------------------------------------

DETAIL_HEADER = packed_dtype([
    ("magic", "S4", 0), ("endian", "u1", 4), ("version", "u1", 5), ("arch", "u1", 6),
    ("os", "u1", 7), ("flags", "<u4", 8), ("thread_id", "<u4", 12),
    ("events_offset", "<u8", 20), ("event_count", "<u8", 28), ("bytes_length", "<u8", 36),
    ("index_seq_start", "<u8", 44), ("index_seq_end", "<u8", 52)], HEADER_SIZE)

DETAIL_EVENT_HEADER_R1 = packed_dtype([
    ("total_length", "<u4", 0), ("event_type", "<u2", 4), ("flags", "<u2", 6),
    ("index_seq", "<u4", 8), ("thread_id", "<u4", 12), ("timestamp", "<u8", 16)],
    DETAIL_EVENT_HEADER_SIZE)

DETAIL_EVENT_HEADER_R2 = packed_dtype([
    ("total_length", "<u4", 0), ("event_type", "<u2", 4), ("flags", "<u2", 6),
    ("index_seq", "<u8", 8), ("timestamp", "<u8", 16)], DETAIL_EVENT_HEADER_SIZE)

FUNCTION_PAYLOAD = packed_dtype([
    ("function_id", "<u8", 0), ("regs", ("<u8", (8,)), 8), ("lr", "<u8", 72),
    ("fp", "<u8", 80), ("sp", "<u8", 88), ("stack_size", "<u2", 96),
    ("strings_size", "<u2", 98)],
    FUNCTION_PAYLOAD_SIZE)

# A revision 1 function record without its stack bytes: header + fixed payload.
FUNCTION_RECORD_R1 = packed_dtype([
    ("total_length", "<u4", 0), ("event_type", "<u2", 4), ("flags", "<u2", 6),
    ("index_seq", "<u4", 8), ("thread_id", "<u4", 12), ("timestamp", "<u8", 16),
    ("function_id", "<u8", 24), ("regs", ("<u8", (8,)), 32), ("lr", "<u8", 96),
    ("fp", "<u8", 104), ("sp", "<u8", 112), ("stack_size", "<u2", 120)],
    FUNCTION_RECORD_FIXED_SIZE)

DETAIL_FOOTER = packed_dtype([
    ("magic", "S4", 0), ("checksum", "<u4", 4), ("event_count", "<u8", 8),
    ("bytes_length", "<u8", 16), ("time_start_ns", "<u8", 24),
    ("time_end_ns", "<u8", 32)], FOOTER_SIZE)


def index_header_dtype(revision: int) -> np.dtype:
    return INDEX_HEADER_R1 if revision == REVISION_1 else INDEX_HEADER_R2


def detail_event_header_dtype(revision: int) -> np.dtype:
    return DETAIL_EVENT_HEADER_R1 if revision == REVISION_1 else DETAIL_EVENT_HEADER_R2


def function_id(module_id: int, symbol_index: int) -> int:
    """`(module_id << 32) | symbol_index`: how a traced function is named on disk."""
    return ((module_id & U32_MAX) << 32) | (symbol_index & U32_MAX)


def split_function_id(fid: int) -> tuple[int, int]:
    return fid >> 32, fid & U32_MAX


_checksum: Callable[[bytes | memoryview, int], int] | None = None


def load_checksum() -> Callable[[bytes | memoryview, int], int]:
    """The crc32c package's checksum, imported on first use: its import reads the package's
    own version from the installed metadata (importlib.metadata, email, csv: about 30 ms here,
    seconds in the emulated arm64 machine), which the commands that only read should not
    pay. A writer loads it as it opens (SessionWriter): on a recording's first drain pass it
    held the drain for the whole of a 1-second recording there, and the threads waited."""
    global _checksum
    if _checksum is None:
        from crc32c import crc32c as checksum
        _checksum = checksum
    return _checksum


def crc32c(data: bytes | memoryview, value: int = 0) -> int:
    """The files' checksum (CRC-32C), continued from `value` (see load_checksum)."""
    return load_checksum()(data, value)
