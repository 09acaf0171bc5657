"""TracerError: a problem with the target, the device or the user's input, told in one line."""

from __future__ import annotations

import frida
from frida.core import RPCException

# Every error the frida bindings raise for a target or device problem.
FRIDA_ERRORS: tuple[type[BaseException], ...] = tuple(
    getattr(frida, name) for name in dir(frida)
    if name.endswith("Error") and isinstance(getattr(frida, name), type)) + (RPCException,)


class TracerError(Exception):
    """Reported by the CLI as `ada <command>: error: <message>` with exit status 1."""


def describe_frida_error(e: BaseException) -> str:
    """A frida error as a short sentence (frida's own text, first line only)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.removeprefix("Error: ")  # an exception the agent threw, relayed by RPC
    return text[0].lower() + text[1:] if text[:1].isupper() and not text[:2].isupper() else text
