"""Small helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import TracerError

if TYPE_CHECKING:
    from ..analysis.filters import CallFilter


class CliError(TracerError):
    """A usage or environment problem to report in one line (exit 1)."""


def number(kind: type, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None) -> Callable[[str], Any]:
    """An argparse type for int or float options with bounds, and messages that say them."""
    def parse(text: str) -> Any:
        try:
            value = int(text, 0) if kind is int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"expected a value > {above:g}, got {text}")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected {minimum:g}..{maximum:g}, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected a value >= {minimum:g}, got {text}")
        return value
    return parse


non_negative_int = number(int, minimum=0)


def add_call_filters(p: argparse.ArgumentParser, *, within: bool = True,
                     shape: bool = False) -> None:
    """The options report, replay, graph and export share (see call_filter); `shape` adds
    -D and -t (replay, export)."""
    if within:
        p.add_argument("-F", "--filter", action="append", default=[], metavar="FUNC",
                       help="only within calls of FUNC (a glob; repeatable)")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="FUNC",
                   help="hide FUNC and what it calls; report charges their time to the caller "
                   "(a glob; repeatable)")
    p.add_argument("--tid", type=non_negative_int, action="append", default=[], metavar="TID",
                   help="only the thread with this OS thread id (repeatable)")
    p.add_argument("--from-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or after T")
    p.add_argument("--to-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or before T")
    if shape:
        p.add_argument("-D", "--depth", type=non_negative_int, metavar="N",
                       help="only calls less than N levels deep")
        p.add_argument("-t", "--time-filter", type=duration, metavar="DUR",
                       help="hide calls shorter than DUR (e.g. 10us, 2ms)")


def add_symbols_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--symbols", action="append", default=[], metavar="DIR", type=Path,
                   help="where copies of the traced binaries (or their split debug files) "
                   "are, when the trace came from another machine (repeatable); arguments "
                   "and callers are named from their debug information")


def decoder_for(session: Any, args: argparse.Namespace) -> Any:
    """The session's Decoder (ada.tracer.analysis.arguments) with the --symbols directories."""
    from ..analysis.arguments import Decoder
    for d in args.symbols:
        if not d.is_dir():
            raise CliError(f"--symbols {d}: not a directory")
    return Decoder(session, symbols=list(args.symbols))


def finish_decoder(decoder: Any) -> None:
    """Keep what was read from debug information for next time; say what could not be."""
    decoder.save()
    decoder.say_notes()


def duration(text: str) -> int:
    """An argparse type for durations: 10us, 2.5ms, 1s, 300 (ns)."""
    from ..analysis.report import parse_duration  # here: `ada trace` needs none of the reading side
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def call_filter(args: argparse.Namespace) -> CallFilter:
    """The CallFilter of add_call_filters' options."""
    from ..analysis.filters import CallFilter  # here: `ada trace` needs none of the reading side
    return CallFilter(tids=args.tid, within=getattr(args, "filter", []), hide=args.notrace,
                      start_ns=args.from_ns, end_ns=args.to_ns,
                      max_depth=getattr(args, "depth", None),
                      min_duration_ns=getattr(args, "time_filter", None))


def say_problems(command: str, step: Any) -> None:
    """One line on stderr for a thread whose events do not nest (calls.Problems, on its last
    step): what the calls table did with them, so no figure is wrong in silence."""
    problems = getattr(step, "problems", None)
    if not problems:
        return
    parts = []
    if problems.inferred_left:
        parts.append(f"{problems.inferred_left:,} call(s) closed by the RETURN of a call they "
                     "were in (taken as left without returning)")
    if problems.orphans:
        parts.append(f"{problems.orphans:,} RETURN(s) of a function that was not open (taken "
                     "as calls from the thread's first event)")
    t = step.thread
    print(f"ada {command}: warning: thread {t.id} (tid {t.thread_id}): events do not nest: "
          f"{'; '.join(parts)}; events were lost, or the session was recorded before ada "
          "marked calls left by longjmp", file=sys.stderr)


