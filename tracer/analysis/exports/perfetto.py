"""Perfetto's protobuf trace format (TrackEvent), written directly.

https://perfetto.dev/docs/reference/synthetic-track-event: a process track, a track per thread
(named with its tid), a slice per call (TYPE_SLICE_BEGIN / TYPE_SLICE_END), function names
interned per sequence (one sequence per thread), the detail lane's argument registers and
return values as debug annotations, and the flight recorder's triggers (instants) and windows
(slices) on a track of their own. Timestamps are marked as the clock they are in: ada's
CLOCK_BOOTTIME is Perfetto's own default trace clock, so an export lines up with a system
trace of the same device. Field numbers are those of protos/perfetto/trace/trace_packet.proto,
track_event/track_event.proto and track_descriptor.proto.
"""

from __future__ import annotations

from typing import BinaryIO, Callable

import numpy as np

from ada.atf.format import NO_DETAIL_SEQ
from ada.atf.manifest import Trigger, Window
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..calls import Plan, Step, pipelined, worker_pool
from ..arguments import Decoder
from ..pairing import dense_ids
from ..filters import CallFilter, function_names, label, process_of
from . import protobuf as pb

# TracePacket fields
TIMESTAMP, CLOCK_SNAPSHOT, SEQUENCE_ID, TRACK_EVENT, INTERNED_DATA = 8, 6, 10, 11, 12
SEQUENCE_FLAGS, DEFAULTS, TRACK_DESCRIPTOR = 13, 59, 60
INCREMENTAL_STATE_CLEARED, NEEDS_INCREMENTAL_STATE = 1, 2
# TrackEvent fields and types
TYPE, NAME_IID, TRACK_UUID, DEBUG_ANNOTATIONS, NAME = 9, 10, 11, 4, 23
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
# Perfetto's builtin clocks
CLOCK_REALTIME, CLOCK_BOOTTIME = 1, 6
# Track uuids: the process, the flight recorder, then one per thread.
PROCESS_UUID, RECORDER_UUID, THREAD_UUID = 1, 2, 1 << 20
RECORDER_SEQUENCE = 1


def packet(*fields: bytes) -> bytes:
    return pb.message(1, *fields)  # Trace.packet


def annotation(name: str, text: str) -> bytes:
    return pb.message(DEBUG_ANNOTATIONS, pb.string(10, name), pb.string(6, text))


def write(session: SessionReader, selection: CallFilter, out: BinaryIO,
          seen: Callable[[Step], None] = lambda step: None,
          decoder: Decoder | None = None) -> int:
    """The selected calls as a Perfetto trace; returns how many slices were written.
    `decoder` names the arguments (debug information; arguments.py); `seen` is called with
    each step of the walk as it is written (progress, warnings)."""
    decoder = decoder or Decoder(session)
    names = function_names(session)
    pid, process_name = process_of(session)
    out.write(packet(pb.message(TRACK_DESCRIPTOR, pb.uint(1, PROCESS_UUID), pb.message(
        3, pb.uint(1, pid), pb.string(6, process_name)))))
    manifest = session.manifest
    anchor = manifest.realtime_anchor if manifest is not None else None
    if anchor is not None:
        out.write(packet(pb.message(CLOCK_SNAPSHOT, pb.message(
            1, pb.uint(1, CLOCK_BOOTTIME), pb.uint(2, anchor[0])), pb.message(
            1, pb.uint(1, CLOCK_REALTIME), pb.uint(2, anchor[1])),
            pb.uint(2, CLOCK_BOOTTIME))))
    if manifest is not None:
        out.write(_recorder_track(manifest.triggers, manifest.windows))
    known = np.array(sorted(names), dtype=np.uint64)
    current, interned, slices = None, set(), 0
    with worker_pool() as pool:
        steps = selection.steps(session, Plan(edges=True, done=False), pool)
        for step, (named, packets, n) in pipelined(
                steps, lambda st: (st, _step_packets(st, known, decoder)), pool):
            thread = step.thread
            if thread is not current:
                current, interned = thread, set()
                out.write(_thread_start(thread, pid))
            new = [(f, i) for f, i in named if f not in interned]
            if new:
                interned.update(f for f, _ in new)
                out.write(packet(pb.uint(SEQUENCE_ID, thread.id + 2),
                                 pb.uint(SEQUENCE_FLAGS, NEEDS_INCREMENTAL_STATE),
                                 pb.message(INTERNED_DATA, (pb.message(
                                     2, pb.uint(1, i), pb.string(2, label(names, f)))
                                     for f, i in new))))
            out.write(memoryview(packets))
            slices += n
            seen(step)
    return slices


