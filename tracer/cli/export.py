"""`ada export SESSION --format FMT -o OUT`: the session in the formats other tools open."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ada.atf.session import SessionReader

from .common import (CliError, Progress, add_call_filters, add_symbols_option, call_filter,
                     decoder_for, finish_decoder, keep_freed_memory, serve_to_viewer)

# format (a module of tracer/analysis/exports, imported when used) -> (file suffix, text or
# binary or a directory, what its count counts, the viewer --open uses)
FORMATS = {
    "perfetto": (".pftrace", "b", "slices", "perfetto"),
    "chrome": (".json", "t", "events", "perfetto"),
    "folded": (".folded", "t", "stacks", None),
    "speedscope": (".speedscope.json", "t", "calls", "speedscope"),
    "parquet": ("_parquet", "d", "calls", None),
    "html": (".html", "t", "frames", "file"),
}
VIEWER_LIMIT = 1_000_000  # events JSON trace viewers handle well


def configure(p: argparse.ArgumentParser) -> None:
    """`ada export`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("perfetto: Perfetto's protobuf trace (a track per thread, a slice per "
                     "call, arguments from the detail lane, the flight recorder's triggers and "
                     "windows). chrome: Chrome's JSON trace format. folded: folded stacks with "
                     "self time in ns (flamegraph.pl, inferno, speedscope). speedscope: "
                     "speedscope's evented profile, a profile per thread in time order. "
                     "parquet: a directory of events, calls, functions, threads and args "
                     ".parquet files (zstd), the views of `ada query`, for DuckDB, Spark, "
                     "pandas. html: an interactive flame graph in one file (click to zoom, "
                     "search, hover for calls/total/self, a colour per module, every thread or "
                     "one, the callers of a function), nothing to install, opens in any browser "
                     "offline.")
    p.epilog = ("examples:\n"
                "  ada export ada_traces/session_*/pid_1234 --format perfetto --open\n"
                "  ada export SESSION --format html -o app.html --open\n"
                "  ada export SESSION --format html --callers 'read*'\n"
                "  ada export SESSION --format folded -o app.folded && flamegraph.pl app.folded "
                "> a.svg\n"
                "  ada export SESSION --format chrome --tid 1234 --from-ns T1 --to-ns T2 -t 10us")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("-f", "--format", choices=FORMATS, required=True)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="file (a directory for parquet); default: pid_N plus the format's "
                   "suffix, here")
    p.add_argument("--open", action="store_true",
                   help="open it in the viewer: ui.perfetto.dev (perfetto, chrome) or "
                   "speedscope.app (speedscope), served once from 127.0.0.1; html opens in "
                   "the browser as a file")
    p.add_argument("--callers", metavar="FUNC",
                   help="html: open on the callers view of FUNC (a glob; the first function "
                   "it matches)")
    add_call_filters(p, shape=True)
    add_symbols_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    session = SessionReader(args.session)
    suffix, mode, counted, viewer = FORMATS[args.format]
    writer = importlib.import_module(f"ada.tracer.analysis.exports.{args.format}").write
    if args.open and viewer is None:
        raise CliError(f"--open: no viewer opens {args.format} from here; "
                       "use perfetto, chrome, speedscope or html")
    extra = {}
    if args.callers is not None:
        if args.format != "html":
            raise CliError("--callers is for --format html")
        extra["callers"] = callers_name(session, args.callers)
    out = Path(args.output or f"{session.path.name}{suffix}")
    selection = call_filter(args)
    total = sum(len(t) for t in selection.threads(session))
    progress = Progress(f"export {args.format}", total)
    if mode == "d":
        if out.exists() and not out.is_dir():
            raise CliError(f"{out}: exists and is not a directory")
        decoder = decoder_for(session, args)
        try:
            count = writer(session, selection, out, progress.step, decoder)
        except OSError as e:
            raise CliError(f"{e.filename or out}: {e.strerror}") from None
        finish_decoder(decoder)
    else:
        if out.is_dir():
            raise CliError(f"{out}: is a directory")
        try:
            with open(out, "w" + mode, **({"encoding": "utf-8"} if mode == "t" else {})) as f:
                if args.format == "perfetto":  # the one format that shows arguments
                    decoder = decoder_for(session, args)
                    count = writer(session, selection, f, progress.step, decoder)
                    finish_decoder(decoder)
                else:
                    count = writer(session, selection, f, progress.step, **extra)
        except OSError as e:
            raise CliError(f"{out}: {e.strerror}") from None
    progress.done()
    print(f"{out}: {count:,} {counted}", file=sys.stderr)
    if args.format == "chrome" and count > VIEWER_LIMIT:
        print(f"ada export: warning: {count:,} events: JSON trace viewers slow down and fail "
              f"past about {VIEWER_LIMIT:,}; narrow it (--tid, --from-ns/--to-ns, -F, "
              "-D, -t) or use --format perfetto", file=sys.stderr)
    if args.open and viewer == "file":
        open_file(out)
    elif args.open:
        serve_to_viewer(out, viewer)
    return 0


def callers_name(session: SessionReader, pattern: str) -> str:
    """The name of the first function (by name) that `pattern` matches."""
    from ..analysis.filters import function_names, matching_ids
    names = function_names(session)
    ids = matching_ids(names, [pattern])
    if len(ids) == 0:
        raise CliError(f"--callers {pattern}: no function of the session matches it")
    return sorted(names[int(f)] for f in ids)[0]


def open_file(path: Path) -> None:
    """Open a page in the browser, or say where it is."""
    import webbrowser
    url = path.resolve().as_uri()
    opened = webbrowser.open(url)
    print(f"{'opened' if opened else 'open this in a browser'}: {url}", file=sys.stderr)
