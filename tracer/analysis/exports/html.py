"""An interactive flame graph in one HTML file (`ada export -f html`): no tool to install, no
request leaves the page, opens in any browser offline.

Frames are the call paths of graph.py (a root's function, then the functions called down to a
call), sized by total time, coloured by module. The page (flamegraph.html.js, inlined) zooms
on a click, searches by name, says calls/total/self on hover, shows every thread together or
one at a time, and turns into the callers view (an icicle: the function on top, the paths
that lead to it below) for any function, opening on it with `--callers FUNC`.

The data: the paths once (the function and the path each extends), then per view (all
threads, each thread) the calls, total and self time of the paths it has, sparse.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Callable, TextIO

import numpy as np

from ada.atf.session import SessionReader

from ..calls import PathTable, Plan, Step, made_ahead, worker_pool
from ..filters import CallFilter, function_names, label
from ..graph import Paths

PAGE = Path(__file__).with_name("flamegraph.html.js")


class _ThreadFigures:
    """Calls, total and self time per path, of one thread's calls."""

    def __init__(self) -> None:
        self.calls = np.zeros(0, np.int64)
        self.total = np.zeros(0, np.int64)
        self.self = np.zeros(0, np.int64)

    def add(self, paths: np.ndarray, total: np.ndarray, self_ns: np.ndarray, n: int) -> None:
        keep = paths >= 0
        p = paths[keep]
        grow = n - len(self.calls)
        if grow > 0:
            self.calls, self.total, self.self = (np.concatenate((a, np.zeros(grow, np.int64)))
                                                 for a in (self.calls, self.total, self.self))
        self.calls += np.bincount(p, minlength=n)
        self.total += np.rint(np.bincount(p, weights=total[keep], minlength=n)).astype(np.int64)
        self.self += np.rint(np.bincount(p, weights=self_ns[keep], minlength=n)).astype(np.int64)

    def view(self, name: str) -> dict[str, object]:
        """The paths this thread has (sparse), with their figures."""
        has = np.flatnonzero(self.calls)
        return {"name": name, "paths": has.tolist(), "calls": self.calls[has].tolist(),
                "total": self.total[has].tolist(), "self": self.self[has].tolist()}


def write(session: SessionReader, selection: CallFilter, out: TextIO,
          seen: Callable[[Step], None] = lambda step: None, callers: str | None = None) -> int:
    """Returns how many frames (distinct call paths) the page holds. `callers`: a function
    name (a glob) whose callers view the page opens on."""
    names = function_names(session)
    table = PathTable()
    threads: dict[int, _ThreadFigures] = {}
    with worker_pool() as pool:
        plan = Plan(paths=[table], columns=("duration_ns", "self_ns"))
        for step in made_ahead(selection.steps(session, plan, pool), pool):
            total = step.done["duration_ns"].view(np.int64)
            self_ns = step.done["self_ns"].view(np.int64)
            table.add(step.paths[0], total, self_ns)
            threads.setdefault(step.thread.id, _ThreadFigures()).add(
                step.paths[0], total, self_ns, len(table))
            seen(step)
    paths = Paths.of(table)
    out.write(page(session, names, paths, threads, callers))
    return len(paths.up)


def page(session: SessionReader, names: dict[int, str], paths: Paths,
         threads: dict[int, _ThreadFigures], callers: str | None) -> str:
    """The HTML page, its data inlined."""
    manifest = session.manifest
    module_of = {s.function_id: s.module_id for s in manifest.symbols} if manifest else {}
    module_names = {m.module_id: m.name or m.path or f"module {m.module_id}"
                    for m in manifest.modules} if manifest else {}
    fids = sorted({int(f) for f in paths.function_id.tolist()})
    number = {f: i for i, f in enumerate(fids)}
    modules = sorted({module_names.get(module_of.get(f, -1), "?") for f in fids})
    module_number = {m: i for i, m in enumerate(modules)}
    everything = _ThreadFigures()
    everything.calls, everything.total, everything.self = paths.calls, paths.total_ns, paths.self_ns
    tid = {t.id: t.thread_id for t in session.threads}
    views = [everything.view("all threads")] + [
        threads[k].view(f"thread_{k} (tid {tid.get(k, '?')})") for k in sorted(threads)]
    process = manifest.process if manifest else None
    title = f"ada: {getattr(process, 'name', None) or session.path.name} ({session.path.name})"
    data = {
        "title": title,
        "functions": [[label(names, f), module_number[module_names.get(module_of.get(f, -1), "?")]]
                      for f in fids],
        "modules": modules,
        "up": paths.up.tolist(),
        "fn": [number[int(f)] for f in paths.function_id.tolist()],
        "views": views,
        "callers": callers,
    }
    # JSON inside <script>: "</" is the one sequence that could end the element early
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title>\n"
            f"<script id=\"flame-data\" type=\"application/json\">{blob}</script>\n"
            f"</head><body>\n<script>\n{PAGE.read_text(encoding='utf-8')}</script>\n"
            f"</body></html>\n")
