"""speedscope's file format, evented profiles: a profile per thread whose events open and close
frames in time order (https://www.speedscope.app/file-format-schema.json), so its "time order"
view shows each thread's calls as they happened, and its flame views aggregate them.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

import numpy as np

from ada.atf.session import SessionReader

from ..calls import Plan, Step, worker_pool
from ..filters import CallFilter, function_names, label, process_of

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def write(session: SessionReader, selection: CallFilter, out: TextIO,
          seen: Callable[[Step], None] = lambda step: None) -> int:
    """Returns how many calls were written. The frames go last (they are known once every
    chunk is read), which speedscope's JSON reader does not mind."""
    names = function_names(session)
    pid, process_name = process_of(session)
    frame_of: dict[int, int] = {}  # function_id -> frame index
    out.write(f'{{"$schema": "{SCHEMA}", "exporter": "ada", '
              f'"name": {json.dumps(f"{process_name} ({pid})")}, "profiles": [')
    current, count, first, need_comma = None, 0, True, False
    ends: list[int | None] = [None, None]  # the thread's first and last time

    def close_profile() -> None:
        out.write(f'], "startValue": {ends[0] or 0}, "endValue": {ends[1] or 0}}}')

    with worker_pool() as pool:
        for step in selection.steps(session, Plan(edges=True, done=False), pool):
            thread, e = step.thread, step.edges
            assert e is not None
            if thread is not current:
                if current is not None:
                    close_profile()
                out.write(("" if first else ", ") + json.dumps(
                    {"type": "evented", "name": f"tid {thread.thread_id}",
                     "unit": "nanoseconds"})[:-1] + ', "events": [')
                current, first, need_comma = thread, False, False
                ends[:] = [None, None]
            if len(e["ts"]):
                distinct, which = np.unique(e["function_id"], return_inverse=True)
                for f in distinct.tolist():
                    frame_of.setdefault(f, len(frame_of))
                frame = np.array([frame_of[f] for f in distinct.tolist()],
                                 dtype=np.int64)[which]
                at = e["ts"]
                kind = np.where(e["end"], "C", "O")
                text = ", ".join(f'{{"type": "{k}", "frame": {f}, "at": {a}}}'
                                 for k, f, a in zip(kind.tolist(), frame.tolist(), at.tolist()))
                out.write((", " if need_comma else "") + text)
                need_comma = True
                ends[:] = [int(at[0]) if ends[0] is None else ends[0], int(at[-1])]
                count += int(np.count_nonzero(~e["end"]))
            seen(step)
    if current is not None:
        close_profile()
    frames = [{"name": label(names, f)} for f, _ in sorted(frame_of.items(), key=lambda x: x[1])]
    out.write(f'], "shared": {{"frames": {json.dumps(frames)}}}}}\n')
    return count
