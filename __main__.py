"""`python -m ada`, and the installed `ada` script, are the `ada` command."""

import os
import signal
import sys


def main() -> None:
    """The command. Its modules (numpy's among them) take seconds to load on a slow machine,
    and Ctrl-C inside a C extension's import comes out as an ImportError with a page of
    advice: so Ctrl-C waits until they are loaded and then exits 130 (a second one at once)."""
    asked: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        if asked:
            os._exit(130)  # nothing has been done yet
        asked.append(signum)

    previous = signal.signal(signal.SIGINT, on_sigint)
    from .tracer.cli import entry_point
    signal.signal(signal.SIGINT, previous)
    if asked:
        sys.exit(130)
    entry_point()


if __name__ == "__main__":
    main()
