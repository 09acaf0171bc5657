"""The `ada` command: one module per subcommand, one error path for all of them.

Library errors (AtfError) and usage errors (CliError) print one line on stderr
and exit 1; a traceback appears only with --debug.

Reading never needs Frida: only `ada trace` imports tracer.record (which imports frida), and
only once its own arguments are parsed, so `ada info/dump/verify` run where Frida cannot load.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, NoReturn

from ada.atf import AtfError

from ..errors import TracerError
from . import dump, export, graph, info, query, replay, report, trace, verify, view

COMMANDS = (trace, info, dump, report, replay, graph, export, view, query, verify)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line on stderr (exit 2), pointing at --help.

    `arguments` adds a subcommand's arguments when that subcommand is the one parsed (or its
    help is asked for), so what they import is imported only then.
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
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except TracerError as e:  # a subcommand's arguments could not be set up (trace without Frida)
        print(f"ada: error: {e}", file=sys.stderr)
        return 1
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
    sys.exit(main())
