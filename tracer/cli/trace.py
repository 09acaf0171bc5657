"""`ada trace`: record a live process (implemented with the recording issue)."""

from __future__ import annotations

import argparse

from .common import CliError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="record function calls of a live process")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    raise CliError("recording is not available yet")
