"""The `ada` command: one module per subcommand, one error path for all of them.

Library errors (AtfError) and usage errors (CliError) print one line on stderr
and exit 1; a traceback appears only with --debug.

A subcommand's module is imported only when that subcommand runs (or its help is asked for):
`ada trace` does not load the reading side's modules, nor `ada info` Frida, so each starts in
the time its own work needs, and `ada info/dump/verify` run where Frida cannot load.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Callable, NoReturn

from ada.atf import AtfError

from ..errors import TracerError

# Each subcommand: its module here (which defines configure(parser) and run(args)), and the
# line `ada --help` shows for it.
COMMANDS = {
    "trace": "record calls and returns of a live process",
    "info": "summarise a recorded session",
    "dump": "print events in timestamp order",
    "report": "time spent per function: total, self, calls, avg/min/max",
    "replay": "the call tree in time order, with durations",
    "graph": "the call graph: each call path with its calls and total time",
    "export": "write the calls for Perfetto, Chrome, flame graphs, speedscope, Parquet",
    "view": "show the session in the Perfetto UI, served from this machine (offline)",
    "query": "SQL (DuckDB) over the session: events, calls, functions, threads",
    "verify": "check a session's files, checksums and links",
}


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line on stderr (exit 2), pointing at --help.

    `arguments` adds a subcommand's arguments when that subcommand is the one parsed (or its
    help is asked for), so its module is imported only then.
    """

    def __init__(self, *args: Any,
                 arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._arguments is not None:
            add, self._arguments = self._arguments, None
            add(self)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ada", description="Record native function calls with Frida and read the traces.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name, summary in COMMANDS.items():
        sub.add_parser(name, help=summary, arguments=lambda p, name=name: configure(name, p))
    return parser


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Import subcommand `name`'s module and let it describe itself and its arguments."""
    importlib.import_module(f"{__name__}.{name}").configure(p)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except TracerError as e:  # a subcommand's arguments could not be set up (trace without Frida)
        print(f"ada: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C as a subcommand's modules load: nothing was done
        return 130
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except (AtfError, TracerError) as e:
        if args.debug:
            raise
        print(f"ada {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ada dump ... | head`: the reader went away; that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def entry_point() -> None:
    try:
        sys.exit(main())
    except Exception as e:  # Ctrl-C inside an import can come out wrapped (RuntimeError)
        if not _interrupted(e):
            raise
        sys.exit(130)


def _interrupted(e: BaseException | None) -> bool:
    """Whether `e` is, or was caused by, Ctrl-C: dataclasses turn a KeyboardInterrupt in a
    class's creation into a RuntimeError ("Error calling __set_name__"), as an emulated
    machine's slow imports showed."""
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False
