"""Small helpers shared by the subcommands."""

from __future__ import annotations

import argparse

from ..errors import TracerError


class CliError(TracerError):
    """A usage or environment problem to report in one line (exit 1)."""


def non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a value >= 0, got {value}")
    return value


def format_duration_ns(ns: int) -> str:
    return f"{ns / 1e9:.6f} s"