def _iids(known: np.ndarray, fids: np.ndarray) -> np.ndarray:
    """Functions' name ids, the same on every sequence: a function's rank among the
    manifest's functions (from 1), or, for one the manifest does not name, its function_id
    past them."""
    at = np.minimum(np.searchsorted(known, fids), max(len(known) - 1, 0))
    hit = (known[at] == fids) if len(known) else np.zeros(len(fids), dtype=bool)
    return np.where(hit, at + 1, fids + np.uint64(1 + len(known))).astype(np.uint64)


def _thread_start(thread: ThreadReader, pid: int) -> bytes:
    """The thread's track (named with its tid), and its sequence's defaults: the clock, and
    the track every event of the sequence is on."""
    uuid = THREAD_UUID + thread.id
    return packet(pb.message(TRACK_DESCRIPTOR, pb.uint(1, uuid), pb.uint(5, PROCESS_UUID),
                             pb.message(4, pb.uint(1, pid), pb.uint(2, thread.thread_id),
                                        pb.string(5, f"tid {thread.thread_id}")))) + \
        packet(pb.uint(SEQUENCE_ID, thread.id + 2),
               pb.uint(SEQUENCE_FLAGS, INCREMENTAL_STATE_CLEARED),
               pb.message(DEFAULTS, pb.uint(58, CLOCK_BOOTTIME), pb.message(11, pb.uint(11, uuid))))


def _step_packets(step: Step, known: np.ndarray, decoder: Decoder
                  ) -> tuple[list[tuple[int, int]], np.ndarray, int]:
    """(the step's distinct function_ids with their name ids, its begin and end packets,
    how many calls began)."""
    e = step.edges
    assert e is not None
    is_end = e["end"]
    distinct, which = dense_ids(e["function_id"])
    distinct_iids = _iids(known, distinct)
    iid = distinct_iids[which]
    blobs: dict[int, bytes] = {}
    lane = step.thread.detail
    if lane is not None:
        with_detail = np.flatnonzero(e["detail"] != NO_DETAIL_SEQ)
        for r, d in zip(with_detail.tolist(), e["detail"][with_detail].tolist()):
            event = lane.get(d)
            if event is None or not event.is_function:
                continue
            fid = int(e["function_id"][r])
            if is_end[r]:
                text = decoder.return_text(fid, event)
                if text is not None:
                    blobs[r] = annotation("return", text)
            else:
                blobs[r] = annotation("args", decoder.call_text(fid, event))
    return (list(zip(distinct.tolist(), distinct_iids.tolist())),
            event_packets(e["ts"], is_end, iid, step.thread.id + 2, blobs),
            int(np.count_nonzero(~is_end)))


