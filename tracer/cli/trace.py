"""`ada trace`: record every call and return of the selected functions of a live process.

The only subcommand that records, and so the only one that imports tracer.record (and with it
frida): its arguments are added, and the recorder imported, only when `ada trace` is the
command being run.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from .common import CliError, LiveLine, number

if TYPE_CHECKING:
    from ..record.options import Target, TraceOptions
    from ..record.pipeline import RecordingStatus
    from ..record.recorder import RecordingResult
    from ..record.recording import Recording


positive_float = number(float, above=0)
non_negative_float = number(float, minimum=0)
stack_bytes = number(int, minimum=0, maximum=256)
positive_int = number(int, minimum=1)
# What one recording may ask of the machine: each thread slot costs the target ~2 KB of state
# beside its rings, and the rings of every slot together are address space in the target.
MAX_THREADS = 16384
MAX_RING_KB = 1 << 20  # 1 GiB per ring
MAX_REGION_BYTES = 1 << 40
thread_count = number(int, minimum=1, maximum=MAX_THREADS)
ring_kb = number(int, minimum=1, maximum=MAX_RING_KB)


def configure(p: argparse.ArgumentParser) -> None:
    """`ada trace`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Attach to (or spawn) a process, hook the selected functions and record "
                     "every call and return into an ATF session directory. Stops on Ctrl-C, "
                     "SIGTERM, --duration, or when the target exits. The session path is the "
                     "last line on stdout.")
    p.epilog = ("examples:\n"
                "  ada trace -f ./demo -i 'demo!work*'\n"
                "  ada trace -p 1234 -i 'libc.so.6!open*' --duration 10\n"
                "  ada trace -n server -s 'handle_*' -o /tmp/traces")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `ada trace` (frida-tools' device options among them: imports frida)."""
    try:
        from ..record.devices import add_device_arguments, add_target_arguments
        from ..record.options import LANE_IO
        from ..record.selection import SelectionAction, add_selection_arguments
    except ImportError as e:
        raise CliError(f"ada trace needs Frida, which cannot be loaded here ({e})") from None
    add_target_arguments(p)
    add_selection_arguments(p)
    add_device_arguments(p)
    g = p.add_argument_group("recording")
    g.add_argument("-o", "--output", type=Path, default=Path("ada_traces"), metavar="DIR",
                   help="where session directories go (default: ./ada_traces)")
    g.add_argument("--duration", type=positive_float, metavar="SECONDS",
                   help="stop after SECONDS (default: until Ctrl-C or the target exits)")
    g.add_argument("--on-full", choices=("wait", "drop"), default="wait",
                   help="when a thread's ring is full: wait for the drain (lossless, default) "
                   "or drop and count the event")
    g.add_argument("--max-threads", type=thread_count, default=1024, metavar="N",
                   help="threads that hold a ring at once, 1..16384 (default 1024; a thread "
                   "that ends gives its ring back); a thread that starts while all are held, "
                   "or finds no memory for its rings, is counted with its events as dropped")
    g.add_argument("--ring-kb", type=ring_kb, default=1024, metavar="KB",
                   help="index ring size per thread in KiB, a power of two up to 1048576 "
                   "(default 1024 = 32768 events)")
    g.add_argument("--transport", choices=("auto", "shm", "rpc"), default="auto",
                   help="how rings reach ada: shared memory (local device only) or pulled over "
                   "Frida's channel; auto picks shm locally (a memfd on Linux, else a /dev/shm "
                   "file; rpc if neither can hold one thread's rings), rpc elsewhere")
    g.add_argument("--clock-source", choices=("auto", "os"), default="auto",
                   help="how the hot path reads time: auto uses the CPU's time-stamp counter "
                   "where the kernel's clock runs on it (x86_64 Linux), converted to "
                   "CLOCK_BOOTTIME ns by ada; os calls clock_gettime for every event")
    g.add_argument("--cmodule-toolchain", choices=("auto", "internal", "external"),
                   default="auto",
                   help="how the hot path's C is compiled (Frida CModule toolchains): external "
                   "is the system's gcc -O2 (faster code; for a local target ada compiles it "
                   "once and caches it under ~/.cache/ada), internal is Frida's built-in "
                   "TinyCC; auto tries external on the local device and falls back to "
                   "internal, internal elsewhere")
    g.add_argument("--hook-engine", choices=("auto", "frida", "inline"), default="auto",
                   help="how functions are hooked: inline patches each function with ada's own "
                   "entry and exit stubs (x86_64, and arm64 on Linux and Android; several times "
                   "cheaper per call, and it records tail calls, exceptions and signal handlers "
                   "right); a function it cannot patch safely falls back to the Interceptor, and "
                   "ada says which; frida uses Frida's Interceptor; auto (the default) is inline "
                   "on x86_64 Linux, frida elsewhere")
    g.add_argument("--no-follow-children", action="store_true",
                   help="leave the processes the target forks untraced (by default each is "
                   "recorded into its own pid_N/ beside the target's, and a new image after "
                   "exec into pid_N_execK/); either way a child never writes into the "
                   "target's rings and keeps none of its hooks")
    g.add_argument("--index-io", choices=LANE_IO, default="auto",
                   help="how index.atf is written: auto goes through the page cache, and "
                   "straight to the disk (O_DIRECT, Linux) for a thread past 32 MiB of events "
                   "once the kernel starts writing back dirty pages; direct goes straight to "
                   "the disk from the start; cached never does. With a detail window it is "
                   "cached: its events are linked to their detail afterwards")
    g.add_argument("-q", "--quiet", action="store_true", help="no status line")
    d = p.add_argument_group("detail lane and flight recorder")
    d.add_argument("--detail", action="store_true",
                   help="persist a detail record (registers, lr, fp, sp, stack) for every event")
    d.add_argument("--stack-bytes", type=stack_bytes, default=128, metavar="N",
                   help="bytes of stack captured from sp upward, 0..256 (default 128)")
    d.add_argument("--symbols", action="append", default=[], type=Path, metavar="DIR",
                   help="where copies of the target's binaries are (a phone's libraries): "
                   "their debug information says which arguments are C strings, captured "
                   "with the detail (by default the binaries at their paths are read)")
    d.add_argument("--pre-roll-ms", type=non_negative_float, metavar="N",
                   help="flight recorder: persist detail from N ms before each trigger")
    d.add_argument("--post-roll-ms", type=non_negative_float, metavar="M",
                   help="flight recorder: ... until M ms after it")
    d.add_argument("--trigger", dest="triggers", action=SelectionAction, const="-i",
                   metavar="[MODULE!]GLOB",
                   help="a call of a matching exported function is a trigger (repeatable; it "
                   "need not be traced)")
    d.add_argument("--trigger-at-ms", type=non_negative_float, action="append", default=[],
                   metavar="T", help="a trigger T ms after recording starts (repeatable)")
    d.add_argument("--pre-roll-buffer-mb", type=positive_int, default=256, metavar="MB",
                   help="memory for detail waiting for a trigger (default 256); if it cuts a "
                   "window short, the manifest and status line say by how much")
    d.add_argument("--detail-io", choices=LANE_IO, default="auto",
                   help="how detail.atf is written: auto goes through the page cache, and "
                   "straight to the disk (O_DIRECT, Linux) for a thread past 32 MiB of detail "
                   "once the kernel starts writing back dirty pages; direct goes straight to "
                   "the disk from the start; cached never does")
    d.add_argument("--detail-ring-kb", type=ring_kb, default=4096, metavar="KB",
                   help="detail ring per thread in KiB, a power of two (default 4096)")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from ..record.devices import check_device_arguments, open_device, setup_peer_connection
    from ..record.recording import Recording

    check_device_arguments(args.parser, args)
    target, options = _target_and_options(args)
    status = StatusLine(enabled=not args.quiet)
    device = open_device(args)
    recording = Recording(device, target, options, warn=status.warn, info=status.info,
                          on_attached=lambda session: setup_peer_connection(session, args))
    try:
        recording.prepare()
    except KeyboardInterrupt:  # before the first event was taken: there is nothing to keep
        status.info("interrupted while attaching: nothing was recorded")
        return 130

    stops: list[int] = []  # the stop signals taken so far

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            recording.trigger_now("signal")
            return
        stops.append(signum)
        if len(stops) == 1:
            recording.request_stop("interrupted" if signum == signal.SIGINT else "terminated")
            status.info("stopping: taking what is left (Ctrl-C again quits at once)")
        else:
            _quit_now(recording, signum)

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    previous = {s: signal.signal(s, on_signal) for s in watched}
    if options.detail == "window" and sys.stdin.isatty():
        status.info("press Enter to trigger a detail window, Ctrl-C to stop")
        threading.Thread(target=_enter_triggers, args=(recording,), daemon=True).start()
    try:
        result = _record_beside_signals(recording, status.update)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    status.done(recording.progress())
    return _report(recording, result, status)


def _target_and_options(args: argparse.Namespace) -> tuple[Target, TraceOptions]:
    """What to record and how, from the arguments; usage errors exit 2."""
    from ..record.devices import target_from_args
    from ..record.options import TraceOptions

    parser: argparse.ArgumentParser = args.parser
    target = target_from_args(parser, args)
    if not args.selection:
        parser.error("select functions to trace with -i, -I, -a or -s")
    ring_bytes = args.ring_kb * 1024
    if ring_bytes & (ring_bytes - 1):
        parser.error(f"--ring-kb {args.ring_kb}: must be a power of two")
    detail_ring = args.detail_ring_kb * 1024
    if detail_ring & (detail_ring - 1):
        parser.error(f"--detail-ring-kb {args.detail_ring_kb}: must be a power of two")
    window = args.pre_roll_ms is not None or args.post_roll_ms is not None
    rings = args.max_threads * (ring_bytes + (detail_ring if args.detail or window else 0))
    if rings > MAX_REGION_BYTES:
        parser.error(f"--max-threads {args.max_threads} threads x their rings is "
                     f"{rings / (1 << 40):.1f} TiB of address space in the target; at most 1 TiB "
                     "(lower --max-threads, --ring-kb or --detail-ring-kb)")
    if window and args.detail:
        parser.error("--detail persists everything; it does not combine with "
                     "--pre-roll-ms/--post-roll-ms")
    for d in args.symbols:
        if not d.is_dir():
            parser.error(f"--symbols {d}: not a directory")
    if window and args.index_io == "direct":
        parser.error("--index-io direct does not combine with a detail window: its index "
                     "events are linked to their detail as windows close (auto keeps them "
                     "cached)")
    if (args.triggers or args.trigger_at_ms) and not window:
        parser.error("triggers need a window: give --pre-roll-ms and/or --post-roll-ms")
    return target, TraceOptions(
        selection=args.selection, output=args.output, duration_s=args.duration,
        on_full=args.on_full, max_threads=args.max_threads, ring_events=ring_bytes // 32,
        detail="always" if args.detail else "window" if window else "off",
        stack_bytes=args.stack_bytes, detail_ring_bytes=detail_ring,
        pre_roll_ms=args.pre_roll_ms or 0.0, post_roll_ms=args.post_roll_ms or 0.0,
        pre_roll_buffer_mb=args.pre_roll_buffer_mb, triggers=args.triggers or [],
        trigger_at_ms=args.trigger_at_ms, transport=args.transport,
        clock_source=args.clock_source, toolchain=args.cmodule_toolchain,
        hook_engine=args.hook_engine,
        detail_io=args.detail_io, index_io=args.index_io,
        follow_children=not args.no_follow_children,
        symbols=args.symbols)


def _report(recording: Recording, result: RecordingResult, status: StatusLine) -> int:
    """Each process's warnings and directory; the target's directory is the last line."""
    from ..record.ending import describe_crash

    for other in recording.results:
        if other is not result:
            for w in other.warnings:
                status.warn(f"pid {other.pid}: {w}")
    for w in result.warnings:
        status.warn(w)
    for recorder in recording.recorders:
        if recorder.end.crash:
            status.warn(f"pid {recorder.pid} crashed: {describe_crash(recorder.end.crash)}")
    for other in recording.results:
        if other is not result:
            print(other.path, flush=True)
    print(result.path, flush=True)
    if result.end_reason.startswith(("error", "connection-lost", "detached")):
        raise CliError(f"recording ended early ({result.end_reason}); what was recorded is "
                       f"finalized in {result.path} ({result.events:,} events kept)")
    if result.functions == 0:
        raise CliError("no function matched the selection while the target ran; nothing was "
                       "traced")
    return 0


def _record_beside_signals(recording: Recording,
                           progress: Callable[[RecordingStatus], None]) -> RecordingResult:
    """recording.record() on a thread of its own: Python runs signal handlers on the main
    thread only, between its own steps, and a stop can wait long on Frida (a target stuck in
    Frida's fork handling held one for good). The main thread only waits, so a second Ctrl-C
    or SIGTERM is always taken."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = recording.record(progress=progress)
        except BaseException as e:  # noqa: BLE001 - raised again on the main thread
            outcome["error"] = e

    worker = threading.Thread(target=work, name="ada-recording")
    worker.start()
    while worker.is_alive():
        worker.join(0.25)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _quit_now(recording: Recording, signum: int) -> None:
    """A second stop signal while stopping: leave at once. What reached the disk stays there
    (readers and `ada verify` take a session cut short); the target is left as it is."""
    try:
        where = f" {recording.main_path.parent}"
    except (AssertionError, AttributeError):
        where = ""
    sys.stderr.write(f"\nada trace: quit at once (a second {signal.Signals(signum).name} while "
                     f"stopping): the session{where} is cut short; `ada verify` checks what "
                     "it holds\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def _enter_triggers(recording: Recording) -> None:
    """Each Enter pressed at the terminal is a trigger (daemon thread; ends with ada)."""
    for _ in sys.stdin:
        recording.trigger_now("key")


class StatusLine:
    """The recording's figures on a LiveLine (each update on a terminal, every 5 s in a log),
    its messages above it, and the summary at the end."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.line = LiveLine(0.0, 5.0)
        self._last_events = 0
        self._last_t = 0.0

    def info(self, message: str) -> None:
        if self.enabled:
            self.line.say(f"ada: {message}")

    def warn(self, message: str) -> None:
        self.line.say(f"ada: warning: {message}")

    def _line(self, p: RecordingStatus) -> str:
        dt = p.elapsed_s - self._last_t
        rate = (p.events - self._last_events) / dt if dt > 0 else 0.0
        self._last_events, self._last_t = p.events, p.elapsed_s
        line = (f"{p.elapsed_s:7.1f}s  {rate / 1e6:7.2f} M events/s  {p.events:>12,} events  "
                f"{p.threads} thread(s)  {p.drops:,} dropped")
        if p.processes > 1:
            line += f"  {p.processes} processes"
        if p.detail_bytes:
            line += f"  detail {p.detail_bytes / 1e6:,.1f} MB"
        if p.windows:
            line += f"  {p.windows} window(s)"
        if p.truncated_ns:
            line += f"  truncated {p.truncated_ns / 1e6:.1f} ms"
        if p.transport_bytes_per_s is not None:
            line += f"  rpc {p.transport_bytes_per_s / 1e6:.1f} MB/s"
        if p.wait_ns:
            line += f"  waited {p.wait_ns / 1e6:,.1f} ms"
        return line

    def update(self, p: RecordingStatus) -> None:
        if self.enabled and self.line.due(p.elapsed_s):
            self.line.show(self._line(p), p.elapsed_s)

    def done(self, p: RecordingStatus) -> None:
        if not self.enabled:
            return
        self.line.clear()
        extra = ""
        if p.windows or p.truncated_ns:
            extra = f", {p.windows} detail window(s)"
            if p.truncated_ns:
                extra += f", cut short by {p.truncated_ns / 1e6:.1f} ms (--pre-roll-buffer-mb)"
        if p.wait_ns:
            extra += (f"; the target waited {p.wait_ns / 1e6:,.1f} ms in all for ada to make "
                      "room in full rings")
        processes = f" of {p.processes} processes" if p.processes > 1 else ""
        if p.undelivered is None:
            extra += "; the target's last events were lost with it (how many is unknown)"
        elif p.undelivered:
            extra += f"; {p.undelivered:,} events lost with the target's rings at its end"
        print(f"ada: recorded {p.events:,} events from {p.threads} thread(s){processes} in "
              f"{p.elapsed_s:.1f}s, {p.drops:,} dropped{extra}", file=sys.stderr, flush=True)
