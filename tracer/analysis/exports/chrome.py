"""The Chrome JSON trace format (chrome://tracing, Perfetto's UI, catapult's trace viewer).

https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU: a call is one
complete event ("ph": "X", "ts" and "dur" in microseconds, fractions keeping the nanoseconds),
a thread is named with its tid by a metadata event. The viewers slow down and fail past about
a million events: `ada export` warns and says how to narrow an export.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

import numpy as np

from ada.atf.session import SessionReader

from ..calls import ORPHAN, Plan, Step, pipelined, worker_pool
from ..filters import CallFilter, function_names, label, process_of


def write(session: SessionReader, selection: CallFilter, out: TextIO,
          seen: Callable[[Step], None] = lambda step: None) -> int:
    """The selected calls as Chrome JSON; returns how many events were written."""
    names = function_names(session)
    pid, process_name = process_of(session)
    quoted: dict[int, str] = {}  # function_id -> its name as a JSON string
    out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
    out.write(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                          "args": {"name": process_name}}))
    count, named = 0, set()

    def text_of(step: Step) -> tuple[Step, str, int]:
        """The step's complete events as JSON text (made on a worker while this thread
        walks on)."""
        tid, calls = step.thread.thread_id, step.done
        calls = calls[(calls["flags"] & ORPHAN) == 0]  # they cannot nest
        if not len(calls):
            return step, "", 0
        distinct, which = np.unique(calls["function_id"], return_inverse=True)
        for f in distinct.tolist():
            if f not in quoted:
                quoted[f] = json.dumps(label(names, f))
        name = np.array([quoted[f] for f in distinct.tolist()], dtype=object)[which]
        start = calls["start_ns"].tolist()
        duration = calls["duration_ns"].tolist()
        head = f',\n{{"ph": "X", "pid": {pid}, "tid": {tid}, "name": '
        return step, "".join(f'{head}{n}, "ts": {s / 1000:.3f}, "dur": {d / 1000:.3f}}}'
                             for n, s, d in zip(name.tolist(), start, duration)), len(calls)

    with worker_pool() as pool:
        steps = selection.steps(session, Plan(columns=(
            "function_id", "start_ns", "duration_ns", "flags")), pool)
        for step, text, n in pipelined(steps, text_of, pool):
            tid = step.thread.thread_id
            if tid not in named:
                named.add(tid)
                out.write(",\n" + json.dumps({"ph": "M", "name": "thread_name", "pid": pid,
                                              "tid": tid, "args": {"name": f"tid {tid}"}}))
            out.write(text)
            count += n
            seen(step)
    out.write("\n]}\n")
    return count
