"""Which calls of a session a reading command shows: threads, -F, -N, -D, -t and a time window.

CallFilter is what report, replay, graph and the exports share: the threads it selects, and
the filters, resolved once into function ids (calls.Filters) that the walk of each thread
applies as it pairs (calls.py): `within` (-F) keeps the calls of the named functions and
everything they call; `hide` (-N) drops the named functions' calls and everything they call,
and charges their time to the caller's self time, as if the caller had done the work itself;
-D and -t keep the calls less deep than a depth, or at least as long as a duration; the time
window keeps the calls that start inside it.

Function names come from the manifest's symbols (SessionReader.symbol_names; a hex function_id
when a session has none).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Iterator

import numpy as np

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..errors import TracerError
from .calls import Filters, Plan, Step, session_steps
from ..symbols.names import demangle


def module_names(session: SessionReader) -> dict[int, str]:
    """module_id -> module name, from the manifest."""
    return session.manifest.module_names() if session.manifest is not None else {}


def process_of(session: SessionReader) -> tuple[int, str]:
    """(pid, process name) from the manifest (the directory's pid_N, if it has none)."""
    process = session.manifest.process if session.manifest is not None else None
    pid = process.pid if process is not None else None
    if pid is None:
        name = session.path.name
        pid = int(name[4:]) if name.startswith("pid_") and name[4:].isdigit() else 0
    return pid, (process.name if process is not None else None) or f"pid {pid}"


def function_names(session: SessionReader) -> dict[int, str]:
    """function_id -> the name people read: the manifest's symbol, C++ names demangled."""
    return {fid: demangle(name) for fid, name in session.symbol_names().items()}


def label(names: dict[int, str], fid: int) -> str:
    return names.get(fid) or f"0x{fid:016x}"


def matching_ids(names: dict[int, str], patterns: list[str]) -> np.ndarray:
    """The function_ids (sorted) whose name matches any glob of `patterns`."""
    return np.array(sorted(f for f, n in names.items()
                           if any(fnmatchcase(n, p) for p in patterns)), dtype=np.uint64)


@dataclass
class CallFilter:
    tids: list[int] = field(default_factory=list)  # OS thread ids; empty: every thread
    within: list[str] = field(default_factory=list)  # -F globs
    hide: list[str] = field(default_factory=list)  # -N globs
    start_ns: int | None = None
    end_ns: int | None = None
    max_depth: int | None = None  # -D: only calls less than this deep
    min_duration_ns: int | None = None  # -t: only calls at least this long

    def threads(self, session: SessionReader) -> list[ThreadReader]:
        """The selected threads; TracerError for a tid or an -F that the session lacks."""
        threads = session.threads
        if self.tids:
            threads = [t for t in threads if t.thread_id in set(self.tids)]
            if not threads:
                raise TracerError(f"no thread with tid {', '.join(map(str, self.tids))} in "
                                  f"{session.path}")
        if self.within:
            known = list(function_names(session).values())
            if known and not any(fnmatchcase(n, p) for n in known for p in self.within):
                raise TracerError(f"-F {' '.join(self.within)}: no function of the session "
                                  "matches")
        return threads

    def filters(self, session: SessionReader) -> Filters:
        """The filters, their globs resolved against the session's function names."""
        names = function_names(session)
        return Filters(
            within=matching_ids(names, self.within) if self.within else None,
            hide=matching_ids(names, self.hide) if self.hide else None,
            max_depth=self.max_depth, start_ns=self.start_ns, end_ns=self.end_ns,
            min_duration_ns=self.min_duration_ns)

    def steps(self, session: SessionReader, plan: Plan, pool: ThreadPoolExecutor
              ) -> Iterator[Step]:
        """The walk of every selected thread (calls.session_steps), `plan` given the
        filters."""
        plan.filters = self.filters(session)
        return session_steps(session, self.threads(session), plan, pool)
