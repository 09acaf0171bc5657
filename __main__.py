"""`python -m ada` is the `ada` command."""

from .tracer.cli import entry_point

entry_point()
