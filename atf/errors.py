"""The one exception hierarchy of the atf library.

Readers turn every struct, numpy, OS or JSON failure caused by a file into one
of these, with a message that names the file, the offset when there is one,
what was expected and what was found.
"""

from __future__ import annotations

import os


class AtfError(Exception):
    """Base class: anything wrong with ATF files, sessions or their use."""

    def __init__(self, message: str, path: str | os.PathLike | None = None,
                 offset: int | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.offset = offset
        self.reason = message
        where = ""
        if self.path is not None:
            where = self.path + (f" @ {offset}" if offset is not None else "") + ": "
        super().__init__(where + message)


class TruncatedFileError(AtfError):
    """The file ends before a structure it must contain."""


class BadMagicError(AtfError):
    """The magic bytes are not those of the expected structure."""


class UnsupportedFormatError(AtfError):
    """A version, endian or event size this library does not read."""


class CorruptFileError(AtfError):
    """Fields contradict each other or the file size, or a checksum fails."""


class SeqOutOfRangeError(AtfError, IndexError):
    """A sequence number past the end of a lane (also an IndexError, for Python idioms)."""


class ManifestError(AtfError):
    """manifest.json is unreadable or does not describe the session on disk."""


class NotASessionError(AtfError):
    """The path is not an ATF session directory."""


class WriterError(AtfError):
    """A writer was used wrongly (closed, bad input) or the disk refused a write."""
