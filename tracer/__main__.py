"""`python -m tracer` is the `ada` command."""

from .cli import entry_point

entry_point()
