"""ATF v2: the trace format library (writers, memory-mapped readers, merge, verification).

It never imports frida: everything here works on files alone. The byte layout is
in format.py and docs/format.md.
"""

from .errors import (AtfError, BadMagicError, CorruptFileError, ManifestError,
                     NotASessionError, SeqOutOfRangeError, TruncatedFileError,
                     UnsupportedFormatError, WriterError)
from .reader import DetailEvent, DetailReader, IndexEvent, IndexReader, ThreadReader
from .session import SessionReader, open_session, process_dirs
from .verify import VerifyReport, verify
from .writer import SessionWriter, ThreadWriter

__all__ = [
    "AtfError", "BadMagicError", "CorruptFileError", "ManifestError", "NotASessionError",
    "SeqOutOfRangeError", "TruncatedFileError", "UnsupportedFormatError", "WriterError",
    "DetailEvent", "DetailReader", "IndexEvent", "IndexReader", "ThreadReader",
    "SessionReader", "open_session", "process_dirs", "VerifyReport", "verify", "SessionWriter",
    "ThreadWriter",
]