def event_packets(ts: np.ndarray, is_end: np.ndarray, iid: np.ndarray, sequence: int,
                  blobs: dict[int, bytes]) -> np.ndarray:
    """A TracePacket per begin or end, as bytes: timestamp, sequence, flags and a TrackEvent
    (its type, a begin's name_iid, and `blobs[i]`: more fields of event i's TrackEvent).
    Packets without blobs are grouped by layout (the sizes of their varints), a group
    written at once; the few with blobs are written one by one and spliced in."""
    plain = np.ones(len(ts), dtype=bool)
    plain[list(blobs)] = False
    rows = np.flatnonzero(plain)
    ts_size = pb.varint_sizes(ts[rows])
    iid_size = np.where(is_end[rows], 0, pb.varint_sizes(iid[rows]))
    shape = ts_size << 8 | iid_size << 4 | is_end[rows]
    groups: list[pb.Group] = []
    for key in np.flatnonzero(np.bincount(shape)).tolist():  # a handful of layouts
        mine = np.flatnonzero(shape == key)
        t_size, i_size, end = key >> 8, key >> 4 & 15, bool(key & 1)
        whole, at = _packet(sequence, end, bytes(t_size), bytes(i_size), b"")
        varints = [(ts[rows[mine]], at[0], t_size)]
        if not end:
            varints.append((iid[rows[mine]], at[1], i_size))
        groups.append((mine, whole, varints))
    out = pb.rows_of_bytes(len(rows), groups)
    if not blobs:
        return out
    # Splice the packets with blobs in: each after the plain packets before it.
    length = np.zeros(len(ts), dtype=np.int64)
    for mine, whole, _ in groups:
        length[rows[mine]] = len(whole)
    spliced, done, taken = [], 0, 0
    for i in sorted(blobs):
        before = int(length[done:i].sum())
        spliced.append(out[taken:taken + before])
        taken += before
        whole, _ = _packet(sequence, bool(is_end[i]), pb.varint(int(ts[i])),
                           b"" if is_end[i] else pb.varint(int(iid[i])), blobs[i])
        spliced.append(np.frombuffer(whole, dtype=np.uint8))
        done = i + 1
    spliced.append(out[taken:])
    return np.concatenate(spliced)


def _packet(sequence: int, end: bool, ts: bytes, iid: bytes, blob: bytes
            ) -> tuple[bytes, tuple[int, int]]:
    """A begin or end packet with these varint bytes, and where ts and iid start in it."""
    event = pb.uint(TYPE, SLICE_END if end else SLICE_BEGIN)
    if not end:
        event += pb.tag(NAME_IID, pb.VARINT) + iid
    event += blob
    body = (pb.tag(TIMESTAMP, pb.VARINT) + ts + pb.uint(SEQUENCE_ID, sequence)
            + pb.uint(SEQUENCE_FLAGS, NEEDS_INCREMENTAL_STATE) + pb.message(TRACK_EVENT, event))
    whole = pb.tag(1, pb.LEN) + pb.varint(len(body)) + body
    head = len(whole) - len(body)
    return whole, (head + 1, len(whole) - len(blob) - len(iid))


def _recorder_track(triggers: list[Trigger], windows: list[Window]) -> bytes:
    """The flight recorder's triggers (instants) and windows (slices), on a track of their
    own under the process; nothing when the session has none."""
    if not triggers and not windows:
        return b""
    out = [packet(pb.message(TRACK_DESCRIPTOR, pb.uint(1, RECORDER_UUID),
                             pb.uint(5, PROCESS_UUID), pb.string(2, "ada flight recorder")))]
    events = [(t.timestamp_ns, 1, INSTANT, "trigger: " + _trigger_name(t)) for t in triggers]
    for w in windows:
        events.append((w.start_ns, 2, SLICE_BEGIN, "window"))
        events.append((w.end_ns, 0, SLICE_END, ""))
    for ts, _, kind, name in sorted(events):
        fields = [pb.uint(TYPE, kind), pb.uint(TRACK_UUID, RECORDER_UUID)]
        if name:
            fields.append(pb.string(NAME, name))
        out.append(packet(pb.uint(TIMESTAMP, ts), pb.uint(58, CLOCK_BOOTTIME),
                          pb.uint(SEQUENCE_ID, RECORDER_SEQUENCE),
                          pb.message(TRACK_EVENT, *fields)))
    return b"".join(out)


def _trigger_name(t: Trigger) -> str:
    details = ", ".join(f"{k}={v}" for k, v in t.details.items())
    return t.kind + (f" ({details})" if details else "")
