"""`ada dump SESSION`: events of all threads in timestamp order, as text.

One line per event: timestamp, thread, kind, and the function name indented by
call depth. With --detail, the registers, the arguments or return value (by name
and type from debug information), the caller and the stack window of events
whose detail was persisted follow their line.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import numpy as np

from ada.atf.format import DETAIL_FUNCTION_CALL, EVENT_KIND_NAMES, INDEX_EVENT, NO_DETAIL_SEQ
from ada.atf.reader import DetailEvent
from ada.atf.session import SessionReader

from ..analysis.arguments import Decoder
from ..analysis.filters import function_names
from .common import add_symbols_option, decoder_for, finish_decoder, non_negative_int

INDENT = "  "


def configure(p: argparse.ArgumentParser) -> None:
    """`ada dump`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Print events of every thread merged by timestamp, with function names "
                     "from the manifest (hex function_id when unknown).")
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("--thread", type=non_negative_int, action="append", metavar="N",
                   help="only thread_N (repeatable)")
    p.add_argument("--limit", type=non_negative_int, metavar="N", help="stop after N events")
    p.add_argument("--from-ns", type=non_negative_int, metavar="T",
                   help="first timestamp to show (inclusive)")
    p.add_argument("--to-ns", type=non_negative_int, metavar="T",
                   help="last timestamp to show (inclusive)")
    p.add_argument("--detail", action="store_true",
                   help="show registers, arguments, return value, caller and stack of events "
                   "with detail")
    add_symbols_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    session = SessionReader(args.session)
    if args.thread:
        session.thread(args.thread[0])  # a clear error for an unknown thread
        for t in args.thread[1:]:
            session.thread(t)
    end = None if args.to_ns is None else args.to_ns + 1
    decoder = decoder_for(session, args) if args.detail else None
    dump(session, sys.stdout, start_ns=args.from_ns, end_ns=end, threads=args.thread,
         limit=args.limit, decoder=decoder)
    if decoder is not None:
        finish_decoder(decoder)
    return 0


def dump(session: SessionReader, out: TextIO, *, start_ns: int | None = None,
         end_ns: int | None = None, threads: list[int] | None = None,
         limit: int | None = None, decoder: Decoder | None = None) -> int:
    """Write events in merged order, with the detail lane's records when a `decoder` is
    given; returns how many were written."""
    names = function_names(session)
    kinds = {k: v for k, v in EVENT_KIND_NAMES.items()}
    tails: dict[tuple[int, int, int, int, int], str] = {}
    written = 0
    for pos, seqs in session.merged_chunks(start_ns, end_ns, threads):
        if limit is not None:
            pos, seqs = pos[:limit - written], seqs[:limit - written]
        # The chunk's events gathered column by column (one fancy index per thread), so the
        # only work per line is making its text.
        chunk = np.zeros(len(pos), dtype=INDEX_EVENT)
        for p in np.unique(pos).tolist():
            mine = pos == p
            chunk[mine] = session.threads[p].index.events[seqs[mine]]
        lines = []
        for p, ts, fid, tid, kind, depth, dseq in zip(
                pos.tolist(), chunk["timestamp_ns"].tolist(), chunk["function_id"].tolist(),
                chunk["thread_id"].tolist(), chunk["event_kind"].tolist(),
                chunk["call_depth"].tolist(), chunk["detail_seq"].tolist()):
            # Everything after the timestamp repeats: made once per combination.
            key = (p, tid, kind, depth, fid)
            rest = tails.get(key)
            if rest is None:
                rest = tails[key] = (
                    f" t{session.threads[p].id:<4} {tid:>8}  {kinds.get(kind, str(kind)):<9} "
                    f"{INDENT * min(depth, 64)}{names.get(fid) or f'0x{fid:016x}'}")
                if len(tails) > 1 << 20:
                    tails.clear()
            lines.append(f"{ts:>20}{rest}")
            if decoder and dseq != NO_DETAIL_SEQ and session.threads[p].detail is not None:
                event = session.threads[p].detail.get(dseq)
                if event is not None and event.is_function:
                    lines.extend(format_detail(event, INDENT * min(depth, 64) + " " * 46,
                                               decoder, fid))
        out.write("\n".join(lines) + "\n" if lines else "")
        written += len(pos)
        if limit is not None and written >= limit:
            break
    return written


def format_detail(event: DetailEvent, pad: str, decoder: Decoder, fid: int) -> list[str]:
    regs = event.registers
    lines = [pad + "  ".join(f"{k}=0x{v:x}" for k, v in regs.items())]
    if event.event_type == DETAIL_FUNCTION_CALL:
        lines.append(pad + f"args: {decoder.call_text(fid, event)}")
        caller = decoder.caller(event.lr)
        if caller:
            lines.append(pad + f"called from {caller}")
    else:
        value = decoder.return_text(fid, event)
        if value is not None:
            lines.append(pad + f"returns {value}")
    extra = f"lr=0x{event.lr:x}  fp=0x{event.fp:x}  sp=0x{event.sp:x}"
    if event.return_value is not None:
        extra = f"return=0x{event.return_value:x}  " + extra
    lines.append(pad + extra)
    stack = event.stack
    note = " (truncated: end of readable stack)" if event.stack_truncated else ""
    lines.append(pad + f"stack[{len(stack)}]{note}:")
    for off in range(0, len(stack), 32):
        chunk = stack[off:off + 32]
        lines.append(pad + f"  +{off:03x}  " + " ".join(chunk[i:i + 8].hex()
                                                      for i in range(0, len(chunk), 8)))
    return lines