def keep_freed_memory() -> None:
    """Let glibc's malloc keep the memory numpy frees, for commands that work chunk by chunk.

    By default glibc gives freed blocks of more than about 128 KiB back to the kernel (they
    are mapped on their own, or trimmed off the top of a heap; worker threads get heaps of
    their own, which are trimmed as soon as a chunk's arrays are freed), so each chunk's
    arrays are page-faulted and zeroed anew: about a quarter of `ada report`'s time. Here
    blocks under 32 MiB (a chunk's columns) come from one heap shared by all threads, which
    is not trimmed: peak memory stays what the chunks worked on at once need. Elsewhere than
    glibc (macOS, musl): nothing to do."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return  # not glibc
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
    mallopt(M_MMAP_THRESHOLD, 32 << 20)
    mallopt(M_TRIM_THRESHOLD, 1 << 30)
    mallopt(M_ARENA_MAX, 1)


def format_duration_ns(ns: int) -> str:
    return f"{ns / 1e9:.6f} s"


class LiveLine:
    """The one progress line of a long command on stderr (`ada trace`'s status, a reading
    command's progress): rewritten in place on a terminal, at most every `tty_gap_s`; a line
    of its own at most every `log_gap_s` otherwise (a log); messages go above it."""

    def __init__(self, tty_gap_s: float, log_gap_s: float) -> None:
        self.tty = sys.stderr.isatty()
        self.gap_s = tty_gap_s if self.tty else log_gap_s
        self.shown_at = -float("inf")
        self.drawn = False

    def due(self, now: float) -> bool:
        return now - self.shown_at >= self.gap_s

    def show(self, text: str, now: float) -> None:
        self.shown_at = now
        if self.tty:
            sys.stderr.write("\r\x1b[K" + text)
            sys.stderr.flush()
            self.drawn = True
        else:
            print(text, file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.drawn = False

    def say(self, message: str) -> None:
        self.clear()
        print(message, file=sys.stderr, flush=True)


class Progress:
    """Progress of long reading work (events done of all): nothing for work under 2 s, then
    a LiveLine every half second on a terminal, every 10 s in a log."""

    def __init__(self, what: str, total: int, command: str = "") -> None:
        self.what, self.total, self.done_count = what, total, 0
        self.command = command or what.split()[0]  # who says a thread's problems
        self.start = time.monotonic()
        self.line = LiveLine(0.5, 10.0)

    def __call__(self, count: int) -> None:
        self.done_count += count
        now = time.monotonic()
        if now - self.start < 2 or not self.line.due(now):
            return
        pct = 100.0 * self.done_count / self.total if self.total else 100.0
        self.line.show(f"{self.what}: {self.done_count / 1e6:,.1f} of {self.total / 1e6:,.1f} "
                       f"M events ({pct:.0f}%)", now)

    def step(self, step: Any) -> None:
        """A step of the walk of the calls (tracer/analysis/calls.py) was written: its
        events count, and a thread whose events do not nest is said."""
        self(step.b - step.a)
        say_problems(self.command, step)

    def done(self) -> None:
        self.line.clear()


VIEWERS = {"perfetto": "https://ui.perfetto.dev/#!/?url={url}",
           "speedscope": "https://www.speedscope.app/#profileURL={url}"}
VIEWER_PORT = 9001  # the port ui.perfetto.dev accepts traces from (its open_trace_in_ui)


def serve_to_viewer(path: Path, viewer: str, port: int = VIEWER_PORT) -> None:
    """Open `path` in a web viewer: serve it once from 127.0.0.1 (with the CORS header the
    viewer's page needs) and point the browser at the viewer with its URL. Without a
    browser, the URL is printed to open by hand (through an SSH tunnel of the port, for a
    remote machine)."""
    import http.server
    import webbrowser
    from urllib.parse import quote

    class Once(http.server.BaseHTTPRequestHandler):
        served = False

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/" + quote(path.name):
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            Once.served = True

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = http.server.HTTPServer(("127.0.0.1", port), Once)
    except OSError as e:
        raise CliError(f"--open: cannot serve on 127.0.0.1:{port}: {e.strerror}") from None
    url = VIEWERS[viewer].format(url=f"http://127.0.0.1:{port}/{quote(path.name)}")
    opened = webbrowser.open(url)
    print(f"{'opened' if opened else 'open this in a browser'}: {url}\n"
          f"serving {path} once on 127.0.0.1:{port} (Ctrl-C to stop)", file=sys.stderr)
    with server:
        while not Once.served:
            server.handle_request()
